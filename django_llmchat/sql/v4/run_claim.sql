-- llmchat_run_claim_v4: take the chat's next run (its oldest unfinished one), in one call,
-- and open the first attempt of a queued run it starts. The version of
-- llmchat_run_claim_v1 (which stays installed for the processes of the releases calling
-- it) that functions of version 4 have: the same, and p_attempt.
--
-- transition: claim queued -> running  a queued run started (its prompt moved into place)
-- transition: take_over running -> running  a run whose lease ran out (its process died)
--     taken over, attempt + 1, the attempts its process left pending marked 'lost'
--
-- The chat's row lock first, then its head run. outcome:
--   'taken'    the head was taken: the OUT columns are the run as it now is, and
--              taken_over says it was running (previous_worker: whose it was);
--   'nothing'  no such chat, or no unfinished run;
--   'paused'   the head waits for a tool-call decision;
--   'busy'     another process works on the head, or waits for it in-process (its lease
--              is live: lease_expires_at says until when);
--   'statements'  nothing written: a case the caller runs as statements (the caller
--              waits for a run behind the head; the head lost its worker
--              p_max_attempts times and is given up).
--
-- The caller (a worker, before its claim) read the chat's path, built the run's first
-- request from it and estimated its input: p_attempt is that attempt's pending usage row
-- (a llmchat_usage row as JSON, status 'pending'), so a process dying during the provider
-- call leaves it on the ledger, as the admission's first attempt does. It is written
-- (attempt_id) only when the call starts a queued run whose prompt is the path's last
-- message as read, p_top (its highest id), and the path is still p_count messages with
-- that highest id; otherwise nothing of it is written and the caller reads the path again.
CREATE OR REPLACE FUNCTION llmchat_run_claim_v4(
    p_chat bigint,
    p_run bigint,
    p_waiting boolean,
    p_worker text,
    p_task_id text,
    p_now timestamptz,
    p_lease_until timestamptz,
    p_max_attempts integer,
    p_clock bigint,
    p_queued_offset bigint,
    p_attempt jsonb,
    p_count bigint,
    p_top bigint,
    OUT outcome text,
    OUT taken_over boolean,
    OUT previous_worker text,
    OUT id bigint,
    OUT chat_id bigint,
    OUT prompt_id bigint,
    OUT status text,
    OUT attempt integer,
    OUT steps integer,
    OUT worker text,
    OUT task_id text,
    OUT cancel_requested boolean,
    OUT interrupt_reason text,
    OUT error text,
    OUT error_type text,
    OUT lease_expires_at timestamptz,
    OUT started_at timestamptz,
    OUT created_at timestamptz,
    OUT finished_at timestamptz,
    OUT attempt_id bigint
)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    head llmchat_run;
    opened llmchat_usage;
    seen bigint;
    top bigint;
BEGIN
    UPDATE llmchat_chat SET updated_at = now() WHERE llmchat_chat.id = p_chat;
    IF NOT FOUND THEN
        outcome := 'nothing';
        RETURN;
    END IF;
    SELECT * INTO head FROM llmchat_run r
     WHERE r.chat_id = p_chat AND r.status IN ('queued', 'running', 'awaiting_approval')
     ORDER BY r.id LIMIT 1;
    IF NOT FOUND THEN
        outcome := 'nothing';
        RETURN;
    END IF;
    IF p_run IS NOT NULL AND head.id <> p_run THEN
        IF p_waiting THEN
            outcome := 'statements';
            RETURN;
        END IF;
        p_run := NULL;  -- a task answers what is ahead of its run first, in order
    END IF;
    lease_expires_at := head.lease_expires_at;
    IF head.status = 'awaiting_approval' THEN
        outcome := 'paused';
        RETURN;
    END IF;
    IF head.lease_expires_at IS NOT NULL AND head.lease_expires_at > p_now
       AND (head.status = 'running' OR p_run IS NULL OR head.id <> p_run) THEN
        outcome := 'busy';
        status := head.status;
        RETURN;
    END IF;
    IF head.status = 'running' AND head.attempt >= p_max_attempts THEN
        outcome := 'statements';
        RETURN;
    END IF;
    taken_over := head.status = 'running';
    previous_worker := head.worker;
    UPDATE llmchat_run r
       SET status = 'running', attempt = head.attempt + 1, worker = p_worker,
           lease_expires_at = p_lease_until,
           cancel_requested = CASE WHEN head.status = 'queued' THEN false
                                   ELSE head.cancel_requested END,
           started_at = coalesce(head.started_at, p_now),
           task_id = CASE WHEN p_task_id <> '' THEN p_task_id ELSE head.task_id END
     WHERE r.id = head.id AND r.status IN ('queued', 'running') AND r.attempt = head.attempt
    RETURNING * INTO head;
    IF taken_over THEN
        UPDATE llmchat_usage u
           SET status = 'lost',
               error = 'The process making this attempt stopped before the attempt ended.'
         WHERE u.run_id = head.id AND u.status = 'pending';
    ELSE  -- the prompt reads after the chat's messages from the moment its run starts
        PERFORM llmchat_run_place_prompt_v1(p_chat, head.prompt_id, p_clock, p_queued_offset);
        -- the first attempt, made ready on the path read before the call: its last
        -- message the run's prompt, the path unchanged since
        IF p_attempt IS NOT NULL AND head.prompt_id = p_top THEN
            SELECT count(*), max(m.id) INTO seen, top FROM llmchat_message m
             WHERE m.chat_id = p_chat AND m.on_path AND m.position < p_queued_offset;
            IF seen = p_count AND top = p_top THEN
                opened := jsonb_populate_record(NULL::llmchat_usage, p_attempt);
                opened.id := nextval(pg_get_serial_sequence('llmchat_usage', 'id'));
                opened.chat_id := p_chat;
                opened.run_id := head.id;
                INSERT INTO llmchat_usage VALUES (opened.*);
                attempt_id := opened.id;
            END IF;
        END IF;
    END IF;
    UPDATE llmchat_chat SET status = 'running', active_run_id = head.id
     WHERE llmchat_chat.id = p_chat;
    outcome := 'taken';
    id := head.id;
    chat_id := head.chat_id;
    prompt_id := head.prompt_id;
    status := head.status;
    attempt := head.attempt;
    steps := head.steps;
    worker := head.worker;
    task_id := head.task_id;
    cancel_requested := head.cancel_requested;
    interrupt_reason := head.interrupt_reason;
    error := head.error;
    error_type := head.error_type;
    lease_expires_at := head.lease_expires_at;
    started_at := head.started_at;
    created_at := head.created_at;
    finished_at := head.finished_at;
END;
$$;

COMMENT ON FUNCTION llmchat_run_claim_v4(
    bigint, bigint, boolean, text, text, timestamptz, timestamptz, integer, bigint, bigint,
    jsonb, bigint, bigint
) IS 'queued -> running; running (lease run out) -> running: the chat''s next run taken (a started run''s first attempt opened)';
