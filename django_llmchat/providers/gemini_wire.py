"""What :mod:`.gemini` and :mod:`.gemini_stream` both read of a ``GenerateContentResponse``:
``finishReason`` and ``blockReason``, ``usageMetadata``, grounding (citations and the search
it ran) and function call ids (Gemini's own, or made up when it sends none)."""

from __future__ import annotations

import uuid
from typing import Any

from ..values import Citation, ServerToolCall, Tokens

# Gemini ``finishReason`` (and ``promptFeedback.blockReason``) -> event finish reason
# (seed 001). ``STOP`` becomes ``tool_calls`` when the response holds function calls.
# Unknown values -> "other".
FINISH_REASONS: dict[str, str] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "LANGUAGE": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "IMAGE_RECITATION": "content_filter",
    "MALFORMED_FUNCTION_CALL": "malformed_output",
    "UNEXPECTED_TOOL_CALL": "malformed_output",
    "OTHER": "other",
    "FINISH_REASON_UNSPECIFIED": "other",
}


REASONING_FORMAT = "gemini"


def usage_tokens(usage: dict[str, Any] | None) -> Tokens:
    """``usageMetadata`` -> :class:`Tokens`. Cached tokens are inside ``promptTokenCount``;
    thoughts are outside ``candidatesTokenCount`` (added to the output here)."""
    if not usage:
        return Tokens()
    prompt = usage.get("promptTokenCount")
    if prompt is not None and usage.get("toolUsePromptTokenCount"):
        prompt += usage["toolUsePromptTokenCount"]
    cached = usage.get("cachedContentTokenCount")
    if prompt is not None and cached:
        prompt -= cached
    candidates = usage.get("candidatesTokenCount")
    thoughts = usage.get("thoughtsTokenCount")
    output = None
    if candidates is not None or thoughts is not None:
        output = (candidates or 0) + (thoughts or 0)
    return Tokens(
        input_tokens=prompt,
        output_tokens=output,
        cache_read_tokens=cached,
        thinking_tokens=thoughts,
    )


def finish_reason(raw: str | None, has_calls: bool) -> str:
    reason = FINISH_REASONS.get(raw or "STOP", "other")
    if reason == "stop" and has_calls:
        return "tool_calls"
    return reason


def grounding_citations(metadata: dict[str, Any] | None) -> list[Citation]:
    """``groundingMetadata`` -> citations: one per supported segment and source, or one
    per source when no segment is given."""
    if not metadata:
        return []
    chunks = [
        c.get("web") or c.get("retrievedContext") or {}
        for c in metadata.get("groundingChunks") or []
    ]
    out: list[Citation] = []
    used: set[int] = set()
    for support in metadata.get("groundingSupports") or []:
        segment = support.get("segment") or {}
        for index in support.get("groundingChunkIndices") or []:
            if not 0 <= index < len(chunks):
                continue
            used.add(index)
            out.append(
                Citation(
                    url=chunks[index].get("uri"),
                    title=chunks[index].get("title"),
                    cited_text=segment.get("text"),
                    start_index=segment.get("startIndex"),
                    end_index=segment.get("endIndex"),
                )
            )
    for index, chunk in enumerate(chunks):
        if index not in used and chunk.get("uri"):
            out.append(Citation(url=chunk.get("uri"), title=chunk.get("title")))
    return out


def grounding_search(metadata: dict[str, Any] | None) -> ServerToolCall | None:
    if not metadata or not metadata.get("webSearchQueries"):
        return None
    sources = [
        {"title": (c.get("web") or {}).get("title"), "url": (c.get("web") or {}).get("uri")}
        for c in metadata.get("groundingChunks") or []
        if c.get("web")
    ]
    return ServerToolCall(
        name="google_search",
        arguments={"queries": list(metadata["webSearchQueries"])},
        result=sources,
        status="completed",
    )


class CallIds:
    """Call ids for one response: Gemini's own ``functionCall.id`` exactly as sent whenever
    it sends the field (an empty or repeated id included), else ``call_<responseId>_<n>``
    (``n`` the call's position; unique within a chat, the same on every replay). A made-up
    id is never sent back: only Gemini's own go back as ``functionCall.id``."""

    def __init__(self, response_id: str | None):
        self.prefix = response_id or uuid.uuid4().hex[:16]
        self.count = 0

    def call_id(self, call: dict[str, Any]) -> str:
        self.count += 1
        value = call.get("id")
        if value is not None:
            return value if isinstance(value, str) else str(value)
        return f"call_{self.prefix}_{self.count}"
