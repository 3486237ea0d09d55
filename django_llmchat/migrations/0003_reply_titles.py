"""``llmchat_run_store_last_step_v1`` writes a chat's automatic title with its reply
(arguments ``p_title``, ``p_title_source``; result ``titled``), so a chat's first reply
needs no statement of its own for its title. The function of ``0002_run_functions``
(five arguments) is dropped first; the reverse drops this one, and the runs take the
statements for their last step until it is installed again."""

from django.db import migrations

from django_llmchat.migrations._sql import SQL, PostgreSQLOnly

OLD = "DROP FUNCTION IF EXISTS llmchat_run_store_last_step_v1(bigint, integer, bigint, jsonb, jsonb);"
NEW = (
    "DROP FUNCTION IF EXISTS llmchat_run_store_last_step_v1("
    "bigint, integer, bigint, jsonb, jsonb, text, text);"
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0002_run_functions"),
    ]

    operations = [
        PostgreSQLOnly(
            sql=[OLD, (SQL / "v1" / "run_store_last_step.sql").read_text()],
            reverse_sql=NEW,
        ),
    ]
