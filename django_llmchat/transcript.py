"""Between ORM rows and provider values: the request side (messages to send) and the
persistence side (one transaction per step)."""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.db.models.functions import Now

from .models import Attachment, Chat, Message, Run, ToolCall, Usage
from .models.message import QUEUED_POSITION
from .prepared import PreparedInsert, PreparedQuery, PreparedUpdate, json_value, known_relations
from .providers.types import AttachmentData, ProviderMessage, ProviderResponse, ToolCallData
from .tools import ToolResult
from .values import Thinking


def _provider_message(
    *,
    role: str,
    content: str,
    model_id: str,
    provider: str,
    thinking: Thinking | None,
    item_ids: dict[str, str] | None,
    reasoning_items: list | None,
    is_error: bool,
    cache_boundary: bool,
    calls: list[tuple[str, str, Any, str, int | None]],
    parent: tuple[str, str, int | None] | None,
    attachments: list[Attachment],
    message_ref: int | None = None,
) -> ProviderMessage:
    """One transcript message as the provider needs it. ``calls`` are ``(call_id, name,
    arguments, thought_signature, pk)``; ``parent`` is the answered call's ``(call_id,
    name, pk)``;
    ``item_ids``, ``reasoning_items`` and ``is_error`` come from the message's ``raw``."""
    item_ids = item_ids or {}
    return ProviderMessage(
        role=role,
        content=content,
        attachments=[
            AttachmentData(mime_type=a.mime_type, data=a.read(), filename=a.filename)
            for a in attachments
        ],
        tool_calls=[
            ToolCallData(
                call_id=call_id,
                name=name,
                arguments=arguments or {},
                thought_signature=signature or None,
                item_id=item_ids.get(call_id),
                ref=ref,
            )
            for call_id, name, arguments, signature, ref in calls
        ],
        tool_call_id=parent[0] if parent else None,
        tool_name=parent[1] if parent else None,
        tool_call_ref=parent[2] if parent else None,
        is_error=is_error,
        thinking=thinking,
        reasoning_items=list(reasoning_items or []),
        cache_boundary=cache_boundary,
        model_id=model_id or None,
        provider=provider or None,
        ref=message_ref,
    )


def provider_message(
    message: Message,
    *,
    calls: list[ToolCall] | None = None,
    attachments: list[Attachment] | None = None,
) -> ProviderMessage:
    """A message row as the provider needs it: its tool calls and attachments are
    ``calls`` and ``attachments`` when given (rows just written), else read from its
    relations (loaded or not)."""
    parent = message.parent_tool_call if message.parent_tool_call_id else None
    raw = message.raw if isinstance(message.raw, dict) else {}
    return _provider_message(
        role=message.role,
        content=message.content,
        model_id=message.model_id,
        provider=message.provider,
        thinking=message.thinking,
        item_ids=raw.get("item_ids"),
        reasoning_items=raw.get("reasoning_items"),
        is_error=bool(raw.get("error")),
        cache_boundary=message.cache_boundary,
        calls=[
            (tc.call_id, tc.name, tc.arguments, tc.thought_signature, tc.pk)
            for tc in (message.tool_calls.all() if calls is None else calls)
        ],
        parent=(parent.call_id, parent.name, parent.pk) if parent else None,
        attachments=list(message.attachments.all() if attachments is None else attachments),
        message_ref=message.pk,
    )


MESSAGE_COLUMNS = (
    "id",
    "role",
    "content",
    "model_id",
    "provider",
    "thinking_text",
    "thinking_signature",
    "raw",
    "cache_boundary",
    "parent_tool_call_id",
    "summary_until_id",
)


# The hot-path reads, compiled once per database (see django_llmchat.prepared).
_HISTORY = PreparedQuery(
    lambda chat_id: (
        # prompts queued behind the run wait for their own turn
        Message.objects.filter(chat_id=chat_id, position__lt=QUEUED_POSITION)
        .annotate(
            _calls=Exists(ToolCall.objects.filter(message=OuterRef("pk"))),
            _files=Exists(Attachment.objects.filter(message=OuterRef("pk"))),
        )
        .order_by("position", "id")
        .values_list(*MESSAGE_COLUMNS, "_calls", "_files")
    )
)
_CALLS = PreparedQuery(
    lambda chat_id: (
        ToolCall.objects.filter(chat_id=chat_id)
        .order_by("id")
        .values_list("id", "message_id", "call_id", "name", "arguments", "thought_signature")
    )
)


