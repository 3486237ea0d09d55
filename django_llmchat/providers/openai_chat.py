"""OpenAI Chat Completions (``POST {base_url}/chat/completions``) and the vendors that speak it.

:class:`ChatCompletionsProvider` is the protocol; each vendor below is a few lines of
configuration over it: a name, a default ``base_url`` (with ``/v1`` where the vendor has
one), the environment variable of its key, what it can do, and small payload tweaks.
"""

from __future__ import annotations

import base64
import json
from typing import Any, ClassVar

from ..errors import ArgumentError, ConfigurationError, UnsupportedFeatureError
from ..values import Thinking
from . import openai_chat_wire as wire
from .base import Provider, copy_params, merge_vendor_options, parse_arguments
from .openai_chat_stream import ChatCompletionsStreamParser
from .openai_chat_wire import FINISH_REASONS, usage_tokens
from .types import (
    AttachmentData,
    Capabilities,
    ProviderMessage,
    ProviderRequest,
    ProviderResponse,
    ToolCallData,
    vendor_id,
)

__all__ = [
    "FINISH_REASONS",
    "ChatCompletionsProvider",
    "OpenAIChatProvider",
    "OllamaProvider",
    "OpenRouterProvider",
    "DeepSeekProvider",
    "MistralProvider",
    "PerplexityProvider",
    "OpenAICompatibleProvider",
    "usage_tokens",
]


def call_id_or_new(value: Any) -> str:
    """The id to store: the server's own (``""`` stays ``""``), or a made-up one only when
    the server sent no id at all."""
    call_id = wire.wire_call_id(value)
    return wire.new_call_id() if call_id is None else call_id


# ``params`` -> body fields, copied when set (``max_tokens`` under ``max_tokens_param``).
GENERATION_PARAMS = {"temperature": "temperature", "top_p": "top_p", "stop": "stop"}


