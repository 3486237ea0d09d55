"""Streamed answers of Gemini's ``streamGenerateContent`` (``alt=sse``): each chunk a whole
``GenerateContentResponse`` fragment, turned into stream events and the whole response
(see :mod:`.gemini` for the requests).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .. import events as ev
from . import gemini_wire as wire
from ._json import loads
from .base import Provider, StreamParser
from .types import (
    ProviderRequest,
    ProviderResponse,
    vendor_id,
)

__all__ = ["GeminiStreamParser"]


class GeminiStreamParser(StreamParser):
    """Reads ``streamGenerateContent?alt=sse``: one whole response per SSE event.

    The stream has no terminator: it is complete when a chunk carrying ``finishReason``
    (or a prompt ``blockReason``) has arrived. The parser still reads to the end of the
    body, so a later ``usageMetadata`` snapshot or a trailing error is not lost, and emits
    the usage and finish events from :meth:`end_of_stream`. A body that ends before any
    finishing chunk leaves the stream incomplete.
    """

    def __init__(self, provider: Provider, request: ProviderRequest):
        super().__init__(provider, request)
        self.ids: wire.CallIds | None = None
        self.thoughts: list[str] = []
        self.thinking_open = False
        self.signature: str | None = None
        self.usage: dict[str, Any] | None = None
        self.grounding: dict[str, Any] | None = None
        self.native: list[bool] = []
        """For each function call so far, by position: whether Gemini gave it an id."""
        self.finished: tuple[str | None, str | None] | None = None
        self.last_chunk: dict[str, Any] = {}

    def feed(self, event: str | None, data: str) -> Iterable[ev.StreamEvent]:
        payload = loads(data)  # the base turns a decoding error into a ProviderError
        if isinstance(payload, list):  # tolerate the array framing of non-SSE streams
            return [e for chunk in payload for e in self.chunk(chunk)]
        return self.chunk(payload)

    def chunk(self, payload: Any) -> list[ev.StreamEvent]:
        if not isinstance(payload, dict):
            return []
        candidates = payload.get("candidates")
        if not candidates and "error" in payload:
            raise self.provider.error_from_payload(payload)
        if self.ids is None:
            self.ids = wire.CallIds(payload.get("responseId"))
            self.builder.response_id = vendor_id(payload.get("responseId"))
        version = payload.get("modelVersion")
        if version:
            self.builder.model_id = version
        usage = payload.get("usageMetadata")
        if usage:
            self.usage = usage
        candidate = candidates[0] if candidates else {}
        events: list[ev.StreamEvent] = []
        content = candidate.get("content")
        for part in (content.get("parts") if content else None) or ():
            if "functionCall" in part:
                events.extend(self.close_thinking())
                events.extend(self.function_call(part))
                continue
            signature = part.get("thoughtSignature")
            if signature:
                self.signature = signature
            text = part.get("text")
            if not text or not isinstance(text, str):
                continue
            if part.get("thought"):
                self.thoughts.append(text)
                self.thinking_open = True
                events.append(ev.ReasoningDelta(text))
            else:
                events.extend(self.close_thinking())
                events.append(ev.TextDelta(text))
        grounding = candidate.get("groundingMetadata")
        if grounding:
            self.grounding = grounding
        raw = candidate.get("finishReason")
        feedback = payload.get("promptFeedback")
        block = feedback.get("blockReason") if feedback else None
        if raw is not None or (block and not candidates):
            events.extend(self.close_thinking())
            self.finished = (raw, block)
        self.last_chunk = payload
        return events

    def end_of_stream(self) -> Iterable[ev.StreamEvent]:
        if self.finished is None:
            return ()
        events: list[ev.StreamEvent] = list(self.close_thinking())
        raw, block = self.finished
        if raw is None:
            reason, raw = "content_filter", block
        else:
            reason = wire.finish_reason(raw, bool(self.builder.tool_calls))
        self.finish_grounding(events)
        if self.signature and not self.builder.reasoning_signature:
            self.builder.reasoning_signature = self.signature
        raw_body = dict(self.last_chunk)
        if self.usage:
            raw_body["usageMetadata"] = self.usage
        self.builder.raw = raw_body
        self.done = True
        events.append(ev.TokenUsageDone(token_usage=wire.usage_tokens(self.usage)))
        events.append(ev.FinishReasonDone(finish_reason=reason, raw_finish_reason=raw))
        return events

    def function_call(self, part: dict[str, Any]) -> list[ev.StreamEvent]:
        call = part.get("functionCall") or {}
        assert self.ids is not None
        call_id = self.ids.call_id(call)
        position = len(self.native)
        self.native.append(bool(call.get("id")))
        if part.get("thoughtSignature"):
            # read by the builder when it records the ToolCallDone below
            extras = {"thought_signature": part["thoughtSignature"]}
            self.builder.tool_call_extras[position] = extras
        name = call.get("name") or ""
        arguments = json.dumps(call.get("args") or {}, ensure_ascii=False)
        return [
            ev.ToolCallDelta(item_id=call_id, name=name, arguments_delta=arguments),
            ev.ToolCallDone(item_id=call_id, call_id=call_id, name=name, arguments=arguments),
        ]

    def close_thinking(self) -> list[ev.StreamEvent]:
        if not self.thinking_open:
            return []
        self.thinking_open = False
        text = "".join(self.thoughts)
        self.thoughts = []
        part = ev.ReasoningPart(
            type="text", text=text, format=wire.REASONING_FORMAT, signature=self.signature
        )
        return [ev.ReasoningDone(part)]

    def finish_grounding(self, events: list[ev.StreamEvent]) -> None:
        if not self.grounding:
            return
        self.builder.citations.extend(wire.grounding_citations(self.grounding))
        search = wire.grounding_search(self.grounding)
        if search is not None:
            self.builder.server_tool_calls.append(search)
            query = "; ".join(search.arguments.get("queries") or []) or None
            events.append(ev.WebSearchDone(query, sources=list(search.result or [])))

    def finish(self) -> ProviderResponse:
        response = self.builder.build()
        # Ids made up here are not Gemini's: only its own go back as ``functionCall.id``.
        for call, native in zip(response.tool_calls, self.native, strict=False):
            if not native:
                call.item_id = None
        return response
