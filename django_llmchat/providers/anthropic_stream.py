"""Streamed answers of Anthropic's Messages API: content-block events into stream events
and the whole response (see :mod:`.anthropic` for the requests).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .. import events as ev
from ..values import ServerToolCall
from . import anthropic_wire as wire
from ._json import loads
from .base import Provider, StreamParser, parse_arguments
from .types import (
    ProviderRequest,
    ProviderResponse,
    vendor_id,
)

__all__ = ["AnthropicStreamParser"]


class AnthropicStreamParser(StreamParser):
    """Reads one streamed Messages answer (``message_start`` ... ``message_stop``)."""

    handled = frozenset(
        {
            "message_start",
            "message_delta",
            "message_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
        }
    )

    def __init__(self, provider: Provider, request: ProviderRequest):
        super().__init__(provider, request)
        schema_name = getattr(provider, "schema_tool_name", None)
        self.schema_tool = schema_name(request) if schema_name else None
        self.message: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.state: dict[int, dict[str, Any]] = {}
        self.server_calls: dict[str, dict[str, Any]] = {}
        self.text_length = 0
        self.structured = False
        self.handlers = {kind: getattr(self, f"on_{kind}") for kind in self.handled}

    def feed(self, event: str | None, data: str) -> Iterable[ev.StreamEvent]:
        if event == "ping":
            return ()
        payload = loads(data)  # the base turns a decoding error into a ProviderError
        if not isinstance(payload, dict):
            return ()
        kind = payload.get("type") or event
        if event == "error" or kind == "error":
            raise self.provider.error_from_payload(payload)
        handler = self.handlers.get(kind)
        if handler is None:  # ping and unknown future events
            return ()
        return handler(payload)

    def text(self, piece: str) -> ev.TextDelta:
        self.text_length += len(piece)
        return ev.TextDelta(piece)

    # -- message -------------------------------------------------------------------------
    def on_message_start(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        self.message = dict(payload.get("message") or {})
        self.merge_usage(self.message.get("usage"))
        self.builder.model_id = self.message.get("model")
        self.builder.response_id = vendor_id(self.message.get("id"))
        return []

    def on_message_delta(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        for key, value in (payload.get("delta") or {}).items():
            if value is not None or key not in self.message:
                self.message[key] = value
        self.merge_usage(payload.get("usage"))
        return []

    def merge_usage(self, usage: dict[str, Any] | None) -> None:
        for key, value in (usage or {}).items():
            if value is not None:
                self.usage[key] = value

    def on_message_stop(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        self.done = True
        raw_reason = self.message.get("stop_reason")
        reason = wire.finish_reason(
            raw_reason, tool_calls=bool(self.builder.tool_calls), structured=self.structured
        )
        for index in self.blocks:
            self.join_parts(index)
        self.message["content"] = [self.blocks[i] for i in sorted(self.blocks)]
        self.message["usage"] = dict(self.usage)
        self.builder.raw = self.message
        self.builder.server_tool_calls = [ServerToolCall(**c) for c in self.server_calls.values()]
        return [
            ev.TokenUsageDone(token_usage=wire.usage_tokens(self.usage)),
            ev.FinishReasonDone(finish_reason=reason, raw_finish_reason=raw_reason),
        ]

    # -- content blocks ------------------------------------------------------------------
    def on_content_block_start(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        index = payload.get("index", len(self.blocks))
        block = dict(payload.get("content_block") or {})
        kind = block.get("type")
        self.blocks[index] = block
        state: dict[str, Any] = {"json": [], "emitted": False, "offset": self.text_length}
        self.state[index] = state
        events: list[ev.StreamEvent] = []
        if kind == "text":
            block["citations"] = list(block.get("citations") or [])
            if block.get("text"):
                events.append(self.text(block["text"]))
        elif kind == "thinking":
            if block.get("thinking"):
                events.append(ev.ReasoningDelta(block["thinking"]))
        elif kind == "redacted_thinking":
            self.builder.reasoning_items.append(dict(block))
        elif kind == "tool_use":
            state["schema"] = bool(self.schema_tool) and block.get("name") == self.schema_tool
        elif wire.is_server_result(block):
            call = wire.add_server_result(self.server_calls, block)
            if kind == "web_search_tool_result":
                query = (call.get("arguments") or {}).get("query")
                events.append(
                    ev.WebSearchDone(query, sources=wire.web_sources(block.get("content")))
                )
        return events

    def on_content_block_delta(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        index = payload.get("index", 0)
        block = self.blocks.get(index)
        if block is None:
            block = self.blocks[index] = {}
        state = self.state.get(index)
        if state is None:
            state = self.state[index] = {"json": [], "emitted": False, "offset": 0}
        delta = payload.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            piece = delta.get("text") or ""
            if piece:  # joined at content_block_stop: no quadratic concatenation
                state.setdefault("parts", []).append(piece)
            return [self.text(piece)] if piece else []
        if kind == "thinking_delta":
            piece = delta.get("thinking") or ""
            if piece:
                state.setdefault("parts", []).append(piece)
            return [ev.ReasoningDelta(piece)] if piece else []
        if kind == "signature_delta":
            block["signature"] = block.get("signature", "") + (delta.get("signature") or "")
            return []
        if kind == "citations_delta":
            if delta.get("citation"):
                block.setdefault("citations", []).append(delta["citation"])
            return []
        if kind == "input_json_delta":
            piece = delta.get("partial_json") or ""
            state["json"].append(piece)
            if not piece or block.get("type") != "tool_use":
                return []
            if state.get("schema"):
                state["emitted"] = True
                return [self.text(piece)]
            first = not state["emitted"]
            state["emitted"] = True
            return [
                ev.ToolCallDelta(
                    item_id=block.get("id"),
                    name=block.get("name") if first else None,
                    arguments_delta=piece,
                )
            ]
        return []

    def join_parts(self, index: int) -> None:
        """Fold a block's streamed text or thinking pieces into the block."""
        block = self.blocks.get(index)
        parts = (self.state.get(index) or {}).pop("parts", None)
        if block is None or not parts:
            return
        key = "thinking" if block.get("type") == "thinking" else "text"
        block[key] = block.get(key, "") + "".join(parts)

    def on_content_block_stop(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        index = payload.get("index", 0)
        self.join_parts(index)
        block = self.blocks.get(index) or {}
        state = self.state.get(index) or {"json": [], "emitted": False, "offset": 0}
        kind = block.get("type")
        if kind == "text":
            text = block.get("text") or ""
            start = state["offset"]
            self.builder.citations.extend(
                wire.to_citation(raw, start, start + len(text))
                for raw in block.get("citations") or []
            )
            if not block.get("citations"):
                block.pop("citations", None)
            return []
        if kind == "thinking":
            part = ev.ReasoningPart(
                type="text",
                text=block.get("thinking") or "",
                format="anthropic",
                signature=block.get("signature") or None,
            )
            return [ev.ReasoningDone(part)]
        if kind != "tool_use" and kind not in wire.SERVER_TOOL_USES:
            return []
        arguments = "".join(state["json"]).strip()
        if not arguments:
            initial = block.get("input")
            arguments = json.dumps(initial, ensure_ascii=False) if initial else "{}"
        block["input"] = parse_arguments(arguments)
        if kind in wire.SERVER_TOOL_USES:
            call = self.server_calls.setdefault(block.get("id") or "", {})
            call.update(name=block.get("name") or "", id=block.get("id"), arguments=block["input"])
            if block.get("name") == "web_search":
                return [ev.WebSearchStatus("searching", query=block["input"].get("query"))]
            return []
        if state.get("schema"):
            self.structured = True
            return [] if state["emitted"] else [self.text(arguments)]
        return [
            ev.ToolCallDone(
                item_id=block.get("id"),
                call_id=block.get("id") or "",
                name=block.get("name") or "",
                arguments=arguments,
            )
        ]

    def finish(self) -> ProviderResponse:
        response = super().finish()
        for call in response.tool_calls:  # Anthropic has one id per call
            if call.item_id == call.call_id:
                call.item_id = None
        return response
