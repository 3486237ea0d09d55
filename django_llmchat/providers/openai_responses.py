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
from dataclasses import replace
from typing import Any, ClassVar

from ..errors import AuthenticationError, ProviderError, UnsupportedFeatureError
from ..values import Citation, ServerToolCall, Thinking
from . import openai_responses_wire as wire
from .base import (
    Provider,
    as_authentication_error,
    copy_params,
    merge_vendor_options,
    parse_arguments,
)
from .openai_responses_stream import ResponsesStreamParser
from .openai_responses_wire import FINISH_REASONS
from .types import (
    EVERY_FEATURE,
    AttachmentData,
    ProviderMessage,
    ProviderRequest,
    ProviderResponse,
    ToolCallData,
    vendor_id,
)

__all__ = [
    "FINISH_REASONS",
    "OpenAIResponsesProvider",
    "XAIProvider",
]


# ``params["thinking"] = {"budget_tokens": N}`` expressed as an effort: the last entry
# whose floor N reaches picks the effort.
BUDGET_EFFORTS: tuple[tuple[int, str], ...] = ((1, "low"), (4096, "medium"), (16384, "high"))

# ``params`` -> body fields, copied when set.
GENERATION_PARAMS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_output_tokens",
}

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _data_url(att: AttachmentData) -> str:
    return f"data:{att.mime_type};base64,{base64.b64encode(att.data).decode('ascii')}"


def _is_text(mime_type: str) -> bool:
    return mime_type.startswith("text/") or mime_type in ("application/json", "application/xml")


class OpenAIResponsesProvider(Provider):
    """OpenAI through the Responses API."""

    name = "openai"
    label = "OpenAI"
    default_base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"
    capabilities = EVERY_FEATURE
    stream_parser_class = ResponsesStreamParser

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
        payload.update(copy_params(params, GENERATION_PARAMS))
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
    def parse_response(self, data: dict[str, Any], request: ProviderRequest) -> ProviderResponse:
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
                            citation = wire.annotation_citation(ann, text)
                            if citation is not None:
                                citations.append(wire.shift_citation(citation, offset))
                        text_parts.append(text)
                    elif ptype == "refusal":
                        refused = True
                        text_parts.append(part.get("refusal") or "")
            elif kind == "function_call":
                tool_calls.append(
                    ToolCallData(
                        call_id=wire.item_call_id(item),
                        name=item.get("name") or "",
                        arguments=parse_arguments(item.get("arguments")),
                        item_id=item.get("id"),
                    )
                )
            elif kind == "reasoning":
                reasoning_items.append(item)
                text = wire.summary_text(item)
                if text:
                    reasoning.append(text)
            elif kind == "web_search_call":
                server_calls.append(wire.web_search_call(item))
        reason, raw = wire.finish_reason(
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
            tokens=wire.usage_tokens(data.get("usage")),
            model_id=data.get("model"),
            response_id=vendor_id(data.get("id")),
            raw=data,
        )

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


class XAIProvider(OpenAIResponsesProvider):
    """xAI (Grok) through its Responses API.

    Differences from OpenAI: system messages travel as ``system`` input items, item ids are
    not sent back (reasoning items are replayed as ``type``/``summary``/
    ``encrypted_content``), no reasoning summary is requested (Grok returns one on its
    own), and documents cannot be sent inline.
    """

    name = "xai"
    label = "xAI"
    default_base_url = "https://api.x.ai/v1"
    api_key_env = "XAI_API_KEY"
    capabilities = replace(OpenAIResponsesProvider.capabilities, pdf=False)

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
            return as_authentication_error(error)
        return error
