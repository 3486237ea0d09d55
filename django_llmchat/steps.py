"""Storing what a run's step produced, each in one transaction fenced by the run's
attempt: the reply with its tool calls and the link to its usage rows, a history summary,
the tool results; and the usage ledger's attempts (a pending row before each provider
call, closed after it). The request side, the messages a run sends, is
:mod:`django_llmchat.transcript`."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from .models import Attachment, Chat, Message, Run, ToolCall, Usage
from .prepared import Arg, PreparedInsert, PreparedUpdate, known_relations
from .providers.types import ProviderResponse
from .tools import ToolResult

__all__ = [
    "closed_attempt",
    "open_attempt",
    "record_failed_attempts",
    "save_step",
    "save_summary",
    "save_tool_results",
    "usage_row",
    "write_attempts",
]

# The hot-path writes: a reply costs the same few statements, none of them compiled twice.
_INSERT_MESSAGE = PreparedInsert(Message)
_INSERT_USAGE = PreparedInsert(Usage)
_TOUCHED = PreparedUpdate(Chat, updated_at=Now())


def usage_row(
    chat: Chat,
    *,
    provider: str,
    model_id: str,
    status: str,
    tokens=None,
    started: float,
    first_token: float | None = None,
    error: str = "",
    run_id: int | None = None,
) -> Usage:
    """An unsaved Usage row for one attempt, with its cost frozen now."""
    row = Usage(
        chat=chat,
        user_id=chat.user_id,  # the spending limits sum a user's rows by this column
        run_id=run_id,
        provider=provider,
        model_id=model_id,
        status=status,
        duration_ms=int((time.monotonic() - started) * 1000),
        first_token_ms=int((first_token - started) * 1000) if first_token else None,
        error=error[:4000],
    )
    if tokens is not None:
        row.tokens = tokens
    row.freeze_cost()
    return row


# what closing an attempt writes over its pending row
_ATTEMPT_COLUMNS = (
    "status",
    "provider",
    "model_id",
    "message_id",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "thinking_tokens",
    "input_cost",
    "output_cost",
    "cache_read_cost",
    "cache_write_cost",
    "thinking_cost",
    "total_cost",
    "duration_ms",
    "first_token_ms",
    "error",
    "estimated",
)


def open_attempt(row: Usage) -> Usage:
    """Write the Usage row of an attempt about to call its provider (``pending``, with
    what is known: the estimated input tokens and their cost, marked ``estimated``), so
    an attempt whose process dies is still on the ledger (the recovery marks it
    ``lost``). One INSERT, in its own transaction: it stays whatever happens next."""
    row.status = Usage.PENDING
    row.estimated = True
    _INSERT_USAGE.save(row)
    return row


def closed_attempt(pending: Usage | None, row: Usage) -> Usage:
    """``row`` (an ended attempt, unsaved) as the close of ``pending`` (its open row):
    written over it by :func:`write_attempts`."""
    if pending is not None and pending.pk is not None:
        row.pk, row.created_at = pending.pk, pending.created_at
        row.closes_pending = True
    return row


_TEXT_COLUMNS = ("status", "provider", "model_id", "error")
_VALUES = {
    name: Arg(str if name in _TEXT_COLUMNS else Decimal if name.endswith("_cost") else int)
    for name in _ATTEMPT_COLUMNS
    if name != "estimated"
}
# by ``estimated``: the vendor's counts, or ours (an attempt stopped before its response)
_CLOSE_ATTEMPT = {flag: PreparedUpdate(Usage, estimated=flag, **_VALUES) for flag in (False, True)}


def write_attempts(rows: list[Usage]) -> None:
    """Store ended attempts: a row closing a pending one is written over it (one UPDATE,
    compiled once), others are inserted. A row keeps its ``estimated`` flag: ``True``
    for an attempt billed by our estimate (see :meth:`~django_llmchat.attempts.
    ProviderAttempts._billed`)."""
    new = [row for row in rows if not getattr(row, "closes_pending", False)]
    for row in rows:
        if getattr(row, "closes_pending", False):
            row.estimated = bool(row.estimated)
            values = {name: getattr(row, name) for name in _ATTEMPT_COLUMNS if name != "estimated"}
            _CLOSE_ATTEMPT[row.estimated].run(row.pk, **values)
    if len(new) == 1:
        _INSERT_USAGE.save(new[0])
    elif new:
        Usage.objects.bulk_create(new)


def record_failed_attempts(rows: list[Usage]) -> None:
    write_attempts(rows)


def save_step(
    chat: Chat,
    response: ProviderResponse,
    *,
    provider: str,
    model_id: str,
    content: str,
    usages: list[Usage],
    execution,
    final: bool = False,
    parent_id: int | None = None,
) -> tuple[Message, list[ToolCall]]:
    """Write one provider response: the assistant message, its tool calls, citations and
    the link to its usage rows, in ONE transaction, fenced by the run's ``execution``
    (a run this process lost stores nothing). ``final``: the run ends with this response,
    so it is marked succeeded in the same transaction. Returns the message and its tool
    calls. ``parent_id``: the message the step answers (the last of the history sent)."""
    raw: dict[str, Any] = {}
    if isinstance(response.raw, dict):
        raw["response"] = response.raw
    if response.reasoning_items:
        raw["reasoning_items"] = response.reasoning_items
    item_ids = {tc.call_id: tc.item_id for tc in response.tool_calls if tc.item_id}
    if item_ids:
        raw["item_ids"] = item_ids
        raw["call_item_ids"] = [tc.item_id for tc in response.tool_calls]
    message = Message(
        chat=chat,
        role="assistant",
        content=content,
        model_id=response.model_id or model_id,
        provider=provider,
        finish_reason=response.message_finish_reason,
        citations=list(response.citations),
        server_tool_calls=list(response.server_tool_calls),
        raw=raw or None,
        run_id=execution.pk,
        parent_id=parent_id,
    )
    message.placed = True
    message.thinking = response.thinking
    if final and not response.tool_calls and execution.store_last_step(message, usages):
        known_relations(message, tool_calls=[], attachments=[], usages=usages)
        return message, []  # stored with the run's end in one call (PostgreSQL)
    with transaction.atomic():
        if final:
            execution.lock_chat()  # first: the run's end changes the chat's status
        _INSERT_MESSAGE.save(message)
        calls = [
            ToolCall(
                chat=chat,
                message=message,
                call_id=tc.call_id,
                name=tc.name,
                arguments=tc.arguments,
                thought_signature=tc.thought_signature or "",
            )
            for tc in response.tool_calls
        ]
        if calls:
            ToolCall.objects.bulk_create(calls)
        for row in usages:
            row.message = message
        write_attempts(usages)
        execution.step_stored(final_status=Run.SUCCEEDED if final else None)
        if not final:
            _TOUCHED.run(chat.pk)
    known_relations(message, tool_calls=calls, attachments=[], usages=usages)
    return message, calls


def save_summary(
    chat: Chat,
    *,
    content: str,
    until_id: int,
    provider: str,
    model_id: str,
    usage: Usage,
    execution=None,
) -> Message:
    """Write a summary of the history up to message ``until_id`` with the usage row of the
    call that wrote it, in one transaction (fenced by the run's ``execution`` when
    given). The summarized messages stay as they are."""
    message = Message(
        chat=chat,
        role="system",
        content=content,
        summary_until_id=until_id,
        provider=provider,
        model_id=model_id,
        run_id=execution.pk if execution is not None else None,
    )
    with transaction.atomic():
        _INSERT_MESSAGE.save(message)
        usage.message = message
        write_attempts([usage])
        if execution is not None:
            execution.fence()
    known_relations(message, tool_calls=[], attachments=[], usages=[usage])
    return message


def save_tool_results(
    chat: Chat,
    results: list[tuple[ToolCall, ToolResult]],
    execution=None,
    *,
    run_id: int | None = None,
    parent_id: Any = None,
) -> list[Message]:
    """Write the tool messages answering ``results``' calls, in one transaction (fenced by
    the run's ``execution`` when given). They follow one another on the path, the first
    after ``parent_id`` (the path's last message; read when not given)."""
    if not results:
        return []
    if parent_id is None:
        from .branches import leaf_id

        parent_id = leaf_id(chat.pk)
    messages = []
    for call, result in results:
        raw = {"error": result.content["error"]} if result.is_error else None
        m = Message(
            chat=chat,
            role="tool",
            content=result.text,
            parent_tool_call=call,
            raw=raw,
            run_id=execution.pk if execution is not None else run_id,
            parent_id=parent_id if not messages else None,
        )
        m.placed = True
        messages.append(m)
    with transaction.atomic():
        Message.objects.bulk_create(messages)
        if len(messages) > 1:  # each result follows the one before it
            for before, m in zip(messages, messages[1:], strict=False):
                m.parent_id = before.pk
            Message.objects.bulk_update(messages[1:], ["parent"])
        atts = []
        for m, (_call, result) in zip(messages, results, strict=True):
            for item in result.attachments or []:
                filename, data, *mime = item
                atts.append(
                    Attachment.objects.create_from_bytes(
                        message=m, data=data, filename=filename, mime_type=mime[0] if mime else None
                    )
                )
        if execution is not None:
            execution.fence()
        _TOUCHED.run(chat.pk)
    for m in messages:
        known_relations(
            m, tool_calls=[], attachments=[a for a in atts if a.message_id == m.pk], usages=[]
        )
    if any(m.pk is None for m in messages):  # backends without RETURNING on bulk insert
        raise RuntimeError("bulk_create did not set primary keys")
    return messages
