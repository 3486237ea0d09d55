"""Gemini generateContent / streamGenerateContent, as the fake server speaks it."""

from __future__ import annotations

import json
from typing import Any

from ...values import Tokens
from .render import Renderer, _dumps, _n, _rand, error_text, sse
from .values import Fault, RecordedRequest, Reply


class GeminiRenderer(Renderer):
    """Gemini: whole ``GenerateContentResponse`` chunks separated by ``\\r\\n\\r\\n``."""

    format = "gemini"
    frame_separator = "\r\n\r\n"
    finish_reasons = {
        "stop": "STOP",
        "tool_calls": "STOP",
        "length": "MAX_TOKENS",
        "content_filter": "SAFETY",
    }
    statuses = {
        400: "INVALID_ARGUMENT",
        401: "UNAUTHENTICATED",
        403: "PERMISSION_DENIED",
        404: "NOT_FOUND",
        429: "RESOURCE_EXHAUSTED",
        500: "INTERNAL",
        503: "UNAVAILABLE",
        504: "DEADLINE_EXCEEDED",
    }

    def request_id_header(self) -> dict[str, str]:
        return {}

    @staticmethod
    def usage(tokens: Tokens, *, candidates: int | None = None) -> dict[str, Any]:
        thoughts = _n(tokens.thinking_tokens)
        # Gemini has no cache-write count: cache_write_tokens cannot be expressed.
        prompt = _n(tokens.input_tokens) + _n(tokens.cache_read_tokens)
        if candidates is None:
            candidates = max(0, _n(tokens.output_tokens) - thoughts)
        out: dict[str, Any] = {
            "promptTokenCount": prompt,
            "candidatesTokenCount": candidates,
            "totalTokenCount": prompt + candidates + thoughts,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        }
        if tokens.cache_read_tokens is not None:
            out["cachedContentTokenCount"] = tokens.cache_read_tokens
        if tokens.thinking_tokens is not None:
            out["thoughtsTokenCount"] = thoughts
        return out

    def finish(self, reply: Reply) -> str:
        reason = reply.resolved_finish_reason
        return self.finish_reasons.get(reason, reason)

    @staticmethod
    def call_parts(reply: Reply) -> list[dict[str, Any]]:
        parts = []
        signed = any(tc.thought_signature for tc in reply.tool_calls)
        for index, tc in enumerate(reply.tool_calls):
            call: dict[str, Any] = {"name": tc.name, "args": tc.arguments}
            if tc.call_id is not None:  # "" is sent as an empty id
                call["id"] = tc.call_id
            part: dict[str, Any] = {"functionCall": call}
            signature = tc.thought_signature
            if not signed and index == 0:
                signature = f"CiQB{_rand(40)}"
            if signature:
                part["thoughtSignature"] = signature
            parts.append(part)
        return parts

    def thought_part(self, reply: Reply, text: str, last: bool) -> dict[str, Any]:
        part: dict[str, Any] = {"text": text, "thought": True}
        if last and reply.thinking_signature:
            part["thoughtSignature"] = reply.thinking_signature
        return part

    def response(
        self,
        reply: Reply,
        request: RecordedRequest,
        parts: list[dict],
        usage: dict,
        rid: str,
        finish: bool,
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
        if finish:
            candidate["finishReason"] = self.finish(reply)
        candidate["index"] = 0
        if finish and reply.tool_calls:
            candidate["finishMessage"] = "Model generated function call(s)."
        return {
            "candidates": [candidate],
            **({"usageMetadata": usage} if reply.reports_usage else {}),
            "modelVersion": self.model(reply, request),
            "responseId": rid,
        }

    def body(self, reply: Reply, request: RecordedRequest) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        if reply.thinking:
            parts.append(self.thought_part(reply, reply.thinking, True))
        if reply.text or not reply.tool_calls:
            parts.append({"text": reply.text})
        parts.extend(self.call_parts(reply))
        return self.response(
            reply, request, parts, self.usage(reply.tokens), reply.response_id or _rand(22), True
        )

    def encode_body(self, reply: Reply, request: RecordedRequest) -> bytes:
        return (json.dumps(self.body(reply, request), indent=2, ensure_ascii=False) + "\n").encode()

    def chunks(self, reply: Reply, request: RecordedRequest) -> list[dict[str, Any]]:
        """The streamed ``GenerateContentResponse`` objects."""
        groups: list[list[dict[str, Any]]] = []
        thoughts = reply.pieces(reply.thinking or "")
        for i, piece in enumerate(thoughts):
            groups.append([self.thought_part(reply, piece, i == len(thoughts) - 1)])
        for piece in reply.pieces(reply.text):
            groups.append([{"text": piece}])
        if reply.tool_calls:
            groups.append(self.call_parts(reply))
        if not groups:
            groups.append([{"text": ""}])
        tokens = reply.tokens
        final = self.usage(tokens)
        rid = reply.response_id or _rand(22)
        out = []
        for i, parts in enumerate(groups):
            last = i == len(groups) - 1
            if last:
                usage = final
            else:
                # usageMetadata is a snapshot of the response so far, not an increment.
                partial = min(i + 1, final["candidatesTokenCount"])
                usage = {
                    "promptTokenCount": final["promptTokenCount"],
                    "candidatesTokenCount": partial,
                    "totalTokenCount": final["promptTokenCount"] + partial,
                    "promptTokensDetails": final["promptTokensDetails"],
                }
            out.append(self.response(reply, request, parts, usage, rid, last))
        return out

    def frames(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        if request.query.get("alt") != "sse":
            # Without alt=sse Gemini streams one JSON array.
            chunks = self.chunks(reply, request)
            frames = []
            for i, chunk in enumerate(chunks):
                prefix = "[" if i == 0 else ",\r\n"
                frames.append((prefix + json.dumps(chunk, indent=2)).encode())
            frames[-1] += b"]"
            return frames
        return [sse(_dumps(c), sep="\r\n\r\n") for c in self.chunks(reply, request)]

    def error_payload(self, status: int, fault: Fault | None, message: str | None) -> dict:
        out: dict[str, Any] = {
            "code": status,
            "message": (fault and fault.error_message) or message or error_text(status),
            "status": (fault and fault.error_type) or self.statuses.get(status, "UNKNOWN"),
        }
        if status == 429 and fault is not None and fault.retry_after is not None:
            seconds = fault.retry_after
            delay = f"{seconds}s" if isinstance(seconds, int | float) else str(seconds)
            out["details"] = [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
            ]
        return out

    def error_body(self, status: int, fault: Fault | None, message: str | None = None) -> Any:
        return {"error": self.error_payload(status, fault, message)}

    def error_frames(self, fault: Fault, request: RecordedRequest) -> list[bytes]:
        body = {"error": self.error_payload(503, fault, None)}
        if request.query.get("alt") != "sse":
            return [(",\r\n" + _dumps(body) + "]").encode()]
        return [sse(_dumps(body), sep="\r\n\r\n")]
