-- What migration 0004_run_functions_v3 installed, removed (its reverse).
DROP FUNCTION IF EXISTS llmchat_run_store_last_step_v3(
    bigint, integer, bigint, jsonb, jsonb, text, text
);
DROP FUNCTION IF EXISTS llmchat_run_enqueue_v3(
    bigint, jsonb, jsonb, jsonb, boolean, boolean, text, timestamptz, timestamptz, bigint,
    jsonb, bigint, bigint, bigint
);
