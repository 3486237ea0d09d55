-- llmchat_run_interrupt_v1: stop the chat's current run (its oldest unfinished one), in
-- one call.
--
--   running -> running, cancel_requested   its process stops at its next poll ('asked')
-- transition: stop_cancelled queued -> cancelled  ended now, its prompt placed ('ended')
-- transition: stop_interrupted queued -> interrupted  as stop_cancelled
--
-- The chat's row lock first, then its head run (only run p_run when given). outcome:
-- 'asked', 'ended' (stopped: the run; next_*: the chat's next run), 'none' (no run to
-- stop, or a stop was asked for already: the first request wins), 'statements' (the run
-- waits for tool-call decisions: its waiting calls get error results first, which the
-- caller writes as statements; nothing written).
CREATE OR REPLACE FUNCTION llmchat_run_interrupt_v1(
    p_chat bigint,
    p_run bigint,
    p_reason text,
    p_status text,
    p_clock bigint,
    p_queued_offset bigint,
    OUT outcome text,
    OUT stopped bigint,
    OUT next_run bigint,
    OUT next_status text,
    OUT next_lease timestamptz
)
LANGUAGE plpgsql
AS $$
DECLARE
    head llmchat_run;
    following llmchat_run;
BEGIN
    IF p_status NOT IN ('cancelled', 'interrupted') THEN
        RAISE EXCEPTION 'llmchat_run_interrupt_v1: a stopped run does not go to %', p_status;
    END IF;
    outcome := 'none';
    UPDATE llmchat_chat c SET updated_at = now() WHERE c.id = p_chat;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO head FROM llmchat_run r
     WHERE r.chat_id = p_chat AND r.status IN ('queued', 'running', 'awaiting_approval')
     ORDER BY r.id LIMIT 1;
    IF NOT FOUND OR (p_run IS NOT NULL AND head.id <> p_run) THEN
        RETURN;
    END IF;
    IF head.status = 'running' THEN
        UPDATE llmchat_run r SET cancel_requested = true, interrupt_reason = p_reason
         WHERE r.id = head.id AND r.status = 'running' AND NOT r.cancel_requested;
        IF FOUND THEN
            outcome := 'asked';
        END IF;
        RETURN;
    END IF;
    IF head.status = 'awaiting_approval' THEN
        outcome := 'statements';
        RETURN;
    END IF;
    UPDATE llmchat_run r
       SET status = p_status, interrupt_reason = p_reason, finished_at = now(),
           lease_expires_at = NULL
     WHERE r.id = head.id AND r.status = 'queued';
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM llmchat_run_place_prompt_v1(p_chat, head.prompt_id, p_clock, p_queued_offset);
    following := llmchat_run_release_v1(p_chat, head.id);
    stopped := head.id;
    next_run := following.id;
    next_status := following.status;
    next_lease := following.lease_expires_at;
    outcome := 'ended';
END;
$$;

COMMENT ON FUNCTION llmchat_run_interrupt_v1(bigint, bigint, text, text, bigint, bigint)
IS 'running -> running (cancel requested); queued -> cancelled | interrupted: the chat''s current run stopped';
