-- What migration 0002_run_functions installed, removed (its reverse).
DROP FUNCTION IF EXISTS llmchat_run_enqueue_v1(
    bigint, jsonb, jsonb, boolean, boolean, text, timestamptz, timestamptz, bigint, jsonb,
    bigint, bigint, bigint
);
DROP FUNCTION IF EXISTS llmchat_run_store_last_step_v1(bigint, integer, bigint, jsonb, jsonb);
DROP FUNCTION IF EXISTS llmchat_run_claim_v1(
    bigint, bigint, boolean, text, text, timestamptz, timestamptz, integer, bigint, bigint
);
DROP FUNCTION IF EXISTS llmchat_run_end_v1(
    bigint, integer, bigint, text, text, text, text, timestamptz, bigint, bigint
);
DROP FUNCTION IF EXISTS llmchat_run_release_v1(bigint, bigint);
DROP FUNCTION IF EXISTS llmchat_run_place_prompt_v1(bigint, bigint, bigint, bigint);
DROP FUNCTION IF EXISTS llmchat_run_interrupt_v1(bigint, bigint, text, text, bigint, bigint);
DROP FUNCTION IF EXISTS llmchat_run_leaf_v1(bigint, bigint);
