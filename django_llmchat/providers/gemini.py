"""Google's Gemini API (``generateContent`` / ``streamGenerateContent?alt=sse``).

Speaks the wire format only; HTTP, retries and error translation live in
:mod:`django_llmchat.providers.base`.

Each streamed chunk is a whole ``GenerateContentResponse``; the stream has no terminator
and is complete once a chunk with a ``finishReason`` has arrived. ``usageMetadata`` is a
snapshot on every chunk, so the last one wins. Function calls carry a
``thoughtSignature`` that must go back unchanged with the call on the next turn; it is
kept on :class:`~django_llmchat.providers.types.ToolCallData`.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from ..errors import AuthenticationError, ProviderError
from ..values import Thinking
from . import gemini_wire as wire
from .base import Provider, as_authentication_error, copy_params, merge_vendor_options
from .gemini_stream import GeminiStreamParser
from .gemini_wire import FINISH_REASONS
from .types import (
    EVERY_FEATURE,
    AttachmentData,
    ProviderMessage,
    ProviderRequest,
    ProviderResponse,
    ToolCallData,
    ToolSpec,
    vendor_id,
)

__all__ = ["FINISH_REASONS", "GeminiProvider", "gemini_schema"]

# ``params`` -> ``generationConfig`` fields, copied when set.
GENERATION_PARAMS = {"temperature": "temperature", "top_p": "topP", "max_tokens": "maxOutputTokens"}


# ``params["thinking"] = {"effort": ...}`` as a thinking budget (Gemini 2.x); Gemini 3
# models get the effort as ``thinkingLevel``.
EFFORT_BUDGETS: dict[str, int] = {"minimal": 512, "low": 1024, "medium": 8192, "high": 24576}

# Reasons (``google.rpc.ErrorInfo``) and statuses that mean the key is wrong.
AUTH_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED"})
AUTH_STATUSES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})

# JSON Schema keys Gemini's ``Schema`` object understands; the rest are dropped.
SCHEMA_KEYS = frozenset(
    {
        "description",
        "enum",
        "format",
        "nullable",
        "required",
        "title",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "minProperties",
        "maxProperties",
        "propertyOrdering",
        "default",
        "example",
    }
)


def gemini_schema(schema: dict[str, Any], root: dict[str, Any] | None = None, depth: int = 0):
    """A JSON Schema as Gemini's ``Schema`` object: upper-case types, ``nullable`` for
    ``null`` alternatives, ``$ref`` inlined from ``$defs``, unsupported keys dropped."""
    if not isinstance(schema, dict):
        return schema
    root = schema if root is None else root
    if depth > 32:
        return {"type": "OBJECT"}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for key in ref[2:].split("/"):
            target = target.get(key, {}) if isinstance(target, dict) else {}
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return gemini_schema(merged, root, depth + 1)
    out = _gemini_type(schema)
    options = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(options, list):
        out = _gemini_options(out, options, root, depth)
    if "const" in schema:
        out["enum"] = [schema["const"]]
    for key, value in schema.items():
        if key in SCHEMA_KEYS and key not in out:
            out[key] = value
    props = schema.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: gemini_schema(v, root, depth + 1) for k, v in props.items()}
    if isinstance(schema.get("items"), dict):
        out["items"] = gemini_schema(schema["items"], root, depth + 1)
    return out


def _gemini_type(schema: dict[str, Any]) -> dict[str, Any]:
    """``type`` upper-cased; a ``null`` among a list of types is ``nullable``."""
    out: dict[str, Any] = {}
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) < len(kind):
            out["nullable"] = True
        kind = kinds[0] if kinds else None
    if isinstance(kind, str):
        out["type"] = kind.upper()
    return out


def _gemini_options(
    out: dict[str, Any], options: list, root: dict[str, Any], depth: int
) -> dict[str, Any]:
    """``anyOf`` / ``oneOf``: a ``null`` option is ``nullable``, one other option inlined."""
    rest = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
    if len(rest) < len(options):
        out["nullable"] = True
    if len(rest) == 1:
        inner = gemini_schema(rest[0], root, depth + 1)
        out = {**inner, **out}
    elif rest:
        out["anyOf"] = [gemini_schema(o, root, depth + 1) for o in rest]
    return out


def error_info(payload: Any) -> tuple[dict[str, Any], str | None]:
    """``(error object, ErrorInfo reason)`` of an error body."""
    if isinstance(payload, list) and payload:
        payload = payload[0]
    err = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(err, dict):
        return {}, None
    for detail in err.get("details") or []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("rpc.ErrorInfo"):
            if detail.get("reason"):
                return err, str(detail["reason"])
    return err, None


class GeminiProvider(Provider):
    """Google Gemini through the Gemini API (API key auth)."""

    name = "gemini"
    label = "Google Gemini"
    default_base_url = "https://generativelanguage.googleapis.com"
    api_key_env = "GEMINI_API_KEY"
    capabilities = EVERY_FEATURE
    stream_parser_class = GeminiStreamParser

    # -- request ---------------------------------------------------------------------
    def auth_headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self.api_key} if self.api_key else {}

    @property
    def api_version(self) -> str:
        return str(self.option("api_version") or "v1beta")

    def endpoint(self, request: ProviderRequest, *, stream: bool) -> str:
        model = request.model_id.removeprefix("models/")
        if stream:
            return f"/{self.api_version}/models/{model}:streamGenerateContent?alt=sse"
        return f"/{self.api_version}/models/{model}:generateContent"

    def build_payload(self, request: ProviderRequest, *, stream: bool) -> dict[str, Any]:
        params = request.params or {}
        system, contents = self.contents(request.messages)
        payload: dict[str, Any] = {"contents": contents}
        if system:
            payload["systemInstruction"] = {"parts": [{"text": system}]}
        payload["generationConfig"] = self.generation_config(request)
        if request.tools:
            payload["tools"] = [
                {"functionDeclarations": [self.declaration(t) for t in request.tools]}
            ]
        vendor = params.get(self.name)
        if vendor:
            payload = merge_vendor_options(payload, vendor)
        return payload

    def generation_config(self, request: ProviderRequest) -> dict[str, Any]:
        params = request.params or {}
        config: dict[str, Any] = copy_params(params, GENERATION_PARAMS)
        thinking = self.thinking_config(request.model_id, params.get("thinking"))
        if thinking:
            config["thinkingConfig"] = thinking
        if request.schema is not None:
            config["responseMimeType"] = "application/json"
            config["responseJsonSchema"] = request.schema
        return config

    def thinking_config(self, model_id: str, spec: Any) -> dict[str, Any]:
        """``params["thinking"]`` (``{"budget_tokens": N}``, ``{"effort": ...}``, an
        effort string or ``True``) -> ``thinkingConfig``."""
        if spec is None or spec is False:
            return {}
        if spec is True:
            return {"includeThoughts": True}
        if isinstance(spec, str):
            spec = {"effort": spec}
        if not isinstance(spec, dict):
            return {}
        if spec.get("budget_tokens") is not None:
            budget = int(spec["budget_tokens"])
            return {"thinkingBudget": budget, "includeThoughts": budget != 0}
        effort = spec.get("effort")
        if effort is None:
            return {"includeThoughts": True}
        if "gemini-3" in model_id:
            return {"thinkingLevel": effort, "includeThoughts": True}
        return {"thinkingBudget": EFFORT_BUDGETS.get(effort, 8192), "includeThoughts": True}

    def declaration(self, tool: ToolSpec) -> dict[str, Any]:
        out: dict[str, Any] = {"name": tool.name, "description": tool.description}
        params = tool.parameters or {}
        if params.get("properties") or params.get("$ref") or params.get("anyOf"):
            out["parameters"] = gemini_schema(params)
        return out

    def contents(self, messages: list[ProviderMessage]) -> tuple[str | None, list[dict]]:
        """``(system instruction text, contents)`` for a transcript."""
        system: list[str] = []
        contents: list[dict[str, Any]] = []
        # The calls of the last assistant message not answered yet, in order: its results
        # follow it in the same order, so each pairs with its call by position (ids may
        # repeat or be empty).
        pending: list[ToolCallData] = []
        native = False
        results_turn: dict[str, Any] | None = None
        for msg in messages:
            if msg.role == "system":
                if msg.content:
                    system.append(msg.content)
                continue
            if msg.role == "tool":
                call = take_call(pending, msg.tool_call_id)
                part = self.function_response(msg, call, native=native)
                if results_turn is None:
                    results_turn = {"role": "user", "parts": []}
                    contents.append(results_turn)
                results_turn["parts"].append(part)
                continue
            results_turn = None
            if msg.role == "user":
                parts: list[dict[str, Any]] = []
                if msg.content:
                    parts.append({"text": msg.content})
                parts.extend(self.attachment_part(a) for a in msg.attachments)
                if parts:
                    contents.append({"role": "user", "parts": parts})
            elif msg.role == "assistant":
                pending = list(msg.tool_calls)
                native = msg.provider == self.name
                parts = self.model_parts(msg)
                if parts:
                    contents.append({"role": "model", "parts": parts})
        return ("\n\n".join(system) or None), contents

    def attachment_part(self, att: AttachmentData) -> dict[str, Any]:
        data = base64.b64encode(att.data).decode("ascii")
        return {"inlineData": {"mimeType": att.mime_type, "data": data}}

    def model_parts(self, msg: ProviderMessage) -> list[dict[str, Any]]:
        native = msg.provider == self.name
        signature = msg.thinking.signature if (native and msg.thinking) else None
        parts: list[dict[str, Any]] = []
        if signature and msg.thinking and msg.thinking.text:
            parts.append(
                {"text": msg.thinking.text, "thought": True, "thoughtSignature": signature}
            )
            signature = None
        if msg.content:
            part: dict[str, Any] = {"text": msg.content}
            if signature:  # a signature that came on the reply's text goes back there
                part["thoughtSignature"] = signature
            parts.append(part)
        for call in msg.tool_calls:
            function_call: dict[str, Any] = {"name": call.name, "args": call.arguments or {}}
            if native and call.item_id:
                function_call["id"] = call.item_id
            part = {"functionCall": function_call}
            if call.thought_signature:
                part["thoughtSignature"] = call.thought_signature
            parts.append(part)
        return parts

    def function_response(
        self, msg: ProviderMessage, call: ToolCallData | None, *, native: bool = True
    ) -> dict:
        """A tool result as a ``functionResponse`` part; ``call`` is the call it answers
        (``native``: made by this provider), whose Gemini id goes back with it."""
        response: dict[str, Any]
        try:
            value = json.loads(msg.content) if msg.content else None
        except ValueError:
            value = None
        if msg.is_error:
            response = {"error": msg.content}
        elif isinstance(value, dict):
            response = value
        else:
            response = {"result": msg.content}
        name = msg.tool_name or (call.name if call else "") or "tool"
        function_response: dict[str, Any] = {"name": name, "response": response}
        if native and call is not None and call.item_id and call.item_id == msg.tool_call_id:
            function_response["id"] = call.item_id
        return {"functionResponse": function_response}

    # -- answer ----------------------------------------------------------------------
    def parse_response(self, data: dict[str, Any], request: ProviderRequest) -> ProviderResponse:
        if isinstance(data, dict) and "error" in data and not data.get("candidates"):
            raise self.error_from_payload(data)
        ids = wire.CallIds(data.get("responseId"))
        candidate = (data.get("candidates") or [{}])[0]
        text: list[str] = []
        thoughts: list[str] = []
        signature: str | None = None
        tool_calls: list[ToolCallData] = []
        for part in (candidate.get("content") or {}).get("parts") or []:
            if "functionCall" in part:
                call = part["functionCall"] or {}
                tool_calls.append(
                    ToolCallData(
                        call_id=ids.call_id(call),
                        name=call.get("name") or "",
                        arguments=call.get("args") or {},
                        thought_signature=part.get("thoughtSignature"),
                        item_id=call.get("id") or None,
                    )
                )
                continue
            if part.get("thoughtSignature"):
                signature = part["thoughtSignature"]
            if part.get("thought"):
                thoughts.append(part.get("text") or "")
            elif isinstance(part.get("text"), str):
                text.append(part["text"])
        raw = candidate.get("finishReason")
        block = (data.get("promptFeedback") or {}).get("blockReason")
        if raw is None and block:
            reason, raw = "content_filter", block
        else:
            reason = wire.finish_reason(raw, bool(tool_calls))
        thought_text = "".join(thoughts)
        grounding = candidate.get("groundingMetadata")
        search = wire.grounding_search(grounding)
        return ProviderResponse(
            content="".join(text),
            tool_calls=tool_calls,
            thinking=Thinking(thought_text, signature) if (thought_text or signature) else None,
            citations=wire.grounding_citations(grounding),
            server_tool_calls=[search] if search else [],
            finish_reason=reason,
            raw_finish_reason=raw,
            tokens=wire.usage_tokens(data.get("usageMetadata")),
            model_id=data.get("modelVersion"),
            response_id=vendor_id(data.get("responseId")),
            raw=data,
        )

    # -- errors ----------------------------------------------------------------------
    def error_details(self, payload: Any) -> tuple[str, str | None]:
        """``(message, code)``: the code is the ``ErrorInfo`` reason when there is one
        (``API_KEY_INVALID``), else the RPC status (``RESOURCE_EXHAUSTED``)."""
        err, reason = error_info(payload)
        if not err:
            return super().error_details(payload)
        code = reason or err.get("status") or err.get("code")
        return str(err.get("message") or ""), (str(code) if code is not None else None)

    def is_context_length_error(self, status: int | None, message: str, code: str | None) -> bool:
        text = message.lower()
        return super().is_context_length_error(status, message, code) or (
            "exceeds the maximum number of tokens" in text
        )

    def error_from_payload(self, payload: Any, **kw: Any) -> ProviderError:
        """As the base (which also reads a 429's ``RetryInfo.retryDelay`` from the body
        into ``retry_after``), plus: a bad key (``API_KEY_INVALID``, answered with 400) is
        an :class:`AuthenticationError`."""
        error = super().error_from_payload(payload, **kw)
        err, reason = error_info(payload)
        if not isinstance(error, AuthenticationError) and (
            reason in AUTH_REASONS or err.get("status") in AUTH_STATUSES
        ):
            error = as_authentication_error(error)
        return error


def take_call(pending: list[ToolCallData], tool_call_id: str | None) -> ToolCallData | None:
    """Remove and return the call a tool result answers from the calls still unanswered:
    the next one in order when its id matches (or the result names none), else the first
    with that id (results sent in another order), else the next one anyway."""
    if not pending:
        return None
    if tool_call_id is None or pending[0].call_id == tool_call_id:
        return pending.pop(0)
    for index, call in enumerate(pending):
        if call.call_id == tool_call_id:
            return pending.pop(index)
    return pending.pop(0)
