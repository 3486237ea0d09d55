-- What migration 0007_run_functions_v5 installed, removed (its reverse).
DROP FUNCTION IF EXISTS llmchat_run_enqueue_v5(
    bigint, jsonb, jsonb, jsonb, boolean, boolean, text, timestamptz, timestamptz, bigint,
    jsonb, bigint, bigint, bigint, jsonb, boolean
);
