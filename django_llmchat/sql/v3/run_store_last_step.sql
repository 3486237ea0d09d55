-- llmchat_run_store_last_step_v3: a run's last provider response stored, and the run
-- ended, in one call. Version 3 of llmchat_run_store_last_step (v1 and v2 stay installed
-- for the processes of the releases calling them): the same as v2, the chat's row written
-- once (its lock taken FOR NO KEY UPDATE, then one UPDATE: updated_at, its status, its
-- active run, its automatic title), where v2 updated it two to four times.
--
-- transition: succeed running -> succeeded  fenced: this run, this attempt, still running
--
-- The chat's row lock first (reading whether it is untitled), then the fenced UPDATE of
-- the run (its steps counted, its lease dropped): when it matches no row the run is not
-- the caller's any more (another process took it over, or it was stopped) and nothing is
-- written (outcome 'lost'). Otherwise the reply (p_message: a llmchat_message row as
-- JSON, its values already prepared by Django: encrypted, redacted) is inserted, each of
-- the attempt's usage rows (p_usages: [{"row": {...}, "closes": true|false}]) closes its
-- pending row or is inserted, linked to the reply, and the run lets go of the chat: the
-- chat's cached status becomes its next run's (or 'idle'), and active_run is cleared when
-- it was this run. The next run is returned, so the caller can send its task. p_title
-- (not NULL, at most 255 characters): the chat's automatic title, written with the reply
-- (source p_title_source) when the chat is still untitled and its title is not the
-- user's; titled says whether it was.
CREATE OR REPLACE FUNCTION llmchat_run_store_last_step_v3(
    p_run bigint,
    p_attempt integer,
    p_chat bigint,
    p_message jsonb,
    p_usages jsonb,
    p_title text,
    p_title_source text,
    OUT outcome text,
    OUT message_id bigint,
    OUT usage_ids bigint[],
    OUT next_run bigint,
    OUT next_status text,
    OUT next_lease timestamptz,
    OUT titled boolean
)
LANGUAGE plpgsql
AS $$
DECLARE
    reply llmchat_message;
    usage llmchat_usage;
    item jsonb;
    head llmchat_run;
    untitled boolean;
BEGIN
    SELECT c.title = '' AND c.title_source <> 'user' INTO untitled FROM llmchat_chat c
     WHERE c.id = p_chat FOR NO KEY UPDATE;
    UPDATE llmchat_run
       SET steps = steps + 1, status = 'succeeded', finished_at = now(),
           lease_expires_at = NULL
     WHERE id = p_run AND attempt = p_attempt AND status = 'running';
    IF NOT FOUND THEN
        outcome := 'lost';
        RETURN;
    END IF;
    reply := jsonb_populate_record(NULL::llmchat_message, p_message);
    reply.id := nextval(pg_get_serial_sequence('llmchat_message', 'id'));
    INSERT INTO llmchat_message VALUES (reply.*);
    message_id := reply.id;
    usage_ids := ARRAY[]::bigint[];
    FOR item IN SELECT value FROM jsonb_array_elements(coalesce(p_usages, '[]'::jsonb)) LOOP
        usage := jsonb_populate_record(NULL::llmchat_usage, item -> 'row');
        usage.message_id := reply.id;
        IF coalesce((item ->> 'closes')::boolean, false) THEN
            UPDATE llmchat_usage
               SET status = usage.status, provider = usage.provider,
                   model_id = usage.model_id, message_id = usage.message_id,
                   input_tokens = usage.input_tokens, output_tokens = usage.output_tokens,
                   cache_read_tokens = usage.cache_read_tokens,
                   cache_write_tokens = usage.cache_write_tokens,
                   thinking_tokens = usage.thinking_tokens,
                   input_cost = usage.input_cost, output_cost = usage.output_cost,
                   cache_read_cost = usage.cache_read_cost,
                   cache_write_cost = usage.cache_write_cost,
                   thinking_cost = usage.thinking_cost, total_cost = usage.total_cost,
                   duration_ms = usage.duration_ms, first_token_ms = usage.first_token_ms,
                   error = usage.error, estimated = false
             WHERE id = usage.id;
        ELSE
            usage.id := nextval(pg_get_serial_sequence('llmchat_usage', 'id'));
            INSERT INTO llmchat_usage VALUES (usage.*);
        END IF;
        usage_ids := usage_ids || usage.id;
    END LOOP;
    titled := coalesce(untitled AND p_title <> '', false);  -- p_title NULL: no title
    SELECT * INTO head FROM llmchat_run r
     WHERE r.chat_id = p_chat AND r.status IN ('queued', 'running', 'awaiting_approval')
     ORDER BY r.id LIMIT 1;
    UPDATE llmchat_chat c
       SET updated_at = now(), status = coalesce(head.status, 'idle'),
           active_run_id = CASE WHEN c.active_run_id = p_run THEN NULL ELSE c.active_run_id END,
           title = CASE WHEN titled THEN p_title ELSE c.title END,
           title_source = CASE WHEN titled THEN p_title_source ELSE c.title_source END
     WHERE c.id = p_chat;
    next_run := head.id;
    next_status := head.status;
    next_lease := head.lease_expires_at;
    outcome := 'stored';
END;
$$;

COMMENT ON FUNCTION llmchat_run_store_last_step_v3(
    bigint, integer, bigint, jsonb, jsonb, text, text
) IS 'running -> succeeded: the last provider response stored with its usage rows (fenced by the attempt), and an untitled chat''s automatic title, the chat''s row written once';
