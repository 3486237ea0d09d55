from __future__ import annotations

import hashlib
from typing import Any

from django.db import models

from .protected import ProtectedJSONField


def token_hash(token: str) -> str:
    """What a share link's token is stored as: its SHA-256, hex (the token itself is
    never stored, so the table cannot give a live link away)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class AbstractChatShare(models.Model):
    """A read-only snapshot of a chat's active path, served without login at the link
    made with it (``chats/{id}/share/``). The snapshot is what the path said when the
    link was made: later messages, edits and branch switches do not reach it. Deleting
    the row revokes the link."""

    INCLUDES = ("thinking", "tools")

    token_hash = models.CharField(
        max_length=64,
        unique=True,
        editable=False,
        help_text="SHA-256 (hex) of the link's token; the token itself is not stored.",
    )
    include = models.JSONField(
        default=list,
        blank=True,
        editable=False,
        help_text='What the snapshot shows besides the messages: "thinking", "tools".',
    )
    message_count = models.PositiveIntegerField(default=0, editable=False)
    # the transcript as shown: encrypted as the messages are (already redacted when stored)
    snapshot = ProtectedJSONField(default=dict, blank=True, editable=False, redacted=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"share of chat {self.chat_id} ({self.created_at:%Y-%m-%d %H:%M})"

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as the shared link's JSON shows it."""
        return {**self.snapshot, "shared_at": self.created_at.isoformat()}


class ChatShare(AbstractChatShare):
    chat = models.ForeignKey(
        "django_llmchat.Chat",
        on_delete=models.CASCADE,
        related_name="shares",
        db_index=False,  # llmchat_share_chat_idx
    )

    class Meta(AbstractChatShare.Meta):
        db_table = "llmchat_chat_share"
        ordering = ("-created_at", "-id")
        indexes = [models.Index(fields=["chat", "-created_at"], name="llmchat_share_chat_idx")]
