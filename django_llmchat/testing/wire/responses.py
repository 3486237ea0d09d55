"""OpenAI Responses, as the fake server speaks it."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from ...values import Tokens
from .chat_completions import ChatCompletionsRenderer
from .render import Renderer, _dumps, _n, _rand, sse
from .values import Fault, RecordedRequest, Reply


class ResponsesRenderer(Renderer):
    """OpenAI Responses: typed ``event:`` frames ending with ``response.completed``."""

    format = "responses"

    @staticmethod
    def usage(tokens: Tokens) -> dict[str, Any]:
        cached = _n(tokens.cache_read_tokens)
        written = _n(tokens.cache_write_tokens)
        prompt = _n(tokens.input_tokens) + cached + written
        out = _n(tokens.output_tokens)
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cache_write_tokens": written, "cached_tokens": cached},
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": _n(tokens.thinking_tokens)},
            "total_tokens": prompt + out,
        }

    def status(self, reply: Reply) -> tuple[str, dict[str, Any] | None]:
        reason = reply.resolved_finish_reason
        if reason in ("stop", "tool_calls", "completed"):
            return "completed", None
        if reason == "length":
            return "incomplete", {"reason": "max_output_tokens"}
        if reason == "content_filter":
            return "incomplete", {"reason": "content_filter"}
        return "incomplete", {"reason": reason}

    def response(
        self,
        rid: str,
        model: str,
        created: int,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None,
        incomplete: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        done = status not in ("in_progress", "queued")
        return {
            "id": rid,
            "object": "response",
            "created_at": created,
            "status": status,
            "background": False,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": None,
            "max_output_tokens": None,
            "model": model,
            "output": output if done else [],
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "store": False,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "metadata": {},
        }

    def items(self, reply: Reply) -> list[dict[str, Any]]:
        """The output items, complete, in order (reasoning, message, function calls)."""
        status, _ = self.status(reply)
        item_status = "completed" if status == "completed" else "incomplete"
        items: list[dict[str, Any]] = []
        if reply.thinking is not None or reply.thinking_signature:
            item: dict[str, Any] = {
                "id": f"rs_{_rand(40)}",
                "type": "reasoning",
                "content": [],
                "summary": (
                    [{"type": "summary_text", "text": reply.thinking}] if reply.thinking else []
                ),
            }
            if reply.thinking_signature:
                item["encrypted_content"] = reply.thinking_signature
            items.append(item)
        if reply.text or not reply.tool_calls:
            items.append(
                {
                    "id": f"msg_{_rand(40)}",
                    "type": "message",
                    "status": item_status,
                    "content": [
                        {
                            "type": "output_text",
                            "annotations": [],
                            "logprobs": [],
                            "text": reply.text,
                        }
                    ],
                    "role": "assistant",
                }
            )
        for tc in reply.tool_calls:
            items.append(
                {
                    "id": f"fc_{_rand(40)}",
                    "type": "function_call",
                    "status": "completed",
                    "arguments": tc.arguments_json,
                    "call_id": f"call_{_rand()}" if tc.call_id is None else tc.call_id,
                    "name": tc.name,
                }
            )
        return items

    def body(self, reply: Reply, request: RecordedRequest) -> dict[str, Any]:
        status, incomplete = self.status(reply)
        return self.response(
            reply.response_id or f"resp_{_rand(40)}",
            self.model(reply, request),
            int(time.time()),
            status,
            self.items(reply),
            self.usage(reply.tokens) if reply.reports_usage else None,
            incomplete,
        )

    def frames(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        seq = itertools.count()
        frames: list[bytes] = []

        def emit(kind: str, **data: Any) -> None:
            payload = {"type": kind, **data, "sequence_number": next(seq)}
            frames.append(sse(_dumps(payload), kind))

        rid = reply.response_id or f"resp_{_rand(40)}"
        model, created = self.model(reply, request), int(time.time())
        status, incomplete = self.status(reply)
        pending = self.response(rid, model, created, "in_progress", [], None)
        emit("response.created", response=pending)
        emit("response.in_progress", response=pending)
        items = self.items(reply)
        for index, item in enumerate(items):
            kind = item["type"]
            if kind == "reasoning":
                self._reasoning(emit, reply, item, index)
            elif kind == "message":
                self._message(emit, reply, item, index)
            else:
                self._function_call(emit, reply, item, index)
        usage = self.usage(reply.tokens) if reply.reports_usage else None
        final = self.response(rid, model, created, status, items, usage, incomplete)
        emit(
            "response.completed" if status == "completed" else "response.incomplete", response=final
        )
        return frames

    @staticmethod
    def _reasoning(emit: Callable[..., None], reply: Reply, item: dict, index: int) -> None:
        emit("response.output_item.added", item={**item, "summary": []}, output_index=index)
        if reply.thinking:
            ids = {"item_id": item["id"], "output_index": index, "summary_index": 0}
            emit(
                "response.reasoning_summary_part.added",
                **ids,
                part={"type": "summary_text", "text": ""},
            )
            for piece in reply.pieces(reply.thinking):
                emit("response.reasoning_summary_text.delta", **ids, delta=piece)
            emit("response.reasoning_summary_text.done", **ids, text=reply.thinking)
            emit(
                "response.reasoning_summary_part.done",
                **ids,
                part={"type": "summary_text", "text": reply.thinking},
            )
        emit("response.output_item.done", item=item, output_index=index)

    @staticmethod
    def _message(emit: Callable[..., None], reply: Reply, item: dict, index: int) -> None:
        added = {**item, "status": "in_progress", "content": []}
        emit("response.output_item.added", item=added, output_index=index)
        ids = {"content_index": 0, "item_id": item["id"], "output_index": index}
        empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
        emit("response.content_part.added", **ids, part=empty)
        for piece in reply.pieces(reply.text):
            emit("response.output_text.delta", **ids, delta=piece, logprobs=[])
        emit("response.output_text.done", **ids, logprobs=[], text=reply.text)
        emit("response.content_part.done", **ids, part={**empty, "text": reply.text})
        emit("response.output_item.done", item=item, output_index=index)

    @staticmethod
    def _function_call(emit: Callable[..., None], reply: Reply, item: dict, index: int) -> None:
        added = {**item, "status": "in_progress", "arguments": ""}
        emit("response.output_item.added", item=added, output_index=index)
        for piece in reply.pieces(item["arguments"]):
            emit(
                "response.function_call_arguments.delta",
                delta=piece,
                item_id=item["id"],
                output_index=index,
            )
        emit(
            "response.function_call_arguments.done",
            arguments=item["arguments"],
            item_id=item["id"],
            output_index=index,
        )
        emit("response.output_item.done", item=item, output_index=index)

    def error_payload(self, status: int, fault: Fault | None, message: str | None) -> dict:
        return ChatCompletionsRenderer().error_payload(status, fault, message)

    def error_body(self, status: int, fault: Fault | None, message: str | None = None) -> Any:
        return {"error": self.error_payload(status, fault, message)}

    def error_frames(self, fault: Fault, request: RecordedRequest) -> list[bytes]:
        err = self.error_payload(500, fault, None)
        code = err["code"] or err["type"]
        event = {
            "type": "error",
            "code": code,
            "message": err["message"],
            "param": None,
            "sequence_number": 0,
        }
        failed = self.response(
            f"resp_{_rand(40)}",
            request.model or "fake-model",
            int(time.time()),
            "failed",
            [],
            None,
            error={"code": code, "message": err["message"]},
        )
        return [
            sse(_dumps(event), "error"),
            sse(
                _dumps({"type": "response.failed", "response": failed, "sequence_number": 1}),
                "response.failed",
            ),
        ]
