"""Between ORM rows and provider values, the request side: the messages a run sends, built
from the chat's active path and kept per process (only the rows added since are read
again). The other side, storing what a step produced, is :mod:`django_llmchat.loop.steps`.

The SQL read of the path is ``transcript_rows``; one message row as a provider value is
``transcript_messages``."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from django.core.signals import setting_changed
from django.db import router
from django.db.models.signals import post_delete

from ..db.prepared import json_value
from ..models import Attachment, Chat, Message, ToolCall, Usage
from ..models.message import transcript_changed
from ..providers.types import ProviderMessage
from ..values import Thinking
from .transcript_messages import _provider_message, call_item_ids, provider_message
from .transcript_rows import _read

HISTORY_CACHE_SIZE = 64
"""How many chats' built histories a process keeps (the least recently used go first)."""
HISTORY_CACHE_TTL = 60.0
"""Seconds a built history is reused before it is read again whole: an edit of a stored
message made elsewhere than this process's ``Message.save()`` or ``cache_until_here()`` is
sent from then on (new and deleted messages are seen at once)."""


@dataclass
class LoadedHistory:
    """A chat's saved transcript as a run needs it: the provider messages (the run's own
    list: it appends what it stores), the ids of the tool calls still unanswered, the
    latest summary as ``(pk, covered up to this message's pk, content)`` or ``None``
    (summaries are not among the messages), and the history policy's token estimates of
    the messages, shared with later runs (keyed by estimator, then by ``id(message)``)."""

    messages: list[ProviderMessage]
    pending: list[int]
    summary: tuple | None
    tokens: dict[Any, dict[int, int]]
    seen: tuple[int | None, int, int | None] = (None, 0, None)
    """The path as read: its active leaf's id, its message count, its highest id."""


@dataclass
class _Built:
    """One chat's history as a load built it, reused by the next load in this process,
    which reads only the rows after ``last``."""

    messages: list[ProviderMessage]
    count: int
    top: int  # the highest message id read
    last: tuple[int, int]
    anchor: int | None  # the last message of the tree read (no system message)
    calls: dict[int, tuple[str, str]]  # tool call pk -> (call_id, name)
    unanswered: dict[int, None]  # tool call pks without a result, in order
    summary: tuple | None
    tokens: dict[Any, dict[int, int]]
    expires: float
    answered: bool = False  # extended by the run that answered it (remember_answered)


_built: OrderedDict[tuple[str, Any], _Built] = OrderedDict()
_built_lock = threading.Lock()
_FIRST = (-(2**62), 0)


def forget_history(chat_id: Any = None) -> None:
    """Drop the built history of ``chat_id`` (every chat's when ``None``): the next load
    reads it whole."""
    with _built_lock:
        if chat_id is None:
            _built.clear()
        else:
            for key in [k for k in _built if k[1] == chat_id]:
                del _built[key]


def _chat_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    forget_history(instance.pk)


def _message_changed(sender: Any, chat_id: Any = None, **kwargs: Any) -> None:
    forget_history(chat_id)


post_delete.connect(_chat_deleted, sender=Chat, dispatch_uid="llmchat-history-chat")
transcript_changed.connect(_message_changed, dispatch_uid="llmchat-history-message")
setting_changed.connect(
    lambda **kwargs: forget_history(), dispatch_uid="llmchat-history-settings", weak=False
)


def load_history(chat: Chat) -> LoadedHistory:
    """What a run needs from the saved transcript, read as plain rows (no model instances).

    The messages built for a chat are kept (per process, for ``HISTORY_CACHE_TTL``
    seconds): the next load reads only the messages stored since, with the count of all
    of them (a deleted or late message means a whole read again). One query, plus one for
    the new messages' tool calls and one for their attachments when they have any."""
    key = (router.db_for_read(Message), chat.pk)
    now = time.monotonic()
    with _built_lock:
        built = _built.get(key)
    if built is not None and built.expires <= now:
        built = None
    if built is None:
        rows = _read(chat, _FIRST)
    else:
        rows = _read(chat, built.last, built.anchor)
    count, top, kept = rows[0][0], rows[0][1], rows[0][2]
    rows = [row[3:] for row in rows if row[3] is not None]
    if built is not None and (
        count != built.count + len(rows)
        or (top or 0) != max([built.top, *(row[0] for row in rows)])
        or (built.anchor is not None and not kept)
    ):
        # a message was deleted or stored out of order, or the path moved (its last
        # message read is off it now): read it all
        built = None
        rows = [row[3:] for row in _read(chat, _FIRST) if row[3] is not None]
    if built is None:
        built = _Built([], 0, 0, _FIRST, None, {}, {}, None, {}, now + HISTORY_CACHE_TTL)
    if not rows:
        fresh = built
    else:
        fresh = _extend(chat, built, rows)
    with _built_lock:
        if fresh.expires is not None:
            _built[key] = fresh
            _built.move_to_end(key)
            while len(_built) > HISTORY_CACHE_SIZE:
                _built.popitem(last=False)
        else:
            _built.pop(key, None)
    return _loaded(fresh)


