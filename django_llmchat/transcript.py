"""Between ORM rows and provider values: the request side (messages to send) and the
persistence side (one transaction per step)."""

from __future__ import annotations

import json
import time
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.db.models.functions import Now

from .models import Attachment, Chat, Message, ToolCall, Usage
from .prepared import PreparedQuery, json_value
from .providers.types import AttachmentData, ProviderMessage, ProviderResponse, ToolCallData
from .tools import ToolResult
from .values import TOKEN_FIELDS, Thinking, Tokens


def _raw(message: Message) -> dict[str, Any]:
    return message.raw if isinstance(message.raw, dict) else {}


def provider_message(message: Message) -> ProviderMessage:
    """A transcript message (loaded with ``transcript()``) as the provider needs it."""
    raw = _raw(message)
    item_ids = raw.get("item_ids") or {}
    calls = [
        ToolCallData(
            call_id=tc.call_id,
            name=tc.name,
            arguments=tc.arguments or {},
            thought_signature=tc.thought_signature or None,
            item_id=item_ids.get(tc.call_id),
        )
        for tc in message.tool_calls.all()
    ]
    parent = message.parent_tool_call if message.parent_tool_call_id else None
    return ProviderMessage(
        role=message.role,
        content=message.content,
        attachments=[
            AttachmentData(mime_type=a.mime_type, data=a.read(), filename=a.filename)
            for a in message.attachments.all()
        ],
        tool_calls=calls,
        tool_call_id=parent.call_id if parent else None,
        tool_name=parent.name if parent else None,
        is_error=bool(raw.get("error")),
        thinking=message.thinking,
        reasoning_items=list(raw.get("reasoning_items") or []),
        cache_boundary=message.cache_boundary,
        model_id=message.model_id or None,
        provider=message.provider or None,
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
    *TOKEN_FIELDS,
)


# The hot-path reads, compiled once per database (see django_llmchat.prepared).
_HISTORY = PreparedQuery(
    lambda chat_id: (
        Message.objects.filter(chat_id=chat_id)
        .annotate(
            _calls=Exists(ToolCall.objects.filter(message=OuterRef("pk"))),
            _files=Exists(Attachment.objects.filter(message=OuterRef("pk"))),
        )
        .order_by("created_at", "id")
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


def load_history(chat: Chat) -> tuple[list[ProviderMessage], list[int], Tokens]:
    """What a run needs from the saved transcript, read as plain rows (no model instances):
    the provider messages, the ids of tool calls still unanswered, and the token counts
    written on the messages themselves (hand-built ones). One query, plus one for tool
    calls and one for attachments when the chat has any, whatever the length."""
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
    own = Tokens()
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
            *token_cols,
        ) = row[:-2]
        raw = json_value(raw)
        raw = raw if isinstance(raw, dict) else {}
        item_ids = raw.get("item_ids") or {}
        if any(v is not None for v in token_cols):
            own = own + Tokens(*token_cols)
        parent = by_pk.get(parent_id) if parent_id else None
        if parent_id:
            answered.add(parent_id)
        history.append(
            ProviderMessage(
                role=role,
                content=content,
                attachments=[
                    AttachmentData(mime_type=a.mime_type, data=a.read(), filename=a.filename)
                    for a in attachments.get(pk, ())
                ],
                tool_calls=[
                    ToolCallData(
                        call_id=c[2],
                        name=c[3],
                        arguments=c[4] or {},
                        thought_signature=c[5] or None,
                        item_id=item_ids.get(c[2]),
                    )
                    for c in calls.get(pk, ())
                ],
                tool_call_id=parent[2] if parent else None,
                tool_name=parent[3] if parent else None,
                is_error=bool(raw.get("error")),
                thinking=Thinking(t_text, t_sig or None) if (t_text or t_sig) else None,
                reasoning_items=list(raw.get("reasoning_items") or []),
                cache_boundary=cache,
                model_id=model_id or None,
                provider=provider or None,
            )
        )
    pending = [pk for pk in by_pk if pk not in answered]
    return history, pending, own


def usage_tokens(chat: Chat) -> Tokens:
    """The token total of every Usage row of the chat (one light query)."""
    total = Tokens()
    for row in Usage.objects.filter(chat=chat).values_list(*TOKEN_FIELDS):
        if any(v is not None for v in row):
            total = total + Tokens(*row)
    return total


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
) -> Usage:
    """An unsaved Usage row for one attempt, with its cost frozen now."""
    row = Usage(
        chat=chat,
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
    chat_updates: dict[str, Any] | None = None,
) -> Message:
    """Write one provider response: the assistant message, its tool calls, citations and
    the link to its usage rows, in ONE transaction."""
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
    )
    message.thinking = response.thinking
    with transaction.atomic():
        message.save()
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
        Usage.objects.bulk_create(usages)
        Chat.objects.filter(pk=chat.pk).update(updated_at=Now(), **(chat_updates or {}))
    message._prefetched_objects_cache = {"tool_calls": calls, "attachments": [], "usages": usages}
    return message


def save_tool_results(chat: Chat, results: list[tuple[ToolCall, ToolResult]]) -> list[Message]:
    """Write the tool messages answering ``results``' calls, in one transaction."""
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
            m._prefetched_objects_cache = {
                "tool_calls": [],
                "attachments": [a for a in atts if a.message_id == m.pk],
                "usages": [],
            }
        Chat.objects.filter(pk=chat.pk).update(updated_at=Now())
    if any(m.pk is None for m in messages):  # backends without RETURNING on bulk insert
        raise RuntimeError("bulk_create did not set primary keys")
    return messages


def encode_arguments(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


__all__ = [
    "TOKEN_FIELDS",
    "encode_arguments",
    "provider_message",
    "record_failed_attempts",
    "save_step",
    "save_tool_results",
    "load_history",
    "usage_row",
]
