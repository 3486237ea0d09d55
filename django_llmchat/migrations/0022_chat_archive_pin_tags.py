"""Archive, pin and tags of chats: ``archived`` and ``pinned`` on ``llmchat_chat`` (with a
database default, so rows inserted by code that predates them are neither),
``llmchat_chat_list_idx`` for the chat list (a user's chats, archived apart, pinned first,
then by recency), and ``llmchat_chat_tag``, one row per chat and tag, indexed by name for
``?tag=`` on every database.

On SQLite the new columns rebuild ``llmchat_chat`` (not ``llmchat_message``: its search
triggers stay)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("django_llmchat", "0021_forks_and_shares"),
    ]

    operations = [
        migrations.AddField(
            model_name="chat",
            name="archived",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="Archived: left out of the chat list (GET chats/) unless "
                "?archived=true, and of the chat page's sidebar; still readable and usable.",
            ),
        ),
        migrations.AddField(
            model_name="chat",
            name="pinned",
            field=models.BooleanField(
                db_default=False, default=False, help_text="Pinned: listed before the others."
            ),
        ),
        migrations.AddIndex(
            model_name="chat",
            index=models.Index(
                fields=["user", "archived", "-pinned", "-updated_at", "-id"],
                name="llmchat_chat_list_idx",
            ),
        ),
        migrations.CreateModel(
            name="ChatTag",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=64)),
                (
                    "chat",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="tag_rows",
                        to="django_llmchat.chat",
                    ),
                ),
            ],
            options={
                "db_table": "llmchat_chat_tag",
                "ordering": ("name",),
                "indexes": [
                    models.Index(fields=["name", "chat"], name="llmchat_chat_tag_name_idx")
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("chat", "name"), name="llmchat_chat_tag_uniq")
                ],
            },
        ),
    ]
