-- What migration 0005_run_functions_v4 installed, removed (its reverse).
DROP FUNCTION IF EXISTS llmchat_run_claim_v4(
    bigint, bigint, boolean, text, text, timestamptz, timestamptz, integer, bigint, bigint,
    jsonb, bigint, bigint
);
DROP FUNCTION IF EXISTS llmchat_run_enqueue_v4(
    bigint, jsonb, jsonb, jsonb, boolean, boolean, text, timestamptz, timestamptz, bigint,
    jsonb, bigint, bigint, bigint, jsonb
);
