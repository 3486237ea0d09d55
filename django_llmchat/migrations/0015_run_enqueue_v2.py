"""``llmchat_run_enqueue_v2`` (``django_llmchat/sql/v2/``): the admission of
``llmchat_run_enqueue_v1`` with the started run's first attempt opened in the same call
(its pending usage row), so a plain ask commits twice: before the provider call and after.
Nothing on other databases."""

from django.db import migrations

from django_llmchat.migrations._sql import install


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0014_run_functions"),
    ]

    operations = [install("v2", "run_enqueue.sql")]
