"""Which vendor options a REST API user may send under ``params.<provider>``.

A provider merges ``chat.params[<its name>]`` over the request body it builds, so an
option there can replace anything: the model, the transcript, the tools, the token
limit, streaming. Python code setting ``chat.params`` (or ``Agent.params``) is trusted
and keeps that full control. Input from API users is checked against an allowlist per
wire protocol (:data:`ALLOWED`); a provider class may declare its own with a
``vendor_options`` class attribute (the same shape). :func:`check` is what the API calls;
call it yourself on any other untrusted input.

An allowlist maps an option to ``True`` (any JSON value) or to a nested allowlist (an
object whose keys are checked the same way).
"""

from __future__ import annotations

from typing import Any

from .errors import ArgumentError

__all__ = ["ALLOWED", "OWNED", "allowed_for", "check", "problems"]

# Fields the library writes itself: the reason given when one is sent.
OWNED: dict[str, str] = {
    "model": "the chat's model_id",
    "messages": "the transcript",
    "input": "the transcript",
    "contents": "the transcript",
    "system": "the transcript",
    "instructions": "the transcript",
    "systemInstruction": "the transcript",
    "system_instruction": "the transcript",
    "prompt": "the transcript",
    "previous_response_id": "the transcript",
    "conversation": "the transcript",
    "stream": "how the run is read",
    "stream_options": "how the run is read",
    "background": "how the run is read",
    "store": "how the run is read",
    "include": "how the run is read",
    "n": "how the run is read",
    "candidateCount": "how the run is read",
    "tools": "the chat's tools",
    "tool_choice": "the chat's tools",
    "toolConfig": "the chat's tools",
    "functions": "the chat's tools",
    "function_call": "the chat's tools",
    "mcp_servers": "the chat's tools",
    "max_tokens": "params.max_tokens (within the model's maximum output)",
    "max_output_tokens": "params.max_tokens (within the model's maximum output)",
    "max_completion_tokens": "params.max_tokens (within the model's maximum output)",
    "maxOutputTokens": "params.max_tokens (within the model's maximum output)",
    "thinking": "params.thinking",
    "thinkingConfig": "params.thinking",
    "response_format": "the chat's schema",
    "text": "the chat's schema",
    "responseMimeType": "the chat's schema",
    "responseSchema": "the chat's schema",
    "responseJsonSchema": "the chat's schema",
    "cachedContent": "the transcript",
}

_REASONING = {"effort": True, "summary": True}

ALLOWED: dict[str, dict[str, Any]] = {
    # OpenAI Responses (openai, xai)
    "responses": {
        "reasoning": _REASONING,
        "service_tier": True,
        "truncation": True,
        "metadata": True,
        "user": True,
        "safety_identifier": True,
        "prompt_cache_key": True,
        "top_logprobs": True,
    },
    # Chat Completions (openai with "api": "chat_completions", ollama, openrouter,
    # deepseek, mistral, perplexity, any compatible server)
    "chat_completions": {
        "reasoning_effort": True,
        "verbosity": True,
        "seed": True,
        "frequency_penalty": True,
        "presence_penalty": True,
        "logit_bias": True,
        "logprobs": True,
        "top_logprobs": True,
        "service_tier": True,
        "user": True,
        "metadata": True,
        "top_k": True,
        "min_p": True,
        "repetition_penalty": True,
        "safe_prompt": True,
        "random_seed": True,
        "reasoning": {"effort": True, "exclude": True},
        "provider": True,
        "search_domain_filter": True,
        "search_recency_filter": True,
        "search_context_size": True,
    },
    # Anthropic Messages
    "anthropic": {
        "top_k": True,
        "metadata": True,
        "service_tier": True,
    },
    # Gemini generateContent
    "gemini": {
        "safetySettings": True,
        "generationConfig": {
            "topK": True,
            "seed": True,
            "presencePenalty": True,
            "frequencyPenalty": True,
            "responseLogprobs": True,
            "logprobs": True,
            "mediaResolution": True,
        },
        "labels": True,
    },
}


def _protocol(cls: type) -> str | None:
    from .providers.anthropic import AnthropicProvider
    from .providers.gemini import GeminiProvider
    from .providers.openai_chat import ChatCompletionsProvider
    from .providers.openai_responses import OpenAIResponsesProvider

    for base, name in (
        (OpenAIResponsesProvider, "responses"),
        (ChatCompletionsProvider, "chat_completions"),
        (AnthropicProvider, "anthropic"),
        (GeminiProvider, "gemini"),
    ):
        if issubclass(cls, base):
            return name
    return None


def allowed_for(provider: str) -> dict[str, Any]:
    """The allowlist of the provider called ``provider`` (its class's ``vendor_options``
    when it declares one, else its wire protocol's; ``{}`` for an unknown protocol)."""
    from .providers import provider_class

    cls = provider_class(provider)
    declared = getattr(cls, "vendor_options", None)
    if isinstance(declared, dict):
        return declared
    protocol = _protocol(cls)
    return ALLOWED.get(protocol, {}) if protocol else {}


def _walk(options: Any, allowed: dict[str, Any], path: str, out: list[str]) -> None:
    if not isinstance(options, dict):
        out.append(f"{path} must be an object")
        return
    for key, value in options.items():
        where = f"{path}.{key}"
        rule = allowed.get(key)
        if rule is None:
            owner = OWNED.get(key)
            if owner is not None:
                out.append(f"{where} is set by the library ({owner}); it cannot be sent")
            else:
                known = ", ".join(sorted(allowed)) or "none"
                out.append(f"{where} is not an allowed vendor option (allowed: {known})")
        elif isinstance(rule, dict):
            _walk(value, rule, where, out)


def problems(params: dict[str, Any], providers: list[str]) -> list[str]:
    """What is wrong with the vendor options in ``params`` for each of ``providers``
    (names present in ``params``), each sentence naming the field."""
    out: list[str] = []
    for name in providers:
        if name in params:
            _walk(params[name], allowed_for(name), name, out)
    return out


def check(params: dict[str, Any], providers: list[str]) -> None:
    """Raise :class:`~django_llmchat.errors.ArgumentError` naming the first field that
    ``params`` may not set for ``providers``."""
    found = problems(params, providers)
    if found:
        raise ArgumentError("; ".join(found))
