"""OpenAI's Responses API (``POST /v1/responses``), and xAI, which speaks the same protocol.

Speaks the wire format only; HTTP, retries and error translation live in
:mod:`django_llmchat.providers.base`.

Requests are stateless (``store: false``): the whole transcript is sent each time, and
reasoning models get their earlier reasoning back as the encrypted reasoning items they
returned (``include: ["reasoning.encrypted_content"]``), which the response keeps in
``ProviderResponse.reasoning_items``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any, ClassVar

from ..errors import AuthenticationError, ProviderError, UnsupportedFeatureError
from ..events import (
    FinishReasonDone,
    ReasoningDelta,
    ReasoningDone,
    ReasoningPart,
    StreamEvent,
    TextDelta,
    TokenUsageDone,
    ToolCallDelta,
    ToolCallDone,
    WebSearchDone,
    WebSearchStatus,
)
from ..values import Citation, ServerToolCall, Thinking, Tokens
from ._json import loads
from .base import Provider, StreamParser, merge_vendor_options, parse_arguments
from .types import (
    AttachmentData,
    Capabilities,
    ProviderMessage,
    ProviderRequest,
    ProviderResponse,
    ToolCallData,
)

__all__ = [
    "FINISH_REASONS",
    "OpenAIResponsesProvider",
    "ResponsesStreamParser",
    "XAIProvider",
]

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

# ``params["thinking"] = {"budget_tokens": N}`` expressed as an effort: the last entry
# whose floor N reaches picks the effort.
BUDGET_EFFORTS: tuple[tuple[int, str], ...] = ((1, "low"), (4096, "medium"), (16384, "high"))

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _data_url(att: AttachmentData) -> str:
    return f"data:{att.mime_type};base64,{base64.b64encode(att.data).decode('ascii')}"


def _is_text(mime_type: str) -> bool:
    return mime_type.startswith("text/") or mime_type in ("application/json", "application/xml")


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


def web_search_call(item: dict[str, Any]) -> ServerToolCall:
    action = item.get("action") or {}
    return ServerToolCall(
        name="web_search",
        id=item.get("id"),
        arguments={k: v for k, v in action.items() if k != "sources"},
        result=action.get("sources"),
        status=item.get("status"),
    )


class OpenAIResponsesProvider(Provider):
    """OpenAI through the Responses API."""

    name: ClassVar[str] = "openai"
    label: ClassVar[str] = "OpenAI"
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    api_key_env: ClassVar[str | None] = "OPENAI_API_KEY"
    capabilities: ClassVar[Capabilities] = Capabilities(
        vision=True,
        pdf=True,
        thinking=True,
        structured_output=True,
        prompt_caching="automatic",
        citations=True,
        server_tools=True,
    )

    # Vendor differences, switched off by subclasses speaking the same protocol.
    system_as_instructions: ClassVar[bool] = True
    """Send system messages as ``instructions`` (else as ``system`` input items)."""
    replay_item_ids: ClassVar[bool] = True
    """Send the provider's own item ids back (function calls, reasoning items)."""
    reasoning_summary: ClassVar[str | None] = "auto"
    """``reasoning.summary`` asked for when thinking is requested (``None``: not sent)."""
    file_inputs: ClassVar[bool] = True
    """Documents may be sent inline as ``input_file`` parts."""

    # -- request ---------------------------------------------------------------------
    def option(self, key: str) -> Any:
        """A provider option: ``LLMCHAT["PROVIDERS"][name]["options"][key]`` (or a key
        given beside the standard settings)."""
        nested = self.options.get("options")
        if isinstance(nested, dict) and nested.get(key) is not None:
            return nested[key]
        return self.options.get(key)

    def auth_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if self.option("organization"):
            headers["OpenAI-Organization"] = str(self.option("organization"))
        if self.option("project"):
            headers["OpenAI-Project"] = str(self.option("project"))
        return headers

    def endpoint(self, request: ProviderRequest, *, stream: bool) -> str:
        return "/responses"

    def build_payload(self, request: ProviderRequest, *, stream: bool) -> dict[str, Any]:
        params = request.params or {}
        vendor = params.get(self.name) or {}
        store = bool(vendor.get("store", False))
        instructions, items = self.input_items(request.messages, store=store)
        payload: dict[str, Any] = {"model": request.model_id}
        if instructions:
            payload["instructions"] = instructions
        payload["input"] = items
        payload["stream"] = stream
        payload["store"] = False
        payload["include"] = ["reasoning.encrypted_content"]
        if request.tools:
            payload["tools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                }
                for tool in request.tools
            ]
        if params.get("temperature") is not None:
            payload["temperature"] = params["temperature"]
        if params.get("top_p") is not None:
            payload["top_p"] = params["top_p"]
        if params.get("max_tokens") is not None:
            payload["max_output_tokens"] = params["max_tokens"]
        reasoning = self.reasoning_config(params)
        if reasoning:
            payload["reasoning"] = reasoning
        if request.schema is not None:
            payload["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": request.schema_name or "response",
                    "schema": request.schema,
                    "strict": True,
                }
            }
        if vendor:
            payload = merge_vendor_options(payload, vendor)
        return payload

    def reasoning_config(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params["thinking"]`` / ``params["reasoning"]`` -> the ``reasoning`` object.

        Accepts ``{"effort": "low"}``, ``{"budget_tokens": N}``, an effort string or
        ``True``; a ``summary`` key (``None`` to leave it out) overrides the default."""
        spec = params.get("reasoning", params.get("thinking"))
        if spec is None or spec is False:
            return {}
        if spec is True:
            spec = {}
        elif isinstance(spec, str):
            spec = {"effort": spec}
        elif not isinstance(spec, dict):
            return {}
        out: dict[str, Any] = {}
        effort = spec.get("effort")
        if effort is None and spec.get("budget_tokens") is not None:
            budget = int(spec["budget_tokens"])
            if budget <= 0:  # no thinking asked for
                return {}
            for floor, name in BUDGET_EFFORTS:
                if budget >= floor:
                    effort = name
        if effort is None and not spec:
            effort = "medium"
        if effort is not None:
            out["effort"] = effort
        summary = spec.get("summary", self.reasoning_summary)
        if summary:
            out["summary"] = summary
        return out

    def input_items(
        self, messages: list[ProviderMessage], *, store: bool = False
    ) -> tuple[str | None, list[dict[str, Any]]]:
        """``(instructions, input items)`` for a transcript."""
        system: list[str] = []
        items: list[dict[str, Any]] = []
        for msg in messages:
            if msg.role == "system":
                if self.system_as_instructions:
                    if msg.content:
                        system.append(msg.content)
                else:
                    items.append({"role": "system", "content": msg.content})
            elif msg.role == "user":
                items.append({"role": "user", "content": self.user_content(msg)})
            elif msg.role == "assistant":
                items.extend(self.assistant_items(msg, store=store))
            elif msg.role == "tool":
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": msg.tool_call_id or "",
                        "output": msg.content,
                    }
                )
        return ("\n\n".join(system) or None), items

    def user_content(self, msg: ProviderMessage) -> str | list[dict[str, Any]]:
        if not msg.attachments:
            return msg.content
        parts: list[dict[str, Any]] = []
        if msg.content:
            parts.append({"type": "input_text", "text": msg.content})
        for att in msg.attachments:
            parts.append(self.attachment_part(att))
        return parts

    def attachment_part(self, att: AttachmentData) -> dict[str, Any]:
        if att.mime_type in IMAGE_TYPES:
            return {"type": "input_image", "image_url": _data_url(att), "detail": "auto"}
        if _is_text(att.mime_type):
            text = att.data.decode("utf-8", errors="replace")
            header = f"{att.filename}:\n" if att.filename else ""
            return {"type": "input_text", "text": header + text}
        if not self.file_inputs:
            raise UnsupportedFeatureError(self.name, f"{att.mime_type} attachments")
        return {
            "type": "input_file",
            "filename": att.filename or "file",
            "file_data": _data_url(att),
        }

    def assistant_items(self, msg: ProviderMessage, *, store: bool) -> list[dict[str, Any]]:
        native = msg.provider == self.name
        items: list[dict[str, Any]] = []
        if native:
            for item in msg.reasoning_items:
                replayed = self.replay_reasoning_item(item, store=store)
                if replayed is not None:
                    items.append(replayed)
        if msg.content:
            items.append(
                {"role": "assistant", "content": [{"type": "output_text", "text": msg.content}]}
            )
        for call in msg.tool_calls:
            item: dict[str, Any] = {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":")),
            }
            if native and self.replay_item_ids and call.item_id:
                item["id"] = call.item_id
            items.append(item)
        return items

    def replay_reasoning_item(self, item: dict[str, Any], *, store: bool) -> dict[str, Any] | None:
        """A reasoning item as sent back; ``None`` when it cannot be replayed statelessly."""
        if not isinstance(item, dict) or item.get("type", "reasoning") != "reasoning":
            return None
        if not store and not item.get("encrypted_content"):
            return None
        if self.replay_item_ids:
            return dict(item)
        return {k: v for k, v in item.items() if k not in ("id", "status")}

    # -- answer ----------------------------------------------------------------------
    def parse_response(self, data: dict[str, Any]) -> ProviderResponse:
        status = data.get("status")
        if status == "failed":
            raise self.failed_error(data)
        text_parts: list[str] = []
        tool_calls: list[ToolCallData] = []
        reasoning: list[str] = []
        reasoning_items: list[dict[str, Any]] = []
        citations: list[Citation] = []
        server_calls: list[ServerToolCall] = []
        refused = False
        for item in data.get("output") or []:
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or []:
                    ptype = part.get("type")
                    if ptype == "output_text":
                        text = part.get("text") or ""
                        offset = sum(len(t) for t in text_parts)
                        for ann in part.get("annotations") or []:
                            citation = annotation_citation(ann, text)
                            if citation is not None:
                                citations.append(_shift(citation, offset))
                        text_parts.append(text)
                    elif ptype == "refusal":
                        refused = True
                        text_parts.append(part.get("refusal") or "")
            elif kind == "function_call":
                tool_calls.append(
                    ToolCallData(
                        call_id=item.get("call_id") or item.get("id") or "",
                        name=item.get("name") or "",
                        arguments=parse_arguments(item.get("arguments")),
                        item_id=item.get("id"),
                    )
                )
            elif kind == "reasoning":
                reasoning_items.append(item)
                text = summary_text(item)
                if text:
                    reasoning.append(text)
            elif kind == "web_search_call":
                server_calls.append(web_search_call(item))
        reason, raw = finish_reason(
            status, (data.get("incomplete_details") or {}).get("reason"), bool(tool_calls)
        )
        if refused and reason == "stop":
            reason, raw = "content_filter", "refusal"
        return ProviderResponse(
            content="".join(text_parts),
            tool_calls=tool_calls,
            thinking=Thinking("\n\n".join(reasoning)) if reasoning else None,
            reasoning_items=reasoning_items,
            citations=citations,
            server_tool_calls=server_calls,
            finish_reason=reason,
            raw_finish_reason=raw,
            tokens=usage_tokens(data.get("usage")),
            model_id=data.get("model"),
            raw=data,
        )

    def new_stream_parser(self, request: ProviderRequest) -> StreamParser:
        return ResponsesStreamParser(self, request)

    # -- errors ----------------------------------------------------------------------
    def error_details(self, payload: Any) -> tuple[str, str | None]:
        """Errors come as ``{"error": {"message", "type", "code"}}`` over HTTP, and as
        ``{"type": "error", "code", "message"}`` (or nested) in a stream."""
        if isinstance(payload, dict):
            err = payload.get("error")
            if not isinstance(err, dict):
                err = payload if err is None else {"message": err, "code": payload.get("code")}
            code = err.get("code")
            if code is None and err.get("type") not in (None, "error"):
                code = err.get("type")
            message = err.get("message") or payload.get("message") or ""
            return str(message), (str(code) if code is not None else None)
        return super().error_details(payload)

    def failed_error(self, response: dict[str, Any]) -> ProviderError:
        """The exception for a response whose status is ``failed``."""
        error = response.get("error") or {"message": "response failed", "code": "failed"}
        return self.error_from_payload({"error": error})


def _shift(citation: Citation, offset: int) -> Citation:
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


class ResponsesStreamParser(StreamParser):
    """Reads a streamed Responses answer (``event:`` + ``data:`` SSE, no ``[DONE]``)."""

    provider: OpenAIResponsesProvider

    def __init__(self, provider: Provider, request: ProviderRequest):
        super().__init__(provider, request)
        self.calls: dict[str, dict[str, Any]] = {}
        self.reasoning_text: dict[str, list[tuple[int, str]]] = {}
        self.reasoning_order: list[str] = []
        self.text_length = 0
        self.refused = False

    def feed(self, event: str | None, data: str) -> Iterable[StreamEvent]:
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
    def on_response_created(self, payload: dict[str, Any]) -> list[StreamEvent]:
        self.builder.model_id = (payload.get("response") or {}).get("model")
        return []

    def on_response_output_text_delta(self, payload: dict[str, Any]) -> list[StreamEvent]:
        delta = payload.get("delta") or ""
        if not delta:
            return []
        self.text_length += len(delta)
        return [TextDelta(delta)]

    def on_response_refusal_delta(self, payload: dict[str, Any]) -> list[StreamEvent]:
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
        return [ReasoningDelta(delta_text)]

    on_response_reasoning_text_delta = on_response_reasoning_summary_text_delta

    # -- function calls --------------------------------------------------------------
    def on_response_output_item_added(self, payload: dict[str, Any]) -> list[StreamEvent]:
        item = payload.get("item") or {}
        kind = item.get("type")
        if kind == "function_call":
            self.calls[item.get("id") or item.get("call_id") or ""] = {
                "call_id": item.get("call_id"),
                "name": item.get("name") or "",
                "arguments": [],
                "named": False,
                "done": False,
            }
        elif kind == "web_search_call":
            return [WebSearchStatus("in_progress")]
        return []

    def on_response_function_call_arguments_delta(self, payload: dict[str, Any]) -> list:
        item_id = payload.get("item_id") or ""
        call = self.calls.setdefault(
            item_id, {"call_id": None, "name": "", "arguments": [], "named": False, "done": False}
        )
        delta = payload.get("delta") or ""
        call["arguments"].append(delta)
        name = None if call["named"] else (call["name"] or None)
        call["named"] = True
        return [ToolCallDelta(item_id=item_id, name=name, arguments_delta=delta)]

    def on_response_function_call_arguments_done(self, payload: dict[str, Any]) -> list:
        item_id = payload.get("item_id") or ""
        call = self.calls.get(item_id)
        if call is None or call["done"]:
            return []
        arguments = payload.get("arguments")
        if arguments is None:
            arguments = "".join(call["arguments"])
        call["done"] = True
        return [
            ToolCallDone(
                item_id=item_id,
                call_id=call["call_id"] or item_id,
                name=payload.get("name") or call["name"],
                arguments=arguments or "{}",
            )
        ]

    def on_response_output_item_done(self, payload: dict[str, Any]) -> list[StreamEvent]:
        item = payload.get("item") or {}
        kind = item.get("type")
        item_id = item.get("id") or ""
        if kind == "function_call":
            call = self.calls.get(item_id or item.get("call_id") or "")
            if call is not None and call["done"]:
                return []
            if call is not None:
                call["done"] = True
            return [
                ToolCallDone(
                    item_id=item_id or None,
                    call_id=item.get("call_id") or item_id,
                    name=item.get("name") or (call or {}).get("name", ""),
                    arguments=item.get("arguments") or "{}",
                )
            ]
        if kind == "reasoning":
            self.builder.reasoning_items.append(item)
            text = summary_text(item)
            if not text:
                text = _joined_summary(self.reasoning_text.get(item_id) or [])
            if not text:
                return []
            if item_id not in self.reasoning_order:
                self.reasoning_order.append(item_id)
            if self.reasoning_order[0] != item_id:
                text = "\n\n" + text
            return [ReasoningDone(ReasoningPart(type="text", text=text, format=REASONING_FORMAT))]
        if kind == "message":
            prior = self.text_length - _message_text_length(item)
            for part in item.get("content") or []:
                if part.get("type") == "output_text":
                    text = part.get("text") or ""
                    for ann in part.get("annotations") or []:
                        citation = annotation_citation(ann, text)
                        if citation is not None:
                            self.builder.citations.append(_shift(citation, max(prior, 0)))
                    prior += len(text)
            return []
        if kind == "web_search_call":
            call = web_search_call(item)
            self.builder.server_tool_calls.append(call)
            action = item.get("action") or {}
            if action.get("type") == "open_page":
                return [WebSearchStatus("open_page", url=action.get("url"))]
            sources = [
                {"title": s.get("title"), "url": s.get("url")}
                for s in action.get("sources") or []
                if isinstance(s, dict)
            ]
            return [WebSearchDone(action.get("query"), sources=sources)]
        return []

    # -- server-side web search ------------------------------------------------------
    def on_response_web_search_call_searching(self, payload: dict[str, Any]) -> list:
        return [WebSearchStatus("searching")]

    def on_response_web_search_call_completed(self, payload: dict[str, Any]) -> list:
        return [WebSearchStatus("completed")]

    # -- the end ---------------------------------------------------------------------
    def on_response_completed(self, payload: dict[str, Any]) -> list[StreamEvent]:
        response = payload.get("response") or {}
        if response.get("status") == "failed" or payload.get("type") == "response.failed":
            raise self.provider.failed_error(response)
        self.done = True
        self.builder.raw = response
        self.builder.model_id = response.get("model") or self.builder.model_id
        reason, raw = finish_reason(
            response.get("status"),
            (response.get("incomplete_details") or {}).get("reason"),
            bool(self.builder.tool_calls),
        )
        if self.refused and reason == "stop":
            reason, raw = "content_filter", "refusal"
        return [
            TokenUsageDone(token_usage=usage_tokens(response.get("usage"))),
            FinishReasonDone(finish_reason=reason, raw_finish_reason=raw),
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


class XAIProvider(OpenAIResponsesProvider):
    """xAI (Grok) through its Responses API.

    Differences from OpenAI: system messages travel as ``system`` input items, item ids are
    not sent back (reasoning items are replayed as ``type``/``summary``/
    ``encrypted_content``), no reasoning summary is requested (Grok returns one on its
    own), and documents cannot be sent inline.
    """

    name: ClassVar[str] = "xai"
    label: ClassVar[str] = "xAI"
    default_base_url: ClassVar[str] = "https://api.x.ai/v1"
    api_key_env: ClassVar[str | None] = "XAI_API_KEY"
    capabilities: ClassVar[Capabilities] = Capabilities(
        vision=True,
        pdf=False,
        thinking=True,
        structured_output=True,
        prompt_caching="automatic",
        citations=True,
        server_tools=True,
    )

    system_as_instructions: ClassVar[bool] = False
    replay_item_ids: ClassVar[bool] = False
    reasoning_summary: ClassVar[str | None] = None
    file_inputs: ClassVar[bool] = False

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def error_details(self, payload: Any) -> tuple[str, str | None]:
        # xAI answers ``{"code": "invalid-argument", "error": "<message>"}``.
        if isinstance(payload, dict) and isinstance(payload.get("error"), str):
            code = payload.get("code")
            return payload["error"], (str(code) if code is not None else None)
        return super().error_details(payload)

    def error_from_payload(self, payload: Any, **kw: Any) -> ProviderError:
        error = super().error_from_payload(payload, **kw)
        # A wrong key is a 400 ``invalid-argument`` with "Incorrect API key" in the text.
        if not isinstance(error, AuthenticationError) and "api key" in error.message.lower():
            return AuthenticationError(
                error.message,
                provider=error.provider,
                status=error.status,
                body=error.body,
                headers=error.headers,
                retry_after=error.retry_after,
                code=error.code,
            )
        return error
