"""Responses API items as :mod:`.openai_responses` and :mod:`.openai_responses_stream` both
read them: ``status`` and ``incomplete_details`` as a finish reason, ``usage``, reasoning
summaries, ``url_citation`` annotations, function call ids and web search calls."""

from __future__ import annotations

from typing import Any

from ..values import Citation, ServerToolCall, Tokens

# The Responses API has no finish reason: ``status`` plus ``incomplete_details.reason``.
# The raw value is the incomplete reason when there is one, else the status.
# ``completed`` becomes ``tool_calls`` when the response holds function calls.
FINISH_REASONS: dict[str, str] = {
    "completed": "stop",
    "max_output_tokens": "length",
    "content_filter": "content_filter",
    "incomplete": "other",
    "failed": "error",
    "cancelled": "other",
}


REASONING_FORMAT = "openai-responses"


def finish_reason(
    status: str | None, incomplete_reason: str | None, has_calls: bool
) -> tuple[str, str]:
    """``(finish_reason, raw_finish_reason)`` from a response's status."""
    raw = incomplete_reason or status or "completed"
    reason = FINISH_REASONS.get(raw, "other")
    if reason == "stop" and has_calls:
        reason = "tool_calls"
    return reason, raw


def usage_tokens(usage: dict[str, Any] | None) -> Tokens:
    """Responses usage -> :class:`Tokens`. Cache reads and writes are inside
    ``input_tokens`` (taken out here) and reasoning inside ``output_tokens``."""
    if not usage:
        return Tokens()
    input_tokens = usage.get("input_tokens")
    details = usage.get("input_tokens_details") or {}
    cached = details.get("cached_tokens")
    written = details.get("cache_write_tokens")
    if input_tokens is not None:
        input_tokens -= (cached or 0) + (written or 0)
    out_details = usage.get("output_tokens_details") or {}
    return Tokens(
        input_tokens=input_tokens,
        output_tokens=usage.get("output_tokens"),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        thinking_tokens=out_details.get("reasoning_tokens"),
    )


def summary_text(item: dict[str, Any]) -> str:
    """The readable text of a reasoning item: its summary parts, else its reasoning text."""
    parts = [p.get("text") or "" for p in item.get("summary") or [] if isinstance(p, dict)]
    if not any(parts):
        parts = [p.get("text") or "" for p in item.get("content") or [] if isinstance(p, dict)]
    return "\n\n".join(p for p in parts if p)


def annotation_citation(annotation: dict[str, Any], text: str) -> Citation | None:
    kind = annotation.get("type")
    if kind == "url_citation":
        start, end = annotation.get("start_index"), annotation.get("end_index")
        cited = text[start:end] if isinstance(start, int) and isinstance(end, int) else None
        return Citation(
            url=annotation.get("url"),
            title=annotation.get("title"),
            cited_text=cited or None,
            start_index=start,
            end_index=end,
        )
    if kind in ("file_citation", "container_file_citation"):
        return Citation(
            title=annotation.get("filename"),
            source=annotation.get("file_id"),
            start_index=annotation.get("start_index", annotation.get("index")),
            end_index=annotation.get("end_index"),
        )
    return None


def item_call_id(item: dict[str, Any]) -> str:
    """A ``function_call`` item's ``call_id`` exactly as sent (``""`` stays ``""``; ids may
    repeat across items); the item id stands in only when no ``call_id`` was sent."""
    call_id = item.get("call_id")
    if call_id is None:
        return str(item.get("id") or "")
    return call_id if isinstance(call_id, str) else str(call_id)


def web_search_call(item: dict[str, Any]) -> ServerToolCall:
    action = item.get("action") or {}
    return ServerToolCall(
        name="web_search",
        id=item.get("id"),
        arguments={k: v for k, v in action.items() if k != "sources"},
        result=action.get("sources"),
        status=item.get("status"),
    )


def shift_citation(citation: Citation, offset: int) -> Citation:
    """A citation's indices moved by ``offset`` (text of earlier parts before it)."""
    if not offset:
        return citation
    return Citation(
        url=citation.url,
        title=citation.title,
        cited_text=citation.cited_text,
        start_index=None if citation.start_index is None else citation.start_index + offset,
        end_index=None if citation.end_index is None else citation.end_index + offset,
        source=citation.source,
        metadata=citation.metadata,
    )
