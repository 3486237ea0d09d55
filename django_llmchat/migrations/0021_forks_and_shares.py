"""Forks and share links: ``Chat.forked_from`` / ``forked_from_message`` (the chat and
message a fork was made from, kept NULL once they are deleted) with a partial index for a
chat's forks, and ``llmchat_chat_share`` (a share link's hashed token and its encrypted
snapshot)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_llmchat", "0020_chat_title_source"),
    ]

    operations = [
        migrations.CreateModel(
            name="ChatShare",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "token_hash",
                    models.CharField(
                        editable=False,
                        help_text="SHA-256 (hex) of the link's token; the token itself is not stored.",
                        max_length=64,
                        unique=True,
                    ),
                ),
                (
                    "include",
                    models.JSONField(
                        blank=True,
                        default=list,
                        editable=False,
                        help_text='What the snapshot shows besides the messages: "thinking", "tools".',
                    ),
                ),
                ("message_count", models.PositiveIntegerField(default=0, editable=False)),
                ("snapshot", models.JSONField(blank=True, default=dict, editable=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={
                "db_table": "llmchat_chat_share",
                "ordering": ("-created_at", "-id"),
                "abstract": False,
            },
        ),
        migrations.AddField(
            model_name="chat",
            name="forked_from",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                editable=False,
                help_text="The chat this one was forked from (chat.fork()), while it exists.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="forks",
                to="django_llmchat.chat",
            ),
        ),
        migrations.AddField(
            model_name="chat",
            name="forked_from_message",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                help_text="The source chat's message the fork's transcript ends with.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="django_llmchat.message",
            ),
        ),
        migrations.AddIndex(
            model_name="chat",
            index=models.Index(
                condition=models.Q(("forked_from__isnull", False)),
                fields=["forked_from"],
                name="llmchat_chat_fork_idx",
            ),
        ),
        migrations.AddField(
            model_name="chatshare",
            name="chat",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="shares",
                to="django_llmchat.chat",
            ),
        ),
        migrations.AddIndex(
            model_name="chatshare",
            index=models.Index(fields=["chat", "-created_at"], name="llmchat_share_chat_idx"),
        ),
    ]
