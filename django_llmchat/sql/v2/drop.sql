-- What migration 0003_run_functions_v2 installed, removed (its reverse).
DROP FUNCTION IF EXISTS llmchat_run_store_last_step_v2(
    bigint, integer, bigint, jsonb, jsonb, text, text
);
