"""SQLite's full-text index of messages written in batches: the newest messages are indexed
together, by the insert that makes a batch of them or by the next search, where each was
an FTS5 write of its own (``llmchat_search_mark`` holds how far the index goes;
:mod:`django_llmchat.chats.search_index`). Nothing on other databases."""

from django.db import migrations

from django_llmchat.chats import search_index


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0005_run_functions_v4"),
    ]

    operations = [
        migrations.RunPython(
            search_index.batches_forwards, search_index.batches_backwards, elidable=False
        ),
    ]
