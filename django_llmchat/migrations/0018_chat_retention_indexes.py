"""Indexes for the retention pass: ``llmchat_chat_updated_idx`` finds the chats idle
longer than the policy's days, ``llmchat_chat_own_days_idx`` (partial: the few chats
with days of their own) those with a number of days of their own, so a pass reads the
chats it may act on, not every chat (see the Scale figures of docs/benchmarks.md)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0017_idempotency_key_per_chat"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="chat",
            index=models.Index(fields=["updated_at"], name="llmchat_chat_updated_idx"),
        ),
        migrations.AddIndex(
            model_name="chat",
            index=models.Index(
                fields=["updated_at"],
                condition=models.Q(retention_days__isnull=False),
                name="llmchat_chat_own_days_idx",
            ),
        ),
    ]
