"""What vendor stream parsers build on: :class:`StreamParser` and the
:class:`ResponseBuilder` that turns the events it yields into one response."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .. import events as ev
from ..values import Thinking, Tokens
from .types import ProviderRequest, ProviderResponse, ToolCallData

if TYPE_CHECKING:
    from .base import Provider


def parse_arguments(text: str | None) -> dict[str, Any]:
    """Tool-call arguments arrive as JSON text; an empty string means no arguments."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_value": value}


class ResponseBuilder:
    """Accumulates one streamed response from the events a parser yields.

    The base feeds it every event; vendor parsers set what events do not carry
    (``citations``, ``server_tool_calls``, ``raw``, ``model_id``, ``response_id``,
    ``reasoning_items``, tool-call extras such as Gemini thought signatures) directly.
    """

    def __init__(self) -> None:
        self.text_parts: list[str] = []
        self.text_done = False
        self.tool_calls: list[ToolCallData] = []
        self.reasoning_parts: list[str] = []
        self.reasoning_signature: str | None = None
        self.reasoning_items: list[dict[str, Any]] = []
        self.citations: list = []
        self.server_tool_calls: list = []
        self.finish_reason: str | None = None
        self.raw_finish_reason: str | None = None
        self.tokens = Tokens()
        self.model_id: str | None = None
        self.response_id: str | None = None
        self.raw: dict[str, Any] = {}
        self.tool_call_extras: dict[int, dict[str, Any]] = {}
        """Extra fields of tool calls (Gemini's ``thought_signature``) by the call's position
        in the response (0 for the first ToolCallDone): call ids may repeat or be empty."""

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def add(self, event: ev.StreamEvent) -> None:
        kind = type(event)
        if kind is ev.TextDelta:
            self.text_parts.append(event.content)
        elif kind is ev.ReasoningDelta:
            pass
        elif kind is ev.ToolCallDone:
            extras = self.tool_call_extras.get(len(self.tool_calls), {})
            self.tool_calls.append(
                ToolCallData(
                    call_id=event.call_id,
                    name=event.name,
                    arguments=parse_arguments(event.arguments),
                    thought_signature=extras.get("thought_signature"),
                    item_id=event.item_id,
                )
            )
        elif kind is ev.ReasoningDone:
            self.reasoning_parts.append(event.part.text)
            if event.part.signature:
                self.reasoning_signature = event.part.signature
        elif kind is ev.TokenUsageDone:
            self.tokens = event.token_usage
        elif kind is ev.FinishReasonDone:
            self.finish_reason = event.finish_reason
            self.raw_finish_reason = event.raw_finish_reason
        elif kind is ev.TextDone:
            self.text_done = True

    def build(self) -> ProviderResponse:
        thinking = None
        if self.reasoning_parts or self.reasoning_signature:
            thinking = Thinking("".join(self.reasoning_parts), self.reasoning_signature)
        finish = self.finish_reason or ("tool_calls" if self.tool_calls else "stop")
        return ProviderResponse(
            content=self.text,
            tool_calls=self.tool_calls,
            thinking=thinking,
            reasoning_items=self.reasoning_items,
            citations=self.citations,
            server_tool_calls=self.server_tool_calls,
            finish_reason=finish,
            raw_finish_reason=self.raw_finish_reason,
            tokens=self.tokens,
            model_id=self.model_id,
            response_id=self.response_id,
            raw=self.raw or None,
        )


class StreamParser:
    """Reads one streamed answer, one decoded SSE event (or NDJSON line) at a time.

    ``feed()`` returns the events that input produced and raises a ``ProviderError`` for
    an error event; it sets ``done`` when the vendor's terminal event arrives. When the
    body ends without it, the base calls ``end_of_stream()`` once: a vendor whose stream
    has no terminator may emit its last events there and set ``done``; otherwise the
    stream raises :class:`IncompleteStreamError`.
    """

    def __init__(self, provider: Provider, request: ProviderRequest):
        self.provider = provider
        self.request = request
        self.builder = ResponseBuilder()
        self.done = False

    def feed(self, event: str | None, data: str) -> Iterable[ev.StreamEvent]:
        raise NotImplementedError

    def end_of_stream(self) -> Iterable[ev.StreamEvent]:
        return ()

    def finish(self) -> ProviderResponse:
        return self.builder.build()
