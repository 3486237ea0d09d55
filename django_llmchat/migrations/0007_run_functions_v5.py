"""The run functions of version 5 (``django_llmchat/sql/v5/``), beside the earlier ones:
``llmchat_run_enqueue_v5`` takes ``p_synchronous``: false for a run its caller answers
itself, right after, whose admission then commits without waiting for the disk (the run's
end, committed synchronously, makes it durable with it). ``llmchat_run_enqueue_v4`` stays
for the processes of the releases before, during a rolling deploy. Nothing on other
databases."""

from django.db import migrations

from django_llmchat.migrations._sql import install


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0006_search_index_batches"),
    ]

    operations = [
        install("v5", "run_enqueue.sql"),
    ]