class ChatCompletionsProvider(Provider):
    """The Chat Completions wire protocol. Vendors subclass it with a few class attributes."""

    label = "OpenAI-compatible Chat Completions"
    api_key_env: ClassVar[str | None] = None
    capabilities = Capabilities(vision=True, structured_output=True, thinking=True)
    stream_parser_class = ChatCompletionsStreamParser

    system_role: ClassVar[str] = "system"
    """Role of the leading instructions message; ``options["system_role"]`` overrides it
    (``"developer"`` for OpenAI reasoning models behind strict proxies)."""
    max_tokens_param: ClassVar[str] = "max_tokens"
    stream_usage_option: ClassVar[bool] = True
    """Send ``stream_options: {"include_usage": true}`` (servers that reject it: False)."""
    reasoning_effort_param: ClassVar[bool] = False
    """Whether ``params["thinking"]`` becomes ``reasoning_effort``."""
    requires_done_sentinel: ClassVar[bool] = True
    """A stream is complete only at ``data: [DONE]`` (else: at its finish_reason)."""

    # -- request -------------------------------------------------------------------------
    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def endpoint(self, request: ProviderRequest, *, stream: bool) -> str:
        return "/chat/completions"

    def build_payload(self, request: ProviderRequest, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model_id,
            "messages": self.build_messages(request.messages),
            "stream": stream,
        }
        if request.tools:
            if not self.capabilities.tools:
                raise UnsupportedFeatureError(self.name, "tools")
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                }
                for tool in request.tools
            ]
        if stream and self.stream_usage_option:
            body["stream_options"] = {"include_usage": True}
        if request.schema is not None:
            if not self.capabilities.structured_output:
                raise UnsupportedFeatureError(self.name, "structured output")
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": request.schema_name or "response",
                    "schema": request.schema,
                    "strict": True,
                },
            }
        params = request.params
        names = {**GENERATION_PARAMS, "max_tokens": self.max_tokens_param}
        body.update(copy_params(params, names))
        if params.get("thinking"):
            body.update(self.thinking_params(params["thinking"]))
        return merge_vendor_options(body, params.get(self.name))

    def thinking_params(self, thinking: dict[str, Any]) -> dict[str, Any]:
        """``params["thinking"]`` (``{"effort": "low"}`` or ``{"budget_tokens": N}``) as body
        fields. A budget maps to the nearest effort."""
        if not self.reasoning_effort_param:
            raise UnsupportedFeatureError(
                self.name, "thinking parameters (choose a reasoning model instead)"
            )
        return {"reasoning_effort": _effort(thinking)}

    def build_messages(self, messages: list[ProviderMessage]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        system = [m.content for m in messages if m.role == "system" and m.content]
        if system:
            role = self.options.get("system_role") or self.system_role
            out.append({"role": role, "content": "\n\n".join(system)})
        for m in messages:
            if m.role == "system":
                continue
            if m.role == "user":
                out.append({"role": "user", "content": self.user_content(m)})
            elif m.role == "assistant":
                msg: dict[str, Any] = {"role": "assistant", "content": m.content or ""}
                if m.tool_calls:
                    msg["tool_calls"] = [self.tool_call(call) for call in m.tool_calls]
                out.append(msg)
            elif m.role == "tool":
                out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
            else:
                raise ArgumentError(f"unknown message role {m.role!r}")
        return out

    def tool_call(self, call: ToolCallData) -> dict[str, Any]:
        args = call.arguments
        if set(args) == {"_raw"}:  # arguments that never parsed: send them back as they came
            text = args["_raw"]
        else:
            text = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        return {
            "id": call.call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": text},
        }

    def user_content(self, message: ProviderMessage) -> str | list[dict[str, Any]]:
        if not message.attachments:
            return message.content
        parts: list[dict[str, Any]] = []
        if message.content:
            parts.append({"type": "text", "text": message.content})
        parts.extend(self.attachment_part(a) for a in message.attachments)
        return parts

    def attachment_part(self, attachment: AttachmentData) -> dict[str, Any]:
        mime = attachment.mime_type
        if mime.startswith("text/"):
            text = attachment.data.decode("utf-8", "replace")
            if attachment.filename:
                text = f"{attachment.filename}:\n{text}"
            return {"type": "text", "text": text}
        data = base64.b64encode(attachment.data).decode("ascii")
        if mime.startswith("image/"):
            if not self.capabilities.vision:
                raise UnsupportedFeatureError(self.name, "image input")
            return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}
        if mime == "application/pdf":
            if not self.capabilities.pdf:
                raise UnsupportedFeatureError(self.name, "PDF input")
            return {
                "type": "file",
                "file": {
                    "filename": attachment.filename or "document.pdf",
                    "file_data": f"data:{mime};base64,{data}",
                },
            }
        raise UnsupportedFeatureError(self.name, f"{mime} attachments")

    # -- answer --------------------------------------------------------------------------
    def parse_response(self, data: dict[str, Any], request: ProviderRequest) -> ProviderResponse:
        if data.get("error"):  # some gateways answer 200 with an error body
            raise self.error_from_payload(data, body=json.dumps(data))
        choices = data.get("choices") or [{}]
        choice = choices[0]
        message = choice.get("message") or {}
        text, reasoning = wire.split_content(message.get("content"))
        reasoning = message.get("reasoning_content") or message.get("reasoning") or reasoning
        refusal = message.get("refusal")
        if refusal and not text:
            text = refusal
        calls = [
            ToolCallData(
                call_id=call_id_or_new(call.get("id")),
                name=(call.get("function") or {}).get("name") or "",
                arguments=_parsed_arguments((call.get("function") or {}).get("arguments")),
            )
            for call in message.get("tool_calls") or ()
        ]
        raw = choice.get("finish_reason")
        return ProviderResponse(
            content=text,
            tool_calls=calls,
            thinking=Thinking(reasoning) if reasoning else None,
            citations=wire.citations_of(data, message),
            finish_reason=wire.finish_reason(raw, tool_calls=bool(calls), refusal=bool(refusal)),
            raw_finish_reason=raw,
            tokens=usage_tokens(data.get("usage")),
            model_id=data.get("model"),
            response_id=vendor_id(data.get("id")),
            raw=data,
        )


