"""The run functions of version 4 (``django_llmchat/sql/v4/``), beside the earlier ones:
``llmchat_run_claim_v4`` opens the first attempt of a queued run it starts (argument
``p_attempt``, its pending usage row, made ready by the worker on the path it read before
the claim), so a worker's reply commits twice, as a reply in the caller's process does.
``llmchat_run_claim_v1`` stays for the processes of the releases before, during a rolling
deploy. Nothing on other databases."""

from django.db import migrations

from django_llmchat.migrations._sql import install


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0004_run_functions_v3"),
    ]

    operations = [
        install("v4", "run_claim.sql", "run_enqueue.sql"),
    ]
