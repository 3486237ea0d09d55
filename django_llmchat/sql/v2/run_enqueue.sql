-- llmchat_run_enqueue_v2: llmchat_run_enqueue_v1, and the first attempt of a run it starts
-- opened in the same call.
--
-- Its transitions are llmchat_run_enqueue_v1's (admit, start), and for a started run
-- p_attempt (a llmchat_usage row as JSON, status 'pending') is written.
--
-- The caller read the chat's path before the call, built the run's first request from it
-- and estimated its input: p_attempt is that attempt's pending usage row, so a process
-- dying during the provider call leaves it on the ledger. It is written only when the
-- run started (nothing ahead of it) and the path is still the one read: its active leaf
-- p_after, p_count messages, the highest id p_top (the prompt aside). Otherwise nothing
-- of it is written (attempt_id NULL) and the caller reads the path again.
CREATE OR REPLACE FUNCTION llmchat_run_enqueue_v2(
    p_chat bigint,
    p_prompt jsonb,
    p_run jsonb,
    p_start boolean,
    p_wait boolean,
    p_worker text,
    p_now timestamptz,
    p_lease_until timestamptz,
    p_queued_offset bigint,
    p_attempt jsonb,
    p_after bigint,
    p_count bigint,
    p_top bigint,
    OUT outcome text,
    OUT run_id bigint,
    OUT prompt_id bigint,
    OUT claimed boolean,
    OUT behind boolean,
    OUT prompt_parent bigint,
    OUT chat_status text,
    OUT attempt_id bigint
)
LANGUAGE plpgsql
AS $$
DECLARE
    attempt llmchat_usage;
    seen bigint;
    top bigint;
BEGIN
    SELECT e.outcome, e.run_id, e.prompt_id, e.claimed, e.behind, e.prompt_parent,
           e.chat_status
      INTO outcome, run_id, prompt_id, claimed, behind, prompt_parent, chat_status
      FROM llmchat_run_enqueue_v1(p_chat, p_prompt, p_run, p_start, p_wait, p_worker, p_now,
                                  p_lease_until, p_queued_offset) e;
    IF p_attempt IS NULL OR NOT coalesce(claimed, false)
       OR prompt_parent IS DISTINCT FROM p_after THEN
        RETURN;
    END IF;
    SELECT count(*), max(m.id) INTO seen, top FROM llmchat_message m
     WHERE m.chat_id = p_chat AND m.on_path AND m.position < p_queued_offset
       AND m.id IS DISTINCT FROM prompt_id;
    IF seen <> p_count OR top IS DISTINCT FROM p_top THEN
        RETURN;
    END IF;
    attempt := jsonb_populate_record(NULL::llmchat_usage, p_attempt);
    attempt.id := nextval(pg_get_serial_sequence('llmchat_usage', 'id'));
    attempt.run_id := run_id;
    INSERT INTO llmchat_usage VALUES (attempt.*);
    attempt_id := attempt.id;
END;
$$;

COMMENT ON FUNCTION llmchat_run_enqueue_v2(
    bigint, jsonb, jsonb, boolean, boolean, text, timestamptz, timestamptz, bigint, jsonb,
    bigint, bigint, bigint
) IS '(none) -> queued | running: as llmchat_run_enqueue_v1, and a started run''s first attempt opened (its pending usage row)';
