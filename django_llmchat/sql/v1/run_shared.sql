-- What the transitions share, called inside them (never on their own: the caller holds
-- the chat's row lock).

-- llmchat_run_leaf_v1: the chat's active leaf, (id, position): the last message on its
-- path that is part of the tree (no system message, no prompt still queued), or NULLs.
CREATE OR REPLACE FUNCTION llmchat_run_leaf_v1(
    p_chat bigint, p_queued_offset bigint, OUT leaf_id bigint, OUT leaf_position bigint
)
LANGUAGE sql STABLE
AS $$
    SELECT m.id, m.position FROM llmchat_message m
     WHERE m.chat_id = p_chat AND m.on_path AND m.position < p_queued_offset
       AND m.role <> 'system'
     ORDER BY m.position DESC, m.id DESC
     LIMIT 1
$$;

-- llmchat_run_place_prompt_v1: a prompt stored while an earlier run worked (its position
-- p_queued_offset or more) joins the path from the moment its own run starts or ends
-- unanswered: it follows the chat's active leaf, at p_clock (microseconds since the
-- epoch), or right after the leaf when the clock is not past it.
CREATE OR REPLACE FUNCTION llmchat_run_place_prompt_v1(
    p_chat bigint, p_prompt bigint, p_clock bigint, p_queued_offset bigint
) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    leaf bigint;
    leaf_at bigint;
    placed bigint := p_clock;
BEGIN
    IF p_prompt IS NULL THEN
        RETURN;
    END IF;
    SELECT l.leaf_id, l.leaf_position INTO leaf, leaf_at
      FROM llmchat_run_leaf_v1(p_chat, p_queued_offset) l;
    IF leaf_at IS NOT NULL AND placed <= leaf_at THEN
        placed := leaf_at + 1;
    END IF;
    UPDATE llmchat_message m SET position = placed, parent_id = leaf
     WHERE m.id = p_prompt AND m.position >= p_queued_offset;
END;
$$;

-- llmchat_run_release_v1: run p_run lets go of the chat: the chat's cached status
-- becomes its next run's (its oldest unfinished one) or 'idle', and active_run is
-- cleared when it was p_run. Returns the next run (NULL fields when there is none).
CREATE OR REPLACE FUNCTION llmchat_run_release_v1(p_chat bigint, p_run bigint)
RETURNS llmchat_run
LANGUAGE plpgsql
AS $$
DECLARE
    head llmchat_run;
BEGIN
    SELECT * INTO head FROM llmchat_run r
     WHERE r.chat_id = p_chat AND r.status IN ('queued', 'running', 'awaiting_approval')
     ORDER BY r.id LIMIT 1;
    UPDATE llmchat_chat c SET status = coalesce(head.status, 'idle'), active_run_id = NULL
     WHERE c.id = p_chat AND c.active_run_id = p_run;
    IF NOT FOUND THEN
        UPDATE llmchat_chat c SET status = coalesce(head.status, 'idle') WHERE c.id = p_chat;
    END IF;
    RETURN head;
END;
$$;

COMMENT ON FUNCTION llmchat_run_leaf_v1(bigint, bigint)
IS 'shared: the chat''s active leaf (the last message of its path)';
COMMENT ON FUNCTION llmchat_run_place_prompt_v1(bigint, bigint, bigint, bigint)
IS 'shared: a queued prompt joins the path, after the active leaf';
COMMENT ON FUNCTION llmchat_run_release_v1(bigint, bigint)
IS 'shared: a run lets go of the chat (its cached status, active_run)';
