-- What migration 0015 installed, removed (its reverse).
DROP FUNCTION IF EXISTS llmchat_run_enqueue_v2(
    bigint, jsonb, jsonb, boolean, boolean, text, timestamptz, timestamptz, bigint, jsonb,
    bigint, bigint, bigint
);