# The hot-path writes: a reply costs the same few statements, none of them compiled twice.
_INSERT_MESSAGE = PreparedInsert(Message)
_INSERT_USAGE = PreparedInsert(Usage)
_TOUCHED = PreparedUpdate(Chat, updated_at=Now())


def load_history(chat: Chat) -> tuple[list[ProviderMessage], list[int], tuple | None]:
    """What a run needs from the saved transcript, read as plain rows (no model instances):
    the provider messages, the ids of tool calls still unanswered, and the latest summary
    as ``(pk, covered up to this message's pk, content)`` or ``None`` (summaries are not
    among the messages). One query, plus one for tool calls and one for attachments when
    the chat has any, whatever the length."""
    rows = _HISTORY.rows(chat.pk)
    calls: dict[int, list[tuple]] = {}
    by_pk: dict[int, tuple] = {}
    if any(row[-2] for row in rows):
        for row in _CALLS.rows(chat.pk):
            row = (*row[:4], json_value(row[4]), row[5])
            calls.setdefault(row[1], []).append(row)
            by_pk[row[0]] = row
    attachments: dict[int, list[Attachment]] = {}
    if any(row[-1] for row in rows):
        for att in (
            Attachment.objects.filter(message__chat=chat)
            .order_by("id")
            .only("id", "message_id", "file", "filename", "mime_type")
        ):
            attachments.setdefault(att.message_id, []).append(att)
    answered = set()
    history: list[ProviderMessage] = []
    summary = None
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
        ) = row[:-2]
        if summary_until is not None:
            summary = (pk, summary_until, content)  # rows are in order: the last one wins
            continue
        raw = json_value(raw) if raw else None
        if not isinstance(raw, dict):
            raw = {}
        parent = by_pk.get(parent_id) if parent_id else None
        if parent_id:
            answered.add(parent_id)
        history.append(
            _provider_message(
                role=role,
                content=content,
                model_id=model_id,
                provider=provider,
                thinking=Thinking(t_text, t_sig or None) if (t_text or t_sig) else None,
                item_ids=raw.get("item_ids"),
                reasoning_items=raw.get("reasoning_items"),
                is_error=bool(raw.get("error")),
                cache_boundary=cache,
                calls=[(*c[2:], c[0]) for c in calls.get(pk, ())],
                parent=(parent[2], parent[3], parent[0]) if parent else None,
                attachments=attachments.get(pk, []),
                message_ref=pk,
            )
        )
    pending = [pk for pk in by_pk if pk not in answered]
    return history, pending, summary


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


def record_failed_attempts(rows: list[Usage]) -> None:
    if rows:
        Usage.objects.bulk_create(rows)


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
) -> tuple[Message, list[ToolCall]]:
    """Write one provider response: the assistant message, its tool calls, citations and
    the link to its usage rows, in ONE transaction, fenced by the run's ``execution``
    (a run this process lost stores nothing). ``final``: the run ends with this response,
    so it is marked succeeded in the same transaction. Returns the message and its tool
    calls."""
    raw: dict[str, Any] = {}
    if isinstance(response.raw, dict):
        raw["response"] = response.raw
    if response.reasoning_items:
        raw["reasoning_items"] = response.reasoning_items
    item_ids = {tc.call_id: tc.item_id for tc in response.tool_calls if tc.item_id}
    if item_ids:
        raw["item_ids"] = item_ids
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
    )
    message.thinking = response.thinking
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
        if len(usages) == 1:
            _INSERT_USAGE.save(usages[0])
        else:
            Usage.objects.bulk_create(usages)
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
        _INSERT_USAGE.save(usage)
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
) -> list[Message]:
    """Write the tool messages answering ``results``' calls, in one transaction (fenced by
    the run's ``execution`` when given)."""
    if not results:
        return []
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
        )
        messages.append(m)
    with transaction.atomic():
        Message.objects.bulk_create(messages)
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


__all__ = [
    "provider_message",
    "record_failed_attempts",
    "save_step",
    "save_summary",
    "save_tool_results",
    "load_history",
    "usage_row",
]
