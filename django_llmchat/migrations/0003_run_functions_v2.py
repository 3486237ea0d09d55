"""The run functions of version 2 (``django_llmchat/sql/v2/``), beside those of version 1:
``llmchat_run_store_last_step_v2`` writes a chat's automatic title with its reply
(arguments ``p_title``, ``p_title_source``; result ``titled``), so a chat's first reply
needs no statement of its own for its title. ``llmchat_run_store_last_step_v1`` stays for
the processes of the release before, during a rolling deploy. ``llmchat_run_leaf_v1``
keeps its arguments and result, its body now PL/pgSQL (planned once per connection); the
reverse installs version 1's body again. Nothing on other databases."""

from django.db import migrations

from django_llmchat.migrations._sql import SQL, PostgreSQLOnly, install


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0002_run_functions"),
    ]

    operations = [
        install("v2", "run_store_last_step.sql"),
        PostgreSQLOnly(
            sql=(SQL / "v2" / "run_leaf.sql").read_text(),
            reverse_sql=(SQL / "v1" / "run_shared.sql").read_text(),
        ),
    ]
