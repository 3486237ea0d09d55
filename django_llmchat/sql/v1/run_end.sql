-- llmchat_run_end_v1: a run this process works on ends, pauses or goes back to the
-- queue, in one call.
--
-- transition: succeed running -> succeeded  (finish)
-- transition: fail running -> failed  (finish)
-- transition: cancel running -> cancelled  (finish)
-- transition: interrupt running -> interrupted  (finish)
-- transition: pause running -> awaiting_approval  (decisions wanted)
-- transition: requeue running -> queued  (a retry later)
--
-- A p_status no transition above goes to is refused. The chat's row lock first, then the
-- fenced UPDATE of the run (this run, this attempt, still running): when it matches no
-- row the run is not the caller's any more and nothing is written (outcome 'lost'). A
-- NULL p_error_type, p_error, p_interrupt_reason or p_finished_at leaves that column as
-- it is. A finished run's prompt, if it still waits in the queue's place, moves after the
-- chat's messages; the run lets go of the chat, and the chat's next run is returned
-- (outcome 'ended').
CREATE OR REPLACE FUNCTION llmchat_run_end_v1(
    p_run bigint,
    p_attempt integer,
    p_chat bigint,
    p_status text,
    p_error_type text,
    p_error text,
    p_interrupt_reason text,
    p_finished_at timestamptz,
    p_clock bigint,
    p_queued_offset bigint,
    OUT outcome text,
    OUT next_run bigint,
    OUT next_status text,
    OUT next_lease timestamptz
)
LANGUAGE plpgsql
AS $$
DECLARE
    prompt bigint;
    head llmchat_run;
BEGIN
    IF p_status NOT IN ('succeeded', 'failed', 'cancelled', 'interrupted', 'awaiting_approval',
                        'queued') THEN
        RAISE EXCEPTION 'llmchat_run_end_v1: a running run does not go to %', p_status;
    END IF;
    UPDATE llmchat_chat c SET updated_at = now() WHERE c.id = p_chat;
    UPDATE llmchat_run r
       SET status = p_status, lease_expires_at = NULL,
           error_type = coalesce(p_error_type, r.error_type),
           error = coalesce(p_error, r.error),
           interrupt_reason = coalesce(p_interrupt_reason, r.interrupt_reason),
           finished_at = coalesce(p_finished_at, r.finished_at)
     WHERE r.id = p_run AND r.attempt = p_attempt AND r.status = 'running'
    RETURNING r.prompt_id INTO prompt;
    IF NOT FOUND THEN
        outcome := 'lost';
        RETURN;
    END IF;
    IF p_status IN ('succeeded', 'failed', 'cancelled', 'interrupted') THEN
        PERFORM llmchat_run_place_prompt_v1(p_chat, prompt, p_clock, p_queued_offset);
    END IF;
    head := llmchat_run_release_v1(p_chat, p_run);
    next_run := head.id;
    next_status := head.status;
    next_lease := head.lease_expires_at;
    outcome := 'ended';
END;
$$;

COMMENT ON FUNCTION llmchat_run_end_v1(
    bigint, integer, bigint, text, text, text, text, timestamptz, bigint, bigint
) IS 'running -> succeeded | failed | cancelled | interrupted | awaiting_approval | queued: a run ends, pauses or goes back to the queue (fenced by its attempt)';