def _loaded(built: _Built) -> LoadedHistory:
    return LoadedHistory(
        messages=list(built.messages),
        pending=list(built.unanswered),
        summary=built.summary,
        tokens=built.tokens,
        seen=(built.anchor, built.count, built.top or None),
    )


def answered_history(chat: Chat) -> LoadedHistory | None:
    """The history this process built for ``chat`` and extended with the run it answered
    last (:func:`remember_answered`), without reading the database; ``None`` when there
    is none (or it expired). It may be behind the database (another process wrote to the
    chat since): the caller checks its ``seen`` where it writes (the admission does)."""
    key = (router.db_for_read(Message), chat.pk)
    with _built_lock:
        built = _built.get(key)
    if built is None or not built.answered or built.expires <= time.monotonic():
        return None
    return _loaded(built)


def new_chat_history(chat: Chat) -> LoadedHistory | None:
    """The history of a chat this instance created (``Chat.save()`` of a new row) and
    never ran, or of an unsaved one: empty, without reading the database, and kept so its
    answer extends it (:func:`remember_answered`; an unsaved chat's once the admission
    saved it, asked again then); ``None`` for any other chat. Asked once per instance.
    The admission checks the path is still empty, as it checks any kept history."""
    unsaved = chat.pk is None  # saved with its first prompt: kept once it has its key
    if not (unsaved or chat.__dict__.pop("_created_here", False)):
        return None
    # not ``answered``: only the run answering it makes it so (remember_answered)
    built = _Built([], 0, 0, _FIRST, None, {}, {}, None, {}, time.monotonic() + HISTORY_CACHE_TTL)
    if unsaved:
        return _loaded(built)
    key = (router.db_for_read(Message), chat.pk)
    with _built_lock:
        _built[key] = built
        _built.move_to_end(key)
        while len(_built) > HISTORY_CACHE_SIZE:
            _built.popitem(last=False)
    return _loaded(built)


def remember_answered(
    chat: Chat, seen: tuple[int | None, int, int | None], stored: list[tuple[Any, int, int]]
) -> None:
    """A run answered ``chat`` on the path it read as ``seen``, storing ``stored`` (each
    ``(its provider message, pk, position)``, in order: the prompt, then the reply; no
    tool call, no file): the built history grows by them, so the next run can be made
    ready without a read (:func:`answered_history`). Nothing happens when the built
    history is no longer the one the run read."""
    key = (router.db_for_read(Message), chat.pk)
    with _built_lock:
        built = _built.get(key)
        if built is None or (built.anchor, built.count, built.top or None) != seen:
            return
        last = stored[-1]
        anchor = next((pk for m, pk, _ in reversed(stored) if m.role != "system"), built.anchor)
        _built[key] = replace(
            built,
            messages=[*built.messages, *(m for m, _, _ in stored)],
            count=built.count + len(stored),
            top=max(built.top, *(pk for _, pk, _ in stored)),
            last=(last[2], last[1]),
            anchor=anchor,
            answered=True,
        )


