"""Anthropic Messages, as the fake server speaks it."""

from __future__ import annotations

import itertools
from typing import Any

from ...values import Tokens
from .render import Renderer, _dumps, _n, _rand, error_text, sse
from .values import Fault, RecordedRequest, Reply


class AnthropicRenderer(Renderer):
    """Anthropic Messages: ``message_start`` ... ``message_stop``, JSON padded with spaces."""

    format = "anthropic"
    finish_reasons = {
        "stop": "end_turn",
        "tool_calls": "tool_use",
        "length": "max_tokens",
        "content_filter": "refusal",
    }
    error_types = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
        500: "api_error",
        529: "overloaded_error",
    }

    def request_id_header(self) -> dict[str, str]:
        return {"request-id": f"req_{_rand()}"}

    @staticmethod
    def usage(tokens: Tokens, *, output: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "input_tokens": _n(tokens.input_tokens),
            "cache_creation_input_tokens": _n(tokens.cache_write_tokens),
            "cache_read_input_tokens": _n(tokens.cache_read_tokens),
            "output_tokens": _n(tokens.output_tokens) if output is None else output,
        }
        if output is None and tokens.thinking_tokens is not None:
            out["output_tokens_details"] = {"thinking_tokens": tokens.thinking_tokens}
        return out

    def finish(self, reply: Reply) -> str:
        reason = reply.resolved_finish_reason
        return self.finish_reasons.get(reason, reason)

    @staticmethod
    def signature(reply: Reply) -> str:
        return reply.thinking_signature or f"EqQBCkYIBxgCKkB{_rand(32)}"

    def blocks(self, reply: Reply) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if reply.thinking is not None:
            blocks.append(
                {"type": "thinking", "thinking": reply.thinking, "signature": self.signature(reply)}
            )
        if reply.text or not reply.tool_calls:
            blocks.append({"type": "text", "text": reply.text})
        for tc in reply.tool_calls:
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_01{_rand(22)}" if tc.call_id is None else tc.call_id,
                    "name": tc.name,
                    "input": tc.arguments,
                }
            )
        return blocks

    def body(self, reply: Reply, request: RecordedRequest) -> dict[str, Any]:
        return {
            "model": self.model(reply, request),
            "id": reply.response_id or f"msg_01{_rand(22)}",
            "type": "message",
            "role": "assistant",
            "content": self.blocks(reply),
            "stop_reason": self.finish(reply),
            "stop_sequence": None,
            **({"usage": self.usage(reply.tokens)} if reply.reports_usage else {}),
        }

    def frames(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        frames: list[bytes] = []
        pad = itertools.cycle([5, 0, 3, 11, 1, 7])

        def emit(kind: str, **data: Any) -> None:
            text = _dumps({"type": kind, **data})
            # Anthropic pads its JSON with spaces before the closing brace.
            text = text[:-1] + " " * next(pad) + "}"
            frames.append(sse(text, kind))

        tokens = reply.tokens
        message = {
            "model": self.model(reply, request),
            "id": reply.response_id or f"msg_01{_rand(22)}",
            "type": "message",
            "role": "assistant",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            **({"usage": self.usage(tokens, output=1)} if reply.reports_usage else {}),
        }
        emit("message_start", message=message)
        for index, block in enumerate(self.blocks(reply)):
            kind = block["type"]
            if kind == "thinking":
                emit(
                    "content_block_start",
                    index=index,
                    content_block={"type": "thinking", "thinking": "", "signature": ""},
                )
            elif kind == "text":
                emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                emit("content_block_start", index=index, content_block=start)
            if index == 0:
                frames.append(sse('{"type": "ping"}', "ping"))
            if kind in ("thinking", "text"):  # a thinking_delta or text_delta per piece
                for piece in reply.pieces(block[kind]):
                    delta = {"type": f"{kind}_delta", kind: piece}
                    emit("content_block_delta", index=index, delta=delta)
                if kind == "thinking":
                    delta = {"type": "signature_delta", "signature": block["signature"]}
                    emit("content_block_delta", index=index, delta=delta)
            elif block["input"]:
                # A call without arguments streams no deltas at all.
                args = _dumps(block["input"])
                for piece in [""] + reply.pieces(args):
                    emit(
                        "content_block_delta",
                        index=index,
                        delta={"type": "input_json_delta", "partial_json": piece},
                    )
            emit("content_block_stop", index=index)
        emit(
            "message_delta",
            delta={"stop_reason": self.finish(reply), "stop_sequence": None},
            **({"usage": self.usage(tokens)} if reply.reports_usage else {}),
        )
        emit("message_stop")
        return frames

    def error_payload(self, status: int, fault: Fault | None, message: str | None) -> dict:
        kind = self.error_types.get(status, "api_error")
        return {
            "type": (fault and fault.error_type) or kind,
            "message": (fault and fault.error_message) or message or error_text(status),
        }

    def error_body(self, status: int, fault: Fault | None, message: str | None = None) -> Any:
        return {
            "type": "error",
            "error": self.error_payload(status, fault, message),
            "request_id": f"req_{_rand()}",
        }

    def error_frames(self, fault: Fault, request: RecordedRequest) -> list[bytes]:
        payload = self.error_payload(529, fault, None)
        body = {"type": "error", "error": payload, "request_id": f"req_{_rand()}"}
        return [sse(_dumps(body), "error")]
