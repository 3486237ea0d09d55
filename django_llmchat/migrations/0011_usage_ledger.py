"""The usage ledger and the retention of transcripts.

A usage row's ``chat`` and ``user`` lose their database constraint and are left alone when
the chat or the user is deleted: their ids stay as plain values (the spending limits and
the dashboard sum by them), and ``chat_title`` keeps the title of a deleted chat. The rows
already there get their chat's user where they had none. A chat gets ``retention_days``
(its own retention) and ``anonymised_at`` (when the retention emptied it)."""

from importlib import import_module

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

# 0008's data step again: usage rows still without a user get their chat's
copy_users = import_module("django_llmchat.migrations.0008_limits").copy_users


class Migration(migrations.Migration):

    dependencies = [
        ('django_llmchat', '0010_idempotency_keys'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name='chat',
            name='anonymised_at',
            field=models.DateTimeField(blank=True, editable=False, help_text='When the retention emptied the transcript (contents, title, user).', null=True),
        ),
        migrations.AddField(
            model_name='chat',
            name='retention_days',
            field=models.PositiveIntegerField(blank=True, help_text='Days the transcript is kept after its last message (LLMCHAT["RETENTION"] deletes or anonymises it then); empty: the user\'s or the default.', null=True),
        ),
        migrations.AddField(
            model_name='usage',
            name='chat_title',
            field=models.CharField(blank=True, editable=False, help_text="The chat's title, kept here when the chat is deleted (blank while it exists, and once the user's data is erased).", max_length=255),
        ),
        migrations.AlterField(
            model_name='usage',
            name='chat',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='usages', to='django_llmchat.chat'),
        ),
        migrations.AlterField(
            model_name='usage',
            name='user',
            field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, editable=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='llmchat_usages', to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(copy_users, migrations.RunPython.noop, elidable=True),
    ]
