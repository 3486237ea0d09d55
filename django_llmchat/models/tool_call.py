from __future__ import annotations

import json
from typing import Any

from django.db import models

from .protected import ProtectedJSONField


class AbstractToolCall(models.Model):
    """A tool call an assistant message requested. Its result is the ``tool`` message
    whose ``parent_tool_call`` points here (``tool_call.result``)."""

    APPROVALS = ("", "approved", "denied")

    call_id = models.CharField(max_length=255)
    name = models.CharField(max_length=255)
    arguments = ProtectedJSONField(default=dict, blank=True, redact_as="tool_arguments")
    thought_signature = models.TextField(blank=True)
    approval = models.CharField(max_length=16, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.name}({self.call_id})"

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)

    def get_result(self):
        """The tool message answering this call, or ``None`` (uses a prefetched value)."""
        try:
            return self.result
        except type(self).result.RelatedObjectDoesNotExist:
            return None

    @property
    def is_waiting(self) -> bool:
        """Neither decided (approved, denied) nor answered yet."""
        return not self.approval and self.get_result() is None

    @staticmethod
    def first_waiting(calls):
        """The call a decision on a vendor id is for: of ``calls`` (the chat's calls
        with that id, oldest first; vendors repeat or omit ids), the first still waiting,
        ``None`` when none is."""
        return next((call for call in calls if call.is_waiting), None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.call_id, "name": self.name, "arguments": self.arguments}
        if self.thought_signature:
            out["thought_signature"] = self.thought_signature
        if self.approval:
            out["approval"] = self.approval
        return out


class ToolCall(AbstractToolCall):
    # no index of their own: ``llmchat_tool_call_msg_idx`` and ``llmchat_tool_call_chat_idx``
    # serve these lookups
    message = models.ForeignKey(
        "django_llmchat.Message",
        on_delete=models.CASCADE,
        related_name="tool_calls",
        db_index=False,
    )
    chat = models.ForeignKey(
        "django_llmchat.Chat", on_delete=models.CASCADE, related_name="tool_calls", db_index=False
    )

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save the call; its ``chat`` (kept beside ``message`` for transcript reads) is
        the message's when not given."""
        if self.chat_id is None and self.message_id is not None:
            self.chat_id = self.message.chat_id
        super().save(*args, **kwargs)

    class Meta(AbstractToolCall.Meta):
        db_table = "llmchat_tool_call"
        ordering = ("id",)
        # ``call_id`` is the vendor's, stored as sent: vendors and proxies repeat ids or send
        # none, so it is indexed, not unique
        indexes = [
            models.Index(fields=["message"], name="llmchat_tool_call_msg_idx"),
            models.Index(fields=["chat", "call_id"], name="llmchat_tool_call_chat_idx"),
        ]
