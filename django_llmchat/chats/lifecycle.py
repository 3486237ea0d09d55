"""Letting data go: deleting and anonymising transcripts, exporting and erasing what a
user left here (the access and erasure requests of the GDPR).

* :func:`purge_chats` deletes chats with everything of theirs: messages, tool calls,
  runs, idempotency keys and share links (by cascade), the attachments' files in their
  storage and the chats' Redis event streams (with ``LLMCHAT["EVENTS_URL"]``). Their
  usage rows stay: the ledger keeps each row's chat id, chat title and user id.
* :func:`anonymise_chats` empties transcripts and keeps their shape: the messages and
  tool calls stay with their roles, names, models, token counts and times, their
  contents go (text, thinking, arguments, raw provider output, attachments, share
  links), and so do the chat's title, context, tags and user.
* :func:`export_user` is a user's chats (messages, tool calls, attachments, runs) and
  usage rows as a JSON-ready dict; :func:`erase_user` purges the user's chats and
  anonymises the user's usage rows (no user id, no chat title, the amounts kept).

Files and streams are removed once the transaction deleting their rows commits, so a
rollback loses nothing. Nothing here touches a chat with a run queued, running or
awaiting approval: :func:`erase_user` refuses while the user has one, the retention
(:mod:`django_llmchat.chats.retention`) leaves it for its next pass.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from ..errors import LLMChatError
from ..models import (
    Attachment,
    Chat,
    ChatShare,
    ChatTag,
    Feedback,
    IdempotencyKey,
    Message,
    Run,
    ToolCall,
    Usage,
)

logger = logging.getLogger(__name__)

__all__ = [
    "EXPORT_FORMAT",
    "Erasure",
    "ErasureRefused",
    "Removed",
    "anonymise_chats",
    "busy",
    "erase_user",
    "export_user",
    "export_users",
    "idle",
    "purge_chats",
]

EXPORT_FORMAT = "django-llmchat-export"
EXPORT_VERSION = 1
_CHUNK = 500


class ErasureRefused(LLMChatError):
    """A user's data cannot be erased now: a chat of theirs has a run in progress."""

    def __init__(self, message: str, chat_ids: list[int]):
        super().__init__(message)
        self.chat_ids = chat_ids


def busy() -> Exists:
    """True for a chat with a run queued, running or awaiting approval (for ``filter``)."""
    return Exists(Run.objects.filter(chat=OuterRef("pk"), status__in=Run.UNFINISHED))


def idle(chats: QuerySet) -> QuerySet:
    """``chats`` without those a run is answering or waiting on."""
    return chats.filter(~busy())


def _chunks(values: list, size: int = _CHUNK) -> Iterable[list]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _files(chat_ids: list[int]) -> list[str]:
    names: list[str] = []
    for chunk in _chunks(chat_ids):
        names.extend(
            Attachment.objects.filter(message__chat_id__in=chunk)
            .exclude(file="")
            .values_list("file", flat=True)
        )
    return names


def _remove_files(names: list[str]) -> int:
    """Delete the stored files no attachment row names any more; returns how many."""
    storage = Attachment._meta.get_field("file").storage
    still_used = set()
    for chunk in _chunks(names):
        still_used.update(Attachment.objects.filter(file__in=chunk).values_list("file", flat=True))
    removed = 0
    for name in dict.fromkeys(names):
        if name in still_used:
            continue
        try:
            if storage.exists(name):
                storage.delete(name)
                removed += 1
        except Exception as exc:  # one file's storage error does not keep the others
            logger.warning("could not delete the attachment file %r: %s", name, exc)
    return removed


def _remove_streams(chat_ids: list[int]) -> int:
    """Delete the chats' Redis event streams (``LLMCHAT["EVENTS_URL"]``); returns how many
    existed."""
    from .. import streams

    if not streams.enabled() or not chat_ids:
        return 0
    try:
        return streams.delete(chat_ids)  # one DEL per stream: a Redis Cluster takes it
    except Exception as exc:  # the streams expire anyway (EVENTS_TTL)
        logger.warning("could not delete the event streams of chats %s: %s", chat_ids, exc)
        return 0


@dataclass
class Removed:
    """What a purge, an anonymisation or an erasure removed (files and streams counted
    once the transaction committed)."""

    chats: int = 0
    files: int = 0
    streams: int = 0
    idempotency_keys: int = 0
    usage_rows: int = 0
    chat_ids: list[int] = field(default_factory=list)


