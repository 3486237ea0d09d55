"""A chat's tags: one row per chat and tag (``chat.tags``, ``chat.set_tags()``).

Rows rather than a JSON list on the chat: ``?tag=work`` is then an indexed lookup on
every database (``llmchat_chat_tag_name_idx``), where JSON containment has an index on
PostgreSQL alone (GIN) and none on SQLite."""

from __future__ import annotations

from django.db import models

from .tags import TAG_MAX_LENGTH


class ChatTag(models.Model):
    """A tag of a chat (chats of every user share no tag rows: each chat has its own)."""

    chat = models.ForeignKey(
        "django_llmchat.Chat",
        on_delete=models.CASCADE,
        related_name="tag_rows",
        db_index=False,  # llmchat_chat_tag_uniq starts with it
    )
    name = models.CharField(max_length=TAG_MAX_LENGTH)

    class Meta:
        db_table = "llmchat_chat_tag"
        ordering = ("name",)
        constraints = [
            models.UniqueConstraint(fields=["chat", "name"], name="llmchat_chat_tag_uniq"),
        ]
        indexes = [models.Index(fields=["name", "chat"], name="llmchat_chat_tag_name_idx")]

    def __str__(self) -> str:
        return self.name
