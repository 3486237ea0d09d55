-- llmchat_run_leaf_v1, again: the chat's active leaf, (id, position): the last message on
-- its path that is part of the tree (no system message, no prompt still queued), or NULLs.
-- The same function as version 1's (its arguments, its result), in PL/pgSQL: its plan is
-- prepared once per connection, where the SQL function's was planned at every call
-- (about 0.15 ms of the admission's call).
CREATE OR REPLACE FUNCTION llmchat_run_leaf_v1(
    p_chat bigint, p_queued_offset bigint, OUT leaf_id bigint, OUT leaf_position bigint
)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    SELECT m.id, m.position INTO leaf_id, leaf_position FROM llmchat_message m
     WHERE m.chat_id = p_chat AND m.on_path AND m.position < p_queued_offset
       AND m.role <> 'system'
     ORDER BY m.position DESC, m.id DESC
     LIMIT 1;
END;
$$;

COMMENT ON FUNCTION llmchat_run_leaf_v1(bigint, bigint)
IS 'shared: the chat''s active leaf (the last message of its path)';
