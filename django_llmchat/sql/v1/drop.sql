-- What migration 0013 installed, removed (its reverse).
DROP FUNCTION IF EXISTS llmchat_run_enqueue_v1(
    bigint, jsonb, jsonb, boolean, boolean, text, timestamptz, timestamptz, bigint
);
DROP FUNCTION IF EXISTS llmchat_run_store_last_step_v1(bigint, integer, bigint, jsonb, jsonb);
DROP FUNCTION IF EXISTS llmchat_run_claim_v1(
    bigint, bigint, boolean, text, text, timestamptz, timestamptz, integer, bigint, bigint
);