def _extend(chat: Chat, built: _Built, rows: list[tuple]) -> _Built:
    """``built`` with ``rows`` (the messages stored after it) appended."""
    calls = built.calls
    unanswered = built.unanswered
    new_calls: dict[int, list[tuple]] = {}
    if any(row[-2] for row in rows):
        calls, unanswered = dict(calls), dict(unanswered)
        ids = [row[0] for row in rows if row[-2]]
        for pk, message_id, call_id, name, arguments, signature in (
            ToolCall.objects.filter(message_id__in=ids)
            .order_by("id")
            .values_list("id", "message_id", "call_id", "name", "arguments", "thought_signature")
        ):
            new_calls.setdefault(message_id, []).append((call_id, name, arguments, signature, pk))
            calls[pk] = (call_id, name)
            unanswered[pk] = None
    attachments: dict[int, list[Attachment]] = {}
    keep = True
    if any(row[-1] for row in rows):
        keep = False  # file contents are not kept in memory between runs
        ids = [row[0] for row in rows if row[-1]]
        for att in (
            Attachment.objects.filter(message_id__in=ids)
            .order_by("id")
            .only("id", "message_id", "file", "filename", "mime_type")
        ):
            attachments.setdefault(att.message_id, []).append(att)
    messages = list(built.messages)
    append = messages.append
    summary = built.summary
    for row in rows:
        (
            pk,
            role,
            content,
            model_id,
            provider,
            t_text,
            t_sig,
            raw,
            cache,
            parent_id,
            summary_until,
            _position,
            has_calls,
            has_files,
        ) = row
        if summary_until is not None:
            summary = (pk, summary_until, content)  # rows are in order: the last one wins
            continue
        if not (raw or t_text or t_sig or parent_id or has_calls or has_files):
            # most messages: text alone
            append(
                ProviderMessage(
                    role,
                    content,
                    [],
                    [],
                    cache_boundary=bool(cache),
                    model_id=model_id or None,
                    provider=provider or None,
                    ref=pk,
                )
            )
            continue
        raw = json_value(raw) if raw else None
        if not isinstance(raw, dict):
            raw = {}
        parent = calls.get(parent_id) if parent_id else None
        if parent_id and parent_id in unanswered:
            if unanswered is built.unanswered:
                unanswered = dict(unanswered)
            del unanswered[parent_id]
        append(
            _provider_message(
                role=role,
                content=content,
                model_id=model_id,
                provider=provider,
                thinking=Thinking(t_text, t_sig or None) if (t_text or t_sig) else None,
                item_ids=call_item_ids(raw, [c[0] for c in new_calls.get(pk, ())]),
                reasoning_items=raw.get("reasoning_items"),
                is_error=bool(raw.get("error")),
                cache_boundary=bool(cache),
                calls=[(c[0], c[1], json_value(c[2]), c[3], c[4]) for c in new_calls.get(pk, ())],
                parent=(parent[0], parent[1], parent_id) if parent else None,
                attachments=attachments.get(pk, []),
                message_ref=pk,
            )
        )
    last = rows[-1]
    anchor = built.anchor
    for row in reversed(rows):
        if row[1] != "system":
            anchor = row[0]
            break
    return _Built(
        messages=messages,
        count=built.count + len(rows),
        top=max(built.top, max(row[0] for row in rows)),
        last=(last[11], last[0]),
        anchor=anchor,
        calls=calls,
        unanswered=unanswered,
        summary=summary,
        tokens=built.tokens if keep else {},
        expires=built.expires if keep else None,
    )


def path_leaf(messages: list[ProviderMessage]) -> int | None:
    """The id of the last stored message of a run's history that is part of the tree
    (system messages aside): what the run's next message follows."""
    for message in reversed(messages):
        if message.role != "system" and message.ref is not None:
            return message.ref
    return None


def last_reported_step(chat_id: Any) -> tuple[int, int] | None:
    """The chat's last answered step as ``(its message's id, the input tokens the vendor
    reported for it)``, or ``None``. One query."""
    row = (
        Usage.objects.filter(chat_id=chat_id, status=Usage.SUCCEEDED, operation="chat")
        .exclude(message=None)
        .order_by("-id")
        .values_list("message_id", "input_tokens", "cache_read_tokens", "cache_write_tokens")
        .first()
    )
    if row is None:
        return None
    message_id, *counts = row
    return message_id, sum(c or 0 for c in counts)


__all__ = [
    "HISTORY_CACHE_SIZE",
    "HISTORY_CACHE_TTL",
    "LoadedHistory",
    "answered_history",
    "call_item_ids",
    "forget_history",
    "last_reported_step",
    "load_history",
    "path_leaf",
    "provider_message",
    "remember_answered",
]
