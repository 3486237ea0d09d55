"""Anthropic's Messages API (``POST /v1/messages``).

Speaks the wire format only; HTTP, retries and error translation live in
:mod:`django_llmchat.providers.base`.

Structured output uses a forced tool: the schema becomes a tool named after
``ProviderRequest.schema_name`` and ``tool_choice`` makes the model call it; the call's
input is read back as the reply's JSON content (and streamed as ``TextDelta`` events), so
it never shows up as a tool call.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ..errors import UnsupportedFeatureError
from ..values import Citation, ServerToolCall, Thinking
from . import anthropic_wire as wire
from .anthropic_stream import AnthropicStreamParser
from .anthropic_wire import FINISH_REASONS
from .base import Provider, copy_params, merge_vendor_options
from .types import (
    EVERY_FEATURE,
    AttachmentData,
    ProviderMessage,
    ProviderRequest,
    ProviderResponse,
    ToolCallData,
    vendor_id,
)

__all__ = ["AnthropicProvider", "FINISH_REASONS"]

API_VERSION = "2023-06-01"


# Anthropic requires ``max_tokens``; older models accept less than the general default.
DEFAULT_MAX_TOKENS = 8192
MODEL_MAX_TOKENS: dict[str, int] = {
    "claude-3-haiku": 4096,
    "claude-3-opus": 4096,
    "claude-3-sonnet": 4096,
}

# ``params["thinking"] = {"effort": ...}`` expressed as a thinking budget.
EFFORT_BUDGETS: dict[str, int] = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}

# ``params`` -> body fields, copied when set (``max_tokens`` is always sent, see above).
GENERATION_PARAMS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
MAX_CACHE_BREAKPOINTS = 4


class AnthropicProvider(Provider):
    """Claude models over the Messages API."""

    name = "anthropic"
    label = "Anthropic"
    default_base_url = "https://api.anthropic.com"
    api_key_env = "ANTHROPIC_API_KEY"
    capabilities = replace(EVERY_FEATURE, prompt_caching="explicit")
    stream_parser_class = AnthropicStreamParser

    # -- connection ----------------------------------------------------------------------
    def auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self.options.get("version") or API_VERSION}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        beta = self.options.get("beta")
        if beta:
            headers["anthropic-beta"] = beta if isinstance(beta, str) else ",".join(beta)
        return headers

    def endpoint(self, request: ProviderRequest, *, stream: bool) -> str:
        return "/v1/messages"

    def is_context_length_error(self, status: int | None, message: str, code: str | None) -> bool:
        if "exceed context limit" in message.lower():
            return True
        return super().is_context_length_error(status, message, code)

    # -- request -------------------------------------------------------------------------
    def schema_tool_name(self, request: ProviderRequest) -> str | None:
        """Name of the forced tool carrying structured output, or ``None``."""
        return (request.schema_name or "response") if request.schema else None

    def max_tokens(self, request: ProviderRequest) -> int:
        value = request.params.get("max_tokens") or self.options.get("max_tokens")
        if value:
            return int(value)
        for prefix, limit in MODEL_MAX_TOKENS.items():
            if request.model_id.startswith(prefix):
                return limit
        return DEFAULT_MAX_TOKENS

    def thinking_config(self, value: Any) -> dict[str, Any] | None:
        """``params["thinking"]`` as Anthropic's ``thinking`` object."""
        if not value:
            return None
        if value is True:
            return {"type": "enabled", "budget_tokens": EFFORT_BUDGETS["low"]}
        if isinstance(value, int):
            return {"type": "enabled", "budget_tokens": value}
        if isinstance(value, dict):
            if "type" in value:
                return dict(value)
            if value.get("budget_tokens"):
                return {"type": "enabled", "budget_tokens": int(value["budget_tokens"])}
            if value.get("effort") in EFFORT_BUDGETS:
                return {"type": "enabled", "budget_tokens": EFFORT_BUDGETS[value["effort"]]}
        raise UnsupportedFeatureError(self.name, f"thinking setting {value!r}")

    def build_payload(self, request: ProviderRequest, *, stream: bool) -> dict[str, Any]:
        params = request.params
        system, messages = self.convert_messages(request.messages)
        body: dict[str, Any] = {"model": request.model_id, "messages": messages}
        if system:
            body["system"] = system
        body["stream"] = stream
        body["max_tokens"] = self.max_tokens(request)

        thinking = self.thinking_config(params.get("thinking"))
        thinking_on = bool(thinking) and thinking.get("type") != "disabled"
        if thinking:
            body["thinking"] = thinking
            budget = thinking.get("budget_tokens") or 0
            explicit = params.get("max_tokens") or self.options.get("max_tokens")
            if budget >= body["max_tokens"] and not explicit:
                body["max_tokens"] = budget + DEFAULT_MAX_TOKENS
        body.update(copy_params(params, GENERATION_PARAMS))
        stop = params.get("stop_sequences", params.get("stop"))
        if stop:
            body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)

        vendor = dict(params.get(self.name) or {})
        # server tools ({"type": "web_search_20250305", ...}) join the function tools
        tools = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ] + list(vendor.pop("tools", None) or [])
        schema_tool = self.schema_tool_name(request)
        tool_choice: dict[str, Any] | None = None
        if schema_tool:
            schema = request.schema or {}
            if schema.get("type", "object") != "object":
                raise UnsupportedFeatureError(
                    self.name, "structured output whose schema is not a JSON object"
                )
            tools.append(
                {
                    "name": schema_tool,
                    "description": "Give the final answer by calling this tool; its input "
                    "is the answer, as a JSON object matching the schema.",
                    "input_schema": schema,
                }
            )
            if thinking_on:  # Anthropic refuses forced tool use together with thinking
                tool_choice = {"type": "auto"}
            elif request.tools:  # the model may still call the other tools first
                tool_choice = {"type": "any"}
            else:
                tool_choice = {"type": "tool", "name": schema_tool}
        if params.get("parallel_tool_calls") is False and tools:
            tool_choice = {**(tool_choice or {"type": "auto"}), "disable_parallel_tool_use": True}
        if tools:
            body["tools"] = tools
        if tool_choice:
            body["tool_choice"] = tool_choice

        return merge_vendor_options(body, vendor)

    def convert_messages(
        self, messages: Iterable[ProviderMessage]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``(system blocks, messages)``: system text hoisted, same-role turns merged,
        ``cache_control`` on the last block of each ``cache_boundary`` message."""
        system: list[dict[str, Any]] = []
        out: list[dict[str, Any]] = []
        breakpoints: list[dict[str, Any]] = []
        for msg in messages:
            if msg.role == "system":
                blocks = [{"type": "text", "text": msg.content}] if msg.content else []
                system.extend(blocks)
            else:
                role, blocks = self.convert_message(msg)
                if not blocks:
                    continue
                if out and out[-1]["role"] == role:
                    out[-1]["content"].extend(blocks)
                else:
                    out.append({"role": role, "content": blocks})
            cacheable = [b for b in blocks if "thinking" not in b["type"]]
            if msg.cache_boundary and cacheable:
                breakpoints.append(cacheable[-1])
        for m in out:
            if m["role"] == "user":  # tool results must open a user turn
                m["content"].sort(key=lambda b: b["type"] != "tool_result")
        control: dict[str, Any] = {"type": "ephemeral"}
        if self.options.get("cache_ttl"):
            control["ttl"] = self.options["cache_ttl"]
        for block in breakpoints[-MAX_CACHE_BREAKPOINTS:]:
            block["cache_control"] = dict(control)
        return system, out

    def convert_message(self, msg: ProviderMessage) -> tuple[str, list[dict[str, Any]]]:
        """One transcript entry as ``(role, content blocks)``."""
        if msg.role == "tool":
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": msg.tool_call_id}
            content = [{"type": "text", "text": msg.content}] if msg.content else []
            content += [self.attachment_block(a) for a in msg.attachments]
            if content:
                result["content"] = content
            if msg.is_error:
                result["is_error"] = True
            return "user", [result]
        if msg.role == "assistant":
            blocks: list[dict[str, Any]] = []
            native = msg.provider == self.name
            if native and msg.thinking and msg.thinking.signature:
                blocks.append(
                    {
                        "type": "thinking",
                        "thinking": msg.thinking.text,
                        "signature": msg.thinking.signature,
                    }
                )
            redacted = [i for i in msg.reasoning_items if i.get("type") == "redacted_thinking"]
            blocks += [dict(item) for item in redacted]
            if msg.content:
                blocks.append({"type": "text", "text": msg.content})
            blocks += [
                {"type": "tool_use", "id": c.call_id, "name": c.name, "input": c.arguments}
                for c in msg.tool_calls
            ]
            return "assistant", blocks
        if msg.role == "user":
            blocks = [self.attachment_block(a) for a in msg.attachments]
            if msg.content:
                blocks.append({"type": "text", "text": msg.content})
            return "user", blocks
        raise UnsupportedFeatureError(self.name, f"messages with role {msg.role!r}")

    def attachment_block(self, attachment: AttachmentData) -> dict[str, Any]:
        mime = attachment.mime_type
        if mime in IMAGE_TYPES:
            data = base64.b64encode(attachment.data).decode("ascii")
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": mime, "data": data},
            }
        if mime == "application/pdf":
            data = base64.b64encode(attachment.data).decode("ascii")
            source = {"type": "base64", "media_type": mime, "data": data}
        elif mime == "text/plain":
            text = attachment.data.decode("utf-8", errors="replace")
            source = {"type": "text", "media_type": mime, "data": text}
        else:
            raise UnsupportedFeatureError(self.name, f"attachments of type {mime}")
        block: dict[str, Any] = {"type": "document", "source": source}
        if attachment.filename:
            block["title"] = attachment.filename
        if self.options.get("citations"):
            block["citations"] = {"enabled": True}
        return block

    # -- answers -------------------------------------------------------------------------
    def parse_response(self, data: dict[str, Any], request: ProviderRequest) -> ProviderResponse:
        schema_tool = self.schema_tool_name(request)
        text: list[str] = []
        offset = 0
        thinking_parts: list[str] = []
        signature: str | None = None
        reasoning_items: list[dict[str, Any]] = []
        tool_calls: list[ToolCallData] = []
        citations: list[Citation] = []
        server_calls: dict[str, dict[str, Any]] = {}
        structured = False
        for block in data.get("content") or []:
            kind = block.get("type")
            if kind == "text":
                piece = block.get("text") or ""
                text.append(piece)
                for raw in block.get("citations") or []:
                    citations.append(wire.to_citation(raw, offset, offset + len(piece)))
                offset += len(piece)
            elif kind == "thinking":
                thinking_parts.append(block.get("thinking") or "")
                signature = block.get("signature") or signature
            elif kind == "redacted_thinking":
                reasoning_items.append(block)
            elif kind == "tool_use":
                if schema_tool and block.get("name") == schema_tool:
                    piece = json.dumps(block.get("input") or {}, ensure_ascii=False)
                    text.append(piece)
                    offset += len(piece)
                    structured = True
                    continue
                tool_calls.append(
                    ToolCallData(
                        call_id=str(block.get("id") or ""),  # kept as sent, even repeated
                        name=block.get("name") or "",
                        arguments=block.get("input") or {},
                    )
                )
            elif kind in wire.SERVER_TOOL_USES:
                server_calls[block["id"]] = {
                    "name": block.get("name") or "",
                    "id": block["id"],
                    "arguments": block.get("input") or {},
                }
            elif wire.is_server_result(block):
                wire.add_server_result(server_calls, block)
        raw_reason = data.get("stop_reason")
        reason = wire.finish_reason(raw_reason, tool_calls=bool(tool_calls), structured=structured)
        thinking = None
        if thinking_parts or signature:
            thinking = Thinking("".join(thinking_parts), signature)
        return ProviderResponse(
            content="".join(text),
            tool_calls=tool_calls,
            thinking=thinking,
            reasoning_items=reasoning_items,
            citations=citations,
            server_tool_calls=[ServerToolCall(**c) for c in server_calls.values()],
            finish_reason=reason,
            raw_finish_reason=raw_reason,
            tokens=wire.usage_tokens(data.get("usage")),
            model_id=data.get("model"),
            response_id=vendor_id(data.get("id")),
            raw=data,
        )
