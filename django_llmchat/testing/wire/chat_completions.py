"""OpenAI Chat Completions (and every OpenAI-compatible server), as the fake server speaks it."""

from __future__ import annotations

import time
from typing import Any

from ...values import Tokens
from .render import Renderer, _dumps, _n, _rand, error_text, sse
from .values import Fault, RecordedRequest, Reply


class ChatCompletionsRenderer(Renderer):
    """OpenAI Chat Completions: ``data:`` chunks ending with ``data: [DONE]``."""

    format = "chat_completions"
    finish_reasons = {
        "stop": "stop",
        "tool_calls": "tool_calls",
        "length": "length",
        "content_filter": "content_filter",
    }
    reasoning_field = "reasoning"
    """Where thinking goes in a delta/message: Ollama and OpenRouter say ``reasoning``,
    DeepSeek and vLLM ``reasoning_content``."""

    def __init__(self, reasoning_field: str | None = None):
        if reasoning_field:
            self.reasoning_field = reasoning_field

    @staticmethod
    def usage(tokens: Tokens) -> dict[str, Any]:
        prompt = _n(tokens.input_tokens) + _n(tokens.cache_read_tokens)
        prompt += _n(tokens.cache_write_tokens)
        details: dict[str, Any] = {"cached_tokens": _n(tokens.cache_read_tokens)}
        if tokens.cache_write_tokens is not None:
            details["cache_write_tokens"] = tokens.cache_write_tokens
        out = _n(tokens.output_tokens)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": out,
            "total_tokens": prompt + out,
            "prompt_tokens_details": details,
            "completion_tokens_details": {"reasoning_tokens": _n(tokens.thinking_tokens)},
        }

    def finish(self, reply: Reply) -> str:
        reason = reply.resolved_finish_reason
        return self.finish_reasons.get(reason, reason)

    def call_ids(self, reply: Reply) -> list[str]:
        return [f"call_{_rand()}" if tc.call_id is None else tc.call_id for tc in reply.tool_calls]

    def body(self, reply: Reply, request: RecordedRequest) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant"}
        message["content"] = reply.text if (reply.text or not reply.tool_calls) else None
        if reply.thinking:
            message[self.reasoning_field] = reply.thinking
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": tc.name, "arguments": tc.arguments_json},
                }
                for tc, call_id in zip(reply.tool_calls, self.call_ids(reply), strict=True)
            ]
        return {
            "id": reply.response_id or f"chatcmpl-{_rand()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model(reply, request),
            "system_fingerprint": "fp_fake",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self.finish(reply),
                }
            ],
            **({"usage": self.usage(reply.tokens)} if reply.reports_usage else {}),
        }

    def frames(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        body = request.body if isinstance(request.body, dict) else {}
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        include_usage = include_usage and reply.reports_usage  # else a server ignoring it
        base = {
            "id": reply.response_id or f"chatcmpl-{_rand()}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model(reply, request),
            "system_fingerprint": "fp_fake",
        }

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            data = {
                **base,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            if include_usage:
                data["usage"] = None
            data.update(extra)
            return sse(_dumps(data))

        frames = [chunk({"role": "assistant", "content": ""})]
        for piece in reply.pieces(reply.thinking or ""):
            frames.append(chunk({self.reasoning_field: piece}))
        for piece in reply.pieces(reply.text):
            frames.append(chunk({"content": piece}))
        for index, (tc, call_id) in enumerate(
            zip(reply.tool_calls, self.call_ids(reply), strict=True)
        ):
            first = {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": tc.name, "arguments": ""},
            }
            frames.append(chunk({"tool_calls": [first]}))
            for piece in reply.pieces(tc.arguments_json):
                frag = {"index": index, "function": {"arguments": piece}}
                frames.append(chunk({"tool_calls": [frag]}))
        usage = self.usage(reply.tokens)
        if include_usage:
            frames.append(chunk({}, self.finish(reply)))
            final = {**base, "choices": [], "usage": usage}
            frames.append(sse(_dumps(final)))
        elif reply.reports_usage:
            # Mistral, DeepSeek and others put the usage on the finishing chunk.
            frames.append(chunk({}, self.finish(reply), usage=usage))
        else:
            frames.append(chunk({}, self.finish(reply)))
        frames.append(sse("[DONE]"))
        return frames

    def error_payload(self, status: int, fault: Fault | None, message: str | None) -> dict:
        kind = {
            400: "invalid_request_error",
            401: "invalid_request_error",
            403: "permission_error",
            404: "invalid_request_error",
            429: "rate_limit_error",
        }.get(status, "server_error")
        code = {401: "invalid_api_key", 429: "rate_limit_exceeded", 404: "model_not_found"}
        return {
            "message": (fault and fault.error_message) or message or error_text(status),
            "type": (fault and fault.error_type) or kind,
            "param": None,
            "code": code.get(status, kind if status >= 500 else None),
        }

    def error_body(self, status: int, fault: Fault | None, message: str | None = None) -> Any:
        return {"error": self.error_payload(status, fault, message)}

    def error_frames(self, fault: Fault, request: RecordedRequest) -> list[bytes]:
        return [sse(_dumps({"error": self.error_payload(500, fault, None)}))]
