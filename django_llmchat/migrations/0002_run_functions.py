"""The run transitions as PostgreSQL functions, version 1 (``django_llmchat/sql/v1/``):
``llmchat_run_enqueue_v1``, ``llmchat_run_claim_v1``, ``llmchat_run_store_last_step_v1``,
``llmchat_run_end_v1`` and ``llmchat_run_interrupt_v1``, with what they share
(``llmchat_run_leaf_v1``, ``llmchat_run_place_prompt_v1``, ``llmchat_run_release_v1``).
Nothing on other databases, which run the same transitions as separate statements.

A database migrated before the baseline (``0001_baseline`` replaced its migrations) has
the functions of that chain: they are installed again, and its two enqueue functions,
whose work ``llmchat_run_enqueue_v1`` now does alone, are dropped first.
"""

from django.db import migrations

from django_llmchat.migrations._sql import install

# the enqueue functions of the migrations 0001_baseline replaced (none on a new database)
REPLACED = """
DROP FUNCTION IF EXISTS llmchat_run_enqueue_v2(
    bigint, jsonb, jsonb, boolean, boolean, text, timestamptz, timestamptz, bigint, jsonb,
    bigint, bigint, bigint
);
DROP FUNCTION IF EXISTS llmchat_run_enqueue_v1(
    bigint, jsonb, jsonb, boolean, boolean, text, timestamptz, timestamptz, bigint
);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0001_baseline"),
    ]

    operations = [
        install(
            "v1",
            "run_shared.sql",
            "run_enqueue.sql",
            "run_claim.sql",
            "run_store_last_step.sql",
            "run_end.sql",
            "run_interrupt.sql",
            before=REPLACED,
        ),
    ]
