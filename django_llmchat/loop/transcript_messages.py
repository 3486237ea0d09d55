"""Message rows as provider values: one stored message (with its tool calls, the call it
answers and its files) as the :class:`~django_llmchat.providers.types.ProviderMessage` a
run sends."""

from __future__ import annotations

from typing import Any

from ..models import Attachment, Message, ToolCall
from ..providers.types import AttachmentData, ProviderMessage, ToolCallData
from ..values import Thinking


def _provider_message(
    *,
    role: str,
    content: str,
    model_id: str,
    provider: str,
    thinking: Thinking | None,
    item_ids: list[str | None],
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
    ``item_ids`` (one per call, :func:`call_item_ids`), ``reasoning_items`` and
    ``is_error`` come from the message's ``raw``."""
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
                item_id=item_id,
                ref=ref,
            )
            for (call_id, name, arguments, signature, ref), item_id in zip(
                calls, item_ids, strict=True
            )
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


def call_item_ids(raw: dict[str, Any], call_ids: list[str]) -> list[str | None]:
    """The vendor's item id of each of a message's tool calls, in their order, from the
    message's ``raw`` (a message stored before ``call_item_ids`` existed: by call id, so
    calls sharing an id share one)."""
    listed = raw.get("call_item_ids")
    if isinstance(listed, list) and len(listed) == len(call_ids):
        return [str(item) if item else None for item in listed]
    by_id = raw.get("item_ids") if isinstance(raw.get("item_ids"), dict) else {}
    return [by_id.get(call_id) for call_id in call_ids]


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
    rows = [
        (tc.call_id, tc.name, tc.arguments, tc.thought_signature, tc.pk)
        for tc in (message.tool_calls.all() if calls is None else calls)
    ]
    return _provider_message(
        role=message.role,
        content=message.content,
        model_id=message.model_id,
        provider=message.provider,
        thinking=message.thinking,
        item_ids=call_item_ids(raw, [row[0] for row in rows]),
        reasoning_items=raw.get("reasoning_items"),
        is_error=bool(raw.get("error")),
        cache_boundary=message.cache_boundary,
        calls=rows,
        parent=(parent.call_id, parent.name, parent.pk) if parent else None,
        attachments=list(message.attachments.all() if attachments is None else attachments),
        message_ref=message.pk,
    )