def _remove(chats: QuerySet, each_chunk: Callable[[list[int], Removed], None]) -> Removed:
    """In one transaction, ``each_chunk(ids, removed)`` for the ids of ``chats`` a chunk at
    a time; once it commits, their attachment files and event streams are removed."""
    removed = Removed()
    with transaction.atomic():
        chat_ids = list(chats.order_by().values_list("pk", flat=True))
        if not chat_ids:
            return removed
        files = _files(chat_ids)
        for chunk in _chunks(chat_ids):
            each_chunk(chunk, removed)
        removed.chat_ids = chat_ids

        def clean() -> None:
            removed.files = _remove_files(files)
            removed.streams = _remove_streams(chat_ids)

        transaction.on_commit(clean)
    return removed


def purge_chats(chats: QuerySet) -> Removed:
    """Delete ``chats`` with their transcripts, attachment files and event streams (the
    usage rows stay, with the chat's id and title). The caller filters out busy chats
    (:func:`idle`) when it must."""

    def delete(chunk: list[int], removed: Removed) -> None:
        _, counts = Chat.objects.filter(pk__in=chunk).delete()
        removed.chats += counts.get(Chat._meta.label, 0)
        removed.idempotency_keys += counts.get(IdempotencyKey._meta.label, 0)

    return _remove(chats, delete)


def anonymise_chats(chats: QuerySet) -> Removed:
    """Empty the transcripts of ``chats`` and unlink them from their user, keeping the
    messages' roles, models, token counts and times (and the usage rows)."""
    now = timezone.now()

    def empty(chunk: list[int], removed: Removed) -> None:
        Attachment.objects.filter(message__chat_id__in=chunk).delete()
        Message.objects.filter(chat_id__in=chunk).update(
            content="",
            thinking_text="",
            thinking_signature="",
            citations=[],
            server_tool_calls=[],
            raw=None,
        )
        ToolCall.objects.filter(chat_id__in=chunk).update(arguments={}, thought_signature="")
        # the ratings stay (as the token counts do), without their words and users
        Feedback.objects.filter(message__chat_id__in=chunk).update(comment="", user=None)
        # a share link's snapshot is the transcript too
        ChatShare.objects.filter(chat_id__in=chunk).delete()
        # a key's stored answer holds the messages it answered with
        keys, _ = IdempotencyKey.objects.filter(chat_id__in=chunk).delete()
        removed.idempotency_keys += keys
        ChatTag.objects.filter(chat_id__in=chunk).delete()  # the user's words too
        removed.chats += Chat.objects.filter(pk__in=chunk).update(
            title="", user=None, context={}, client_id="", anonymised_at=now
        )

    return _remove(chats, empty)


