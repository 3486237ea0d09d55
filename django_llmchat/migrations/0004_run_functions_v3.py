"""The run functions of version 3 (``django_llmchat/sql/v3/``), beside the earlier ones:
``llmchat_run_enqueue_v3`` writes a new chat's row with its first prompt and run
(argument ``p_new_chat``, result ``new_chat_id``) and, like
``llmchat_run_store_last_step_v3``, writes the chat's row once (its lock taken
``FOR NO KEY UPDATE``, then one ``UPDATE``) where version 1 and 2 updated it two to four
times. ``llmchat_run_enqueue_v1`` and ``llmchat_run_store_last_step_v1``/``_v2`` stay for
the processes of the releases before, during a rolling deploy. Nothing on other
databases."""

from django.db import migrations

from django_llmchat.migrations._sql import install


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0003_run_functions_v2"),
    ]

    operations = [
        install("v3", "run_enqueue.sql", "run_store_last_step.sql"),
    ]