def _parsed_arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):  # a few servers send an object instead of JSON text
        return value
    return parse_arguments(value)


def _effort(thinking: dict[str, Any]) -> str:
    effort = thinking.get("effort")
    if effort:
        return str(effort)
    budget = thinking.get("budget_tokens") or 0
    return "low" if budget < 4096 else "medium" if budget < 16384 else "high"


# -- vendors -----------------------------------------------------------------------------


class OpenAIChatProvider(ChatCompletionsProvider):
    """OpenAI through Chat Completions (``LLMCHAT["PROVIDERS"]["openai"]["api"] =
    "chat_completions"``); the default ``openai`` provider speaks Responses."""

    name = "openai"
    label = "OpenAI (Chat Completions)"
    default_base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"
    capabilities = Capabilities(vision=True, pdf=True, thinking=True, structured_output=True)
    max_tokens_param = "max_completion_tokens"
    reasoning_effort_param = True


class OllamaProvider(ChatCompletionsProvider):
    """A local Ollama server (or ollama.com with a key) through its ``/v1`` API."""

    name = "ollama"
    label = "Ollama"
    default_base_url = "http://localhost:11434/v1"
    api_key_env = "OLLAMA_API_KEY"
    requires_api_key = False
    capabilities = Capabilities(
        vision=True, thinking=True, structured_output=True, prompt_caching="none"
    )
    reasoning_effort_param = True


class OpenRouterProvider(ChatCompletionsProvider):
    """OpenRouter: many vendors' models behind one key."""

    name = "openrouter"
    label = "OpenRouter"
    default_base_url = "https://openrouter.ai/api/v1"
    api_key_env = "OPENROUTER_API_KEY"
    capabilities = Capabilities(vision=True, pdf=True, thinking=True, structured_output=True)

    def thinking_params(self, thinking: dict[str, Any]) -> dict[str, Any]:
        if thinking.get("budget_tokens") and not thinking.get("effort"):
            return {"reasoning": {"max_tokens": thinking["budget_tokens"]}}
        return {"reasoning": {"effort": _effort(thinking)}}


class DeepSeekProvider(ChatCompletionsProvider):
    """DeepSeek; ``deepseek-reasoner`` streams ``reasoning_content``."""

    name = "deepseek"
    label = "DeepSeek"
    default_base_url = "https://api.deepseek.com"
    api_key_env = "DEEPSEEK_API_KEY"
    capabilities = Capabilities(thinking=True, structured_output=False)


class MistralProvider(ChatCompletionsProvider):
    """Mistral La Plateforme. It rejects unknown fields, so no ``stream_options``: usage
    comes on the last chunk anyway."""

    name = "mistral"
    label = "Mistral"
    default_base_url = "https://api.mistral.ai/v1"
    api_key_env = "MISTRAL_API_KEY"
    capabilities = Capabilities(vision=True, thinking=True, structured_output=True)
    stream_usage_option = False


class PerplexityProvider(ChatCompletionsProvider):
    """Perplexity Sonar: answers grounded in a web search, with citations; no tools."""

    name = "perplexity"
    label = "Perplexity"
    default_base_url = "https://api.perplexity.ai"
    api_key_env = "PERPLEXITY_API_KEY"
    capabilities = Capabilities(
        tools=False, parallel_tool_calls=False, vision=True, structured_output=True, citations=True
    )
    requires_done_sentinel = False


class OpenAICompatibleProvider(ChatCompletionsProvider):
    """Any server speaking Chat Completions (vLLM, LM Studio, llama.cpp, GPUStack...).
    ``base_url`` is required; a key only when the server wants one."""

    name = "openai_compatible"
    label = "OpenAI-compatible server"
    requires_api_key = False
    capabilities = Capabilities(vision=True, thinking=True, structured_output=True)
    reasoning_effort_param = True

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if not self.base_url:
            raise ConfigurationError(
                f'Provider "{self.name}" needs a base_url: set '
                f'LLMCHAT["PROVIDERS"]["{self.name}"]["base_url"] '
                '(for example "http://localhost:8000/v1").'
            )