# -- a user's data -----------------------------------------------------------------------------
def _when(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _money(value: Any) -> str | None:
    return str(value) if value is not None else None


def _attachment(att: Attachment, files: bool) -> dict[str, Any]:
    out = {
        "filename": att.filename,
        "mime_type": att.mime_type,
        "size": att.size,
        "sha256": att.sha256,
        "created_at": _when(att.created_at),
    }
    if files:
        try:
            out["data_base64"] = base64.b64encode(att.read()).decode("ascii")
        except OSError as exc:
            out["error"] = f"the file could not be read: {exc}"
    return out


def _message(message: Message, files: bool) -> dict[str, Any]:
    data = message.to_dict()
    data.pop("attachments", None)  # below, without their (expiring) URLs
    out = {"id": message.pk, "created_at": _when(message.created_at), **data}
    attachments = [_attachment(a, files) for a in message.attachments.all()]
    if attachments:
        out["attachments"] = attachments
    if message.parent_tool_call_id is not None:
        out["parent_tool_call"] = message.parent_tool_call_id
    if message.parent_id is not None:
        out["parent"] = message.parent_id  # every branch is exported: the tree's shape
    if not message.on_path:
        out["on_path"] = False
    return out


def _chat(chat: Chat, files: bool) -> dict[str, Any]:
    return {
        "id": chat.pk,
        "title": chat.title,
        "provider": chat.provider,
        "model_id": chat.model_id,
        "agent": chat.agent,
        "params": chat.params,
        "schema": chat.schema,
        "tools": chat.tools,
        "context": chat.context,
        "history": chat.history,
        "client_id": chat.client_id,
        "status": chat.status,
        "retention_days": chat.retention_days,
        "archived": chat.archived,
        "pinned": chat.pinned,
        "tags": chat.tags,
        "created_at": _when(chat.created_at),
        "updated_at": _when(chat.updated_at),
        "messages": [_message(m, files) for m in chat.messages.all()],
        "runs": [
            {
                "id": run.pk,
                "status": run.status,
                "error": run.error,
                "error_type": run.error_type,
                "interrupt_reason": run.interrupt_reason,
                "steps": run.steps,
                "created_at": _when(run.created_at),
                "finished_at": _when(run.finished_at),
            }
            for run in chat.runs.all()
        ],
    }


_USAGE_FIELDS = (
    "operation",
    "provider",
    "model_id",
    "status",
    "estimated",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "thinking_tokens",
    "duration_ms",
    "first_token_ms",
    "error",
)


def _usage(row: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {"id": row.pk, "chat_id": row.chat_id, "run_id": row.run_id}
    if row.chat_title:
        out["chat_title"] = row.chat_title
    out.update({name: getattr(row, name) for name in _USAGE_FIELDS})
    out["cost"] = {part: _money(value) for part, value in row.cost.to_dict().items()}
    out["total_cost"] = _money(row.total_cost)
    out["created_at"] = _when(row.created_at)
    return out


def _user_entry(user: Any, files: bool) -> dict[str, Any]:
    chats = (
        Chat.objects.filter(user=user)
        .with_tags()
        .order_by("id")
        .prefetch_related(
            "messages__attachments", "messages__tool_calls", "messages__parent_tool_call", "runs"
        )
    )
    usage = Usage.objects.filter(user_id=user.pk).order_by("created_at", "id")
    return {
        "user": {"id": user.pk, "username": user.get_username()},
        "chats": [_chat(chat, files) for chat in chats],
        "usage": [_usage(row) for row in usage],
        "feedback": [
            {**row.to_dict(), "chat_id": row.message.chat_id}
            for row in Feedback.objects.filter(user_id=user.pk)
            .select_related("message")
            .only("rating", "comment", "user_id", "created_at", "updated_at", "message__chat_id")
            .order_by("id")
        ],
    }


def export_users(users: Iterable[Any], *, files: bool = False) -> dict[str, Any]:
    """Everything stored for ``users``, as a JSON-ready dict: ``{"format", "version",
    "exported_at", "users": [{"user", "chats", "usage", "feedback"}]}``. Each chat carries its
    settings, messages (with their tool calls and attachments' metadata, the files
    themselves base64-encoded with ``files``) and runs; ``usage`` is every usage row of
    the user, those of deleted chats included; ``feedback`` every rating the user gave
    (with its reply's ``message`` and ``chat_id``)."""
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "exported_at": _when(timezone.now()),
        "users": [_user_entry(user, files) for user in users],
    }


def export_user(user: Any, *, files: bool = False) -> dict[str, Any]:
    """:func:`export_users` of one user."""
    return export_users([user], files=files)


@dataclass
class Erasure(Removed):
    """What :func:`erase_user` removed and anonymised."""

    user_id: Any = None


def erase_user(user: Any) -> Erasure:
    """Erase what ``user`` left here: their chats (transcripts, tool calls, runs,
    attachment files, event streams), their idempotency keys; their usage rows stay for
    the accounts, without their user id and chat titles. The user account itself is the
    project's (delete it after, if it goes too).

    Raises :class:`ErasureRefused` while a chat of theirs has a run in progress: cancel it
    (``chat.cancel()``) and erase once it has ended."""
    mine = Chat.objects.filter(user_id=user.pk)
    running = list(mine.filter(busy()).values_list("pk", flat=True))
    if running:
        raise ErasureRefused(
            f"user {user.pk} has a run in progress in chat{'s' if len(running) > 1 else ''} "
            f"{', '.join(map(str, running))}: cancel it and erase once it has ended",
            running,
        )
    erasure = Erasure(user_id=user.pk)
    with transaction.atomic():
        removed = purge_chats(mine)
        erasure.chats, erasure.idempotency_keys = removed.chats, removed.idempotency_keys
        erasure.chat_ids = removed.chat_ids
        keys, _ = IdempotencyKey.objects.filter(user_id=user.pk).delete()
        erasure.idempotency_keys += keys
        # their feedback on chats not theirs (staff may rate every chat)
        Feedback.objects.filter(user_id=user.pk).delete()
        rows = Q(user_id=user.pk)
        for chunk in _chunks(removed.chat_ids):
            rows |= Q(chat_id__in=chunk)
        erasure.usage_rows = Usage.objects.filter(rows).update(
            user_id=None, chat_title="", error=""
        )

        def counted() -> None:  # purge_chats' files and streams are gone by now
            erasure.files, erasure.streams = removed.files, removed.streams

        transaction.on_commit(counted)
    return erasure
