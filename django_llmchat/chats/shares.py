"""Share links: a read-only snapshot of a chat's active path, served without login.

:func:`share_chat` stores a :class:`~django_llmchat.models.ChatShare` holding what the
active path says now and returns it with its token, made by ``secrets.token_urlsafe(32)``
(256 random bits). The row keeps the token's SHA-256, never the token: whoever reads the
table (a backup, the admin) cannot open a link, and a link is found by hashing what is
presented. So a link cannot be shown again: share again for a new one (each share is its
own snapshot; the earlier links keep theirs until revoked).

The snapshot holds the title, the model and each message's role, content, model, time
and attachments' names, types and sizes (no file: a shared page fetches nothing). The
chat's instructions (system messages) are never in it. Reasoning and tool calls only with
``include``: ``"thinking"`` adds each reply's reasoning text; ``"tools"`` adds the tool
calls' arguments and the tool results (without it a reply that called tools shows their
names alone). Encrypted at rest like the messages (``LLMCHAT["ENCRYPTION_KEYS"]``).

:func:`revoke_shares` deletes a chat's links; deleting the chat, the retention (either
action) and :func:`django_llmchat.chats.lifecycle.erase_user` delete them too.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any

from django.db import transaction

from ..errors import ArgumentError
from ..models import Chat, ChatShare
from ..models.share import token_hash

__all__ = ["INCLUDES", "find_share", "revoke_shares", "share_chat", "snapshot"]

INCLUDES = ChatShare.INCLUDES
"""What ``include`` may name: ``"thinking"``, ``"tools"``."""


def _checked(include: Iterable[str] | None) -> list[str]:
    if include is None:
        return []
    if isinstance(include, str):
        raise ArgumentError(f"include must be a list of {', '.join(INCLUDES)}, got {include!r}")
    names = list(include)
    for name in names:
        if name not in INCLUDES:
            raise ArgumentError(f"include: {name!r} is not one of {', '.join(INCLUDES)}")
    return [name for name in INCLUDES if name in names]


def _message(message: Any, include: list[str]) -> dict[str, Any] | None:
    tools = "tools" in include
    if message.role == "tool" and not tools:
        return None
    out: dict[str, Any] = {
        "role": message.role,
        "content": message.content,
        "created_at": message.created_at.isoformat(),
    }
    if message.role == "assistant" and message.model_id:
        out["model"] = message.model_id
    calls = list(message.tool_calls.all())
    if calls:
        out["tool_calls"] = [
            {"id": c.call_id, "name": c.name, "arguments": c.arguments}
            if tools
            else {"name": c.name}
            for c in calls
        ]
    if message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
    if "thinking" in include and message.thinking_text:
        out["thinking"] = message.thinking_text
    files = [
        {"filename": a.filename, "mime_type": a.mime_type, "size": a.size}
        for a in message.attachments.all()
    ]
    if files:
        out["attachments"] = files
    if not out["content"] and not calls and not files and "thinking" not in out:
        return None
    return out


def snapshot(chat: Chat, include: Iterable[str] | None = None) -> dict[str, Any]:
    """What a share of ``chat`` shows now: ``{"title", "model_id", "include",
    "messages"}`` (the active path without its instructions)."""
    names = _checked(include)
    messages = [
        shown
        for message in chat.transcript()
        if message.role != "system" and (shown := _message(message, names)) is not None
    ]
    return {"title": chat.title, "model_id": chat.model_id, "include": names, "messages": messages}


def share_chat(chat: Chat, include: Iterable[str] | None = None) -> tuple[ChatShare, str]:
    """Store a snapshot of ``chat``'s active path as a new share; returns it and the
    token of its link (shown once: only its hash is stored)."""
    if chat.pk is None:
        raise ArgumentError("save the chat before sharing it")
    data = snapshot(chat, include)
    token = secrets.token_urlsafe(32)
    share = ChatShare.objects.create(
        chat=chat,
        token_hash=token_hash(token),
        include=data["include"],
        message_count=len(data["messages"]),
        snapshot=data,
    )
    return share, token


def revoke_shares(chat: Chat) -> int:
    """Delete every share of ``chat``: their links answer 404 from now on. Returns how
    many there were."""
    with transaction.atomic():
        deleted, _ = ChatShare.objects.filter(chat_id=chat.pk).delete()
    return deleted


def find_share(token: str) -> ChatShare | None:
    """The share whose link carries ``token``, or ``None``."""
    if not isinstance(token, str) or not token or len(token) > 128:
        return None
    return ChatShare.objects.filter(token_hash=token_hash(token)).first()
