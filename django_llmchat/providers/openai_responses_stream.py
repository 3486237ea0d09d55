"""Streamed answers of the Responses API: ``event:`` + ``data:`` Server-Sent Events into
stream events and the whole response (see :mod:`.openai_responses` for the requests).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .. import events as ev
from . import openai_responses_wire as wire
from ._json import loads
from .base import Provider, StreamParser
from .types import ProviderRequest, vendor_id

if TYPE_CHECKING:
    from .openai_responses import OpenAIResponsesProvider

__all__ = ["ResponsesStreamParser"]


class ResponsesStreamParser(StreamParser):
    """Reads a streamed Responses answer (``event:`` + ``data:`` SSE, no ``[DONE]``)."""

    provider: OpenAIResponsesProvider

    def __init__(self, provider: Provider, request: ProviderRequest):
        super().__init__(provider, request)
        # Function calls by ``output_index`` (and by item id, for events without one);
        # never by ``call_id``, which may repeat or be empty.
        self.calls_by_index: dict[int, dict[str, Any]] = {}
        self.calls_by_item: dict[str, dict[str, Any]] = {}
        self.reasoning_text: dict[str, list[tuple[int, str]]] = {}
        self.reasoning_order: list[str] = []
        self.text_length = 0
        self.refused = False

    def feed(self, event: str | None, data: str) -> Iterable[ev.StreamEvent]:
        try:
            payload = loads(data)
        except ValueError:
            return []
        if not isinstance(payload, dict):
            return []
        kind = payload.get("type") or event or ""
        if kind == "error" or ("type" not in payload and isinstance(payload.get("error"), dict)):
            raise self.provider.error_from_payload(payload)
        handler = getattr(self, "on_" + kind.replace(".", "_"), None)
        if handler is None:
            return []
        return handler(payload) or []

    # -- text ------------------------------------------------------------------------
    def on_response_created(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        response = payload.get("response") or {}
        self.builder.model_id = response.get("model")
        self.builder.response_id = vendor_id(response.get("id"))
        return []

    def on_response_output_text_delta(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        delta = payload.get("delta") or ""
        if not delta:
            return []
        self.text_length += len(delta)
        return [ev.TextDelta(delta)]

    def on_response_refusal_delta(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        self.refused = True
        return self.on_response_output_text_delta(payload)

    # -- reasoning -------------------------------------------------------------------
    def on_response_reasoning_summary_text_delta(self, payload: dict[str, Any]) -> list:
        delta = payload.get("delta") or ""
        if not delta:
            return []
        item_id = payload.get("item_id") or ""
        parts = self.reasoning_text.setdefault(item_id, [])
        index = payload.get("summary_index", 0)
        # Summary parts of one item, and the items themselves, are separated by a blank
        # line, so the joined deltas equal the joined ReasoningDone texts.
        if parts and index != parts[-1][0]:
            delta_text = "\n\n" + delta
        elif not parts and self.reasoning_order and self.reasoning_order[0] != item_id:
            delta_text = "\n\n" + delta
        else:
            delta_text = delta
        if item_id not in self.reasoning_order:
            self.reasoning_order.append(item_id)
        parts.append((index, delta))
        return [ev.ReasoningDelta(delta_text)]

    on_response_reasoning_text_delta = on_response_reasoning_summary_text_delta

    # -- function calls --------------------------------------------------------------
    def _call(self, payload: dict[str, Any], item_id: str) -> dict[str, Any] | None:
        index = payload.get("output_index")
        if isinstance(index, int) and index in self.calls_by_index:
            return self.calls_by_index[index]
        return self.calls_by_item.get(item_id) if item_id else None

    def _add_call(self, payload: dict[str, Any], item_id: str, **fields: Any) -> dict[str, Any]:
        call = {"call_id": None, "name": "", "arguments": [], "named": False, "done": False}
        call.update(fields)
        index = payload.get("output_index")
        if isinstance(index, int):
            self.calls_by_index[index] = call
        if item_id:
            self.calls_by_item[item_id] = call
        return call

    def on_response_output_item_added(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        item = payload.get("item") or {}
        kind = item.get("type")
        if kind == "function_call":
            self._add_call(
                payload,
                item.get("id") or "",
                call_id=item.get("call_id"),
                name=item.get("name") or "",
            )
        elif kind == "web_search_call":
            return [ev.WebSearchStatus("in_progress")]
        return []

    def on_response_function_call_arguments_delta(self, payload: dict[str, Any]) -> list:
        item_id = payload.get("item_id") or ""
        call = self._call(payload, item_id) or self._add_call(payload, item_id)
        delta = payload.get("delta") or ""
        call["arguments"].append(delta)
        name = None if call["named"] else (call["name"] or None)
        call["named"] = True
        return [ev.ToolCallDelta(item_id=item_id, name=name, arguments_delta=delta)]

    def on_response_function_call_arguments_done(self, payload: dict[str, Any]) -> list:
        item_id = payload.get("item_id") or ""
        call = self._call(payload, item_id)
        if call is None or call["done"]:
            return []
        arguments = payload.get("arguments")
        if arguments is None:
            arguments = "".join(call["arguments"])
        call["done"] = True
        call_id = call["call_id"]
        return [
            ev.ToolCallDone(
                item_id=item_id,
                call_id=item_id if call_id is None else str(call_id),
                name=payload.get("name") or call["name"],
                arguments=arguments or "{}",
            )
        ]

    def on_response_output_item_done(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        item = payload.get("item") or {}
        kind = item.get("type")
        item_id = item.get("id") or ""
        if kind == "function_call":
            return self._function_call_done(payload, item, item_id)
        if kind == "reasoning":
            return self._reasoning_done(item, item_id)
        if kind == "message":
            self._message_done(item)
            return []
        if kind == "web_search_call":
            return self._web_search_done(item)
        return []

    def _function_call_done(
        self, payload: dict[str, Any], item: dict[str, Any], item_id: str
    ) -> list[ev.StreamEvent]:
        call = self._call(payload, item_id)
        if call is not None and call["done"]:
            return []
        if call is not None:
            call["done"] = True
            if item.get("call_id") is None and call["call_id"] is not None:
                item = {**item, "call_id": call["call_id"]}
        return [
            ev.ToolCallDone(
                item_id=item_id or None,
                call_id=wire.item_call_id(item),
                name=item.get("name") or (call or {}).get("name", ""),
                arguments=item.get("arguments") or "{}",
            )
        ]

    def _reasoning_done(self, item: dict[str, Any], item_id: str) -> list[ev.StreamEvent]:
        self.builder.reasoning_items.append(item)
        text = wire.summary_text(item)
        if not text:
            text = _joined_summary(self.reasoning_text.get(item_id) or [])
        if not text:
            return []
        if item_id not in self.reasoning_order:
            self.reasoning_order.append(item_id)
        if self.reasoning_order[0] != item_id:
            text = "\n\n" + text
        return [
            ev.ReasoningDone(ev.ReasoningPart(type="text", text=text, format=wire.REASONING_FORMAT))
        ]

    def _message_done(self, item: dict[str, Any]) -> None:
        """The citations of a finished message's text parts, placed in the whole text."""
        prior = self.text_length - _message_text_length(item)
        for part in item.get("content") or []:
            if part.get("type") == "output_text":
                text = part.get("text") or ""
                for ann in part.get("annotations") or []:
                    citation = wire.annotation_citation(ann, text)
                    if citation is not None:
                        self.builder.citations.append(wire.shift_citation(citation, max(prior, 0)))
                prior += len(text)

    def _web_search_done(self, item: dict[str, Any]) -> list[ev.StreamEvent]:
        call = wire.web_search_call(item)
        self.builder.server_tool_calls.append(call)
        action = item.get("action") or {}
        if action.get("type") == "open_page":
            return [ev.WebSearchStatus("open_page", url=action.get("url"))]
        sources = [
            {"title": s.get("title"), "url": s.get("url")}
            for s in action.get("sources") or []
            if isinstance(s, dict)
        ]
        return [ev.WebSearchDone(action.get("query"), sources=sources)]

    # -- server-side web search ------------------------------------------------------
    def on_response_web_search_call_searching(self, payload: dict[str, Any]) -> list:
        return [ev.WebSearchStatus("searching")]

    def on_response_web_search_call_completed(self, payload: dict[str, Any]) -> list:
        return [ev.WebSearchStatus("completed")]

    # -- the end ---------------------------------------------------------------------
    def on_response_completed(self, payload: dict[str, Any]) -> list[ev.StreamEvent]:
        response = payload.get("response") or {}
        if response.get("status") == "failed" or payload.get("type") == "response.failed":
            raise self.provider.failed_error(response)
        self.done = True
        self.builder.raw = response
        self.builder.model_id = response.get("model") or self.builder.model_id
        self.builder.response_id = vendor_id(response.get("id")) or self.builder.response_id
        reason, raw = wire.finish_reason(
            response.get("status"),
            (response.get("incomplete_details") or {}).get("reason"),
            bool(self.builder.tool_calls),
        )
        if self.refused and reason == "stop":
            reason, raw = "content_filter", "refusal"
        return [
            ev.TokenUsageDone(token_usage=wire.usage_tokens(response.get("usage"))),
            ev.FinishReasonDone(finish_reason=reason, raw_finish_reason=raw),
        ]

    on_response_incomplete = on_response_completed
    on_response_failed = on_response_completed


def _joined_summary(pieces: list[tuple[int, str]]) -> str:
    """Summary deltas ``(summary_index, text)`` joined, parts separated by a blank line."""
    out: list[str] = []
    last = None
    for index, text in pieces:
        if last is not None and index != last:
            out.append("\n\n")
        out.append(text)
        last = index
    return "".join(out)


def _message_text_length(item: dict[str, Any]) -> int:
    return sum(
        len(p.get("text") or "")
        for p in item.get("content") or []
        if p.get("type") == "output_text"
    )
