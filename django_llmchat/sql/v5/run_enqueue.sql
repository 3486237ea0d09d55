-- llmchat_run_enqueue_v5: a prompt and the run answering it, admitted in one call, and
-- the first attempt of a run it starts opened in the same call. The version of
-- llmchat_run_enqueue_v4 (which stays installed for the processes of the releases calling
-- it) that functions of version 5 have: the same, and p_synchronous.
--
-- p_synchronous false: this transaction's commit does not wait for its WAL to reach the
-- disk (synchronous_commit off for this transaction alone). The caller passes it for a
-- run it answers itself, right after, in its own transaction: the run's end commits
-- synchronously and so makes this one durable with it (the WAL is flushed in order); a
-- crash of the database server between the two loses both, as if the ask had failed
-- before it began, and the caller, still in the call, gets the error. Everything else
-- sees the admission at once, as ever, and a crash of the caller's process loses nothing.
--
-- transition: admit (none) -> queued  a run is ahead of it, or p_start is false
-- transition: start (none) -> running  p_start and nothing ahead: claimed by the caller
--
-- p_new_chat (a llmchat_chat row as JSON, its values prepared by Django) instead of
-- p_chat: the chat is inserted here, with the prompt and its run; nobody else can see it
-- before this call commits, so it has no lock to wait for, no run ahead and an empty
-- path. Its id is new_chat_id.
--
-- Otherwise the chat's row lock first (every transition of a chat takes it first: here
-- FOR NO KEY UPDATE, which the chat's one UPDATE at the end keeps), then the chat's next
-- run (its head), the prompt (p_prompt: a llmchat_message row as JSON, its values already
-- prepared by Django: encrypted, redacted), the run (p_run: a llmchat_run row as JSON)
-- and the chat's cached status with its updated_at, in one UPDATE. The prompt follows the
-- chat's active leaf (its parent); one asked while a run is ahead reads after everything
-- else (its position + p_queued_offset) and gets its parent when its own run starts.
--
-- The caller read the chat's path before the call, built the run's first request from it
-- and estimated its input: p_attempt is that attempt's pending usage row (a llmchat_usage
-- row as JSON, status 'pending'), so a process dying during the provider call leaves it
-- on the ledger. It is written only when the run started (nothing ahead of it) and the
-- path is still the one read: its active leaf p_after, p_count messages, the highest id
-- p_top (the prompt aside). Otherwise nothing of it is written (attempt_id NULL) and the
-- caller reads the path again.
--
-- p_key (a llmchat_idempotency_key row as JSON, its values prepared by Django): the key of
-- the request admitting the run (an Idempotency-Key header, an AI SDK client's message
-- id), inserted with the run (its run_id); a key already stored (the unique constraint on
-- user, chat, scope and key) fails the call and writes nothing: a racing request with the
-- same key got there first. Its id is key_id.
--
-- outcome: 'admitted'; 'no_chat' (no such chat: nothing written); 'paused' (p_wait and
-- the chat's run waits for a tool-call decision: nothing written).
CREATE OR REPLACE FUNCTION llmchat_run_enqueue_v5(
    p_chat bigint,
    p_new_chat jsonb,
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
    p_key jsonb,
    p_synchronous boolean,
    OUT outcome text,
    OUT new_chat_id bigint,
    OUT run_id bigint,
    OUT prompt_id bigint,
    OUT claimed boolean,
    OUT behind boolean,
    OUT prompt_parent bigint,
    OUT chat_status text,
    OUT attempt_id bigint,
    OUT key_id bigint
)
LANGUAGE plpgsql
AS $$
DECLARE
    chat llmchat_chat;
    head llmchat_run;
    prompt llmchat_message;
    run llmchat_run;
    attempt llmchat_usage;
    idem llmchat_idempotency_key;
    v_chat bigint := p_chat;
    seen bigint;
    top bigint;
BEGIN
    IF NOT p_synchronous THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF p_new_chat IS NOT NULL THEN
        chat := jsonb_populate_record(NULL::llmchat_chat, p_new_chat);
        chat.id := nextval(pg_get_serial_sequence('llmchat_chat', 'id'));
        INSERT INTO llmchat_chat VALUES (chat.*);
        v_chat := chat.id;
        new_chat_id := chat.id;
        behind := false;
    ELSE
        PERFORM 1 FROM llmchat_chat WHERE id = v_chat FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            outcome := 'no_chat';
            RETURN;
        END IF;
        SELECT * INTO head FROM llmchat_run
         WHERE chat_id = v_chat AND status IN ('queued', 'running', 'awaiting_approval')
         ORDER BY id LIMIT 1;
        behind := FOUND;
        IF p_wait AND behind AND head.status = 'awaiting_approval' THEN
            outcome := 'paused';
            RETURN;
        END IF;
    END IF;
    IF p_prompt IS NOT NULL THEN
        prompt := jsonb_populate_record(NULL::llmchat_message, p_prompt);
        prompt.id := nextval(pg_get_serial_sequence('llmchat_message', 'id'));
        prompt.chat_id := v_chat;
        IF behind THEN  -- its parent is given when it is placed
            prompt.position := prompt.position + p_queued_offset;
        ELSIF p_new_chat IS NULL THEN  -- it follows the active leaf (a new chat has none)
            prompt.parent_id := (llmchat_run_leaf_v1(v_chat, p_queued_offset)).leaf_id;
            prompt_parent := prompt.parent_id;
        END IF;
        INSERT INTO llmchat_message VALUES (prompt.*);
        prompt_id := prompt.id;
    END IF;
    run := jsonb_populate_record(NULL::llmchat_run, p_run);
    run.id := nextval(pg_get_serial_sequence('llmchat_run', 'id'));
    run.chat_id := v_chat;
    run.prompt_id := prompt_id;
    claimed := p_start AND NOT behind;
    IF claimed THEN
        run.status := 'running';
        run.attempt := 1;
        run.started_at := p_now;
        run.worker := p_worker;
        run.lease_expires_at := p_lease_until;
    ELSIF p_wait THEN
        run.worker := p_worker;
        run.lease_expires_at := p_lease_until;
    END IF;
    INSERT INTO llmchat_run VALUES (run.*);
    run_id := run.id;
    IF p_key IS NOT NULL THEN  -- the request's key, with the run it admitted
        idem := jsonb_populate_record(NULL::llmchat_idempotency_key, p_key);
        idem.id := nextval(pg_get_serial_sequence('llmchat_idempotency_key', 'id'));
        idem.chat_id := v_chat;
        idem.run_id := run.id;
        INSERT INTO llmchat_idempotency_key VALUES (idem.*);
        key_id := idem.id;
    END IF;
    IF claimed THEN
        chat_status := 'running';
    ELSIF NOT behind THEN
        chat_status := 'queued';
    ELSE
        chat_status := head.status;
    END IF;
    UPDATE llmchat_chat
       SET updated_at = now(),
           status = CASE WHEN behind THEN status ELSE chat_status END,
           active_run_id = CASE WHEN claimed THEN run.id ELSE active_run_id END
     WHERE id = v_chat;
    outcome := 'admitted';
    IF p_attempt IS NULL OR NOT claimed OR prompt_parent IS DISTINCT FROM p_after THEN
        RETURN;
    END IF;
    IF p_new_chat IS NULL THEN
        SELECT count(*), max(m.id) INTO seen, top FROM llmchat_message m
         WHERE m.chat_id = v_chat AND m.on_path AND m.position < p_queued_offset
           AND m.id IS DISTINCT FROM prompt_id;
        IF seen <> p_count OR top IS DISTINCT FROM p_top THEN
            RETURN;
        END IF;
    ELSIF p_count <> 0 OR p_top IS NOT NULL THEN
        RETURN;
    END IF;
    attempt := jsonb_populate_record(NULL::llmchat_usage, p_attempt);
    attempt.id := nextval(pg_get_serial_sequence('llmchat_usage', 'id'));
    attempt.chat_id := v_chat;
    attempt.run_id := run_id;
    INSERT INTO llmchat_usage VALUES (attempt.*);
    attempt_id := attempt.id;
END;
$$;

COMMENT ON FUNCTION llmchat_run_enqueue_v5(
    bigint, jsonb, jsonb, jsonb, boolean, boolean, text, timestamptz, timestamptz, bigint,
    jsonb, bigint, bigint, bigint, jsonb, boolean
) IS '(none) -> queued | running: a prompt and the run answering it (and a new chat''s row, the request''s idempotency key), admitted (and started when nothing is ahead), a started run''s first attempt opened (its pending usage row); its commit waits for the disk unless p_synchronous is false';
