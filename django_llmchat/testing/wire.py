"""Scripted replies and faults, and how each vendor's wire format spells them.

A :class:`Reply` says *what* the model answers (text, tool calls, thinking, usage, finish
reason); a :class:`Fault` says *how the exchange goes wrong* (an error status, a stream cut
short, an error event mid-stream, slow bytes). The renderers below turn a reply into the
exact JSON body or Server-Sent Events frames the vendor would send:

* ``chat_completions``: OpenAI Chat Completions (and every OpenAI-compatible server);
* ``responses``: OpenAI Responses;
* ``anthropic``: Anthropic Messages;
* ``gemini``: Gemini ``generateContent`` / ``streamGenerateContent``.

Token counts follow each vendor's own bookkeeping so that a correct parser reads back
exactly the :class:`~django_llmchat.values.Tokens` the reply was scripted with: OpenAI and
Gemini count cache reads (and writes) *inside* the prompt count, Anthropic beside it;
Gemini counts thinking tokens *beside* the output count, OpenAI and Anthropic inside it.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..values import TOKEN_FIELDS, Tokens

__all__ = [
    "FORMATS",
    "NORMALIZED_FINISH_REASONS",
    "Fault",
    "Reply",
    "ToolCall",
    "RecordedRequest",
    "Renderer",
    "renderer_for",
]

FORMATS = ("chat_completions", "responses", "anthropic", "gemini")
"""The wire formats the fake server speaks."""

NORMALIZED_FINISH_REASONS = ("stop", "tool_calls", "length", "content_filter")
"""Finish reasons a :class:`Reply` may name; each renderer spells them the vendor's way.
Any other string is sent to the client verbatim (e.g. ``"pause_turn"``, ``"SAFETY"``)."""


# --------------------------------------------------------------------------------------
# Scripted values
# --------------------------------------------------------------------------------------


@dataclass
class ToolCall:
    """A function call the fake model makes.

    ``call_id`` is generated in the vendor's style when omitted (``call_...`` for OpenAI,
    ``toolu_...`` for Anthropic; Gemini sends no id unless one is given).
    ``thought_signature`` is Gemini's opaque token; when no call of a reply has one, the
    first call gets a generated signature, as Gemini does.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str | None = None
    thought_signature: str | None = None

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, separators=(",", ":"), ensure_ascii=False)


@dataclass
class Reply:
    """What the fake model answers.

    ``usage`` takes a :class:`~django_llmchat.values.Tokens` or a dict of its fields
    (``input_tokens`` excludes cache reads/writes, ``output_tokens`` includes thinking);
    when omitted, a small made-up count is reported (10 input tokens, about one output
    token per four characters); Gemini has no field for ``cache_write_tokens``, so it is
    not sent there. ``finish_reason`` is ``"stop"``, ``"tool_calls"``,
    ``"length"`` or ``"content_filter"`` (spelled the vendor's way on the wire), or any raw
    vendor value; by default ``"tool_calls"`` when the reply has tool calls, else
    ``"stop"``. Text, thinking and tool-call arguments stream in pieces of ``chunk_size``
    characters (``0`` sends each in one piece). ``model`` overrides the model name echoed
    back (default: the requested one); ``headers`` are added to the HTTP response.
    """

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    thinking: str | None = None
    thinking_signature: str | None = None
    usage: Tokens | Mapping[str, int | None] | None = None
    finish_reason: str | None = None
    chunk_size: int = 8
    model: str | None = None
    headers: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        self.tool_calls = [
            tc if isinstance(tc, ToolCall) else ToolCall(**tc) for tc in self.tool_calls
        ]

    # -- derived values -------------------------------------------------------------------
    @property
    def tokens(self) -> Tokens:
        """The usage to report, as :class:`Tokens`."""
        if isinstance(self.usage, Tokens):
            return self.usage
        if self.usage is not None:
            unknown = set(self.usage) - set(TOKEN_FIELDS)
            if unknown:
                raise ValueError(f"unknown usage keys {sorted(unknown)}; use {TOKEN_FIELDS}")
            return Tokens.from_dict(dict(self.usage))
        size = len(self.text) + sum(len(tc.arguments_json) for tc in self.tool_calls)
        thinking = (len(self.thinking) + 3) // 4 if self.thinking else None
        output = max(1, (size + 3) // 4) + (thinking or 0)
        return Tokens(input_tokens=10, output_tokens=output, thinking_tokens=thinking)

    @property
    def resolved_finish_reason(self) -> str:
        if self.finish_reason:
            return self.finish_reason
        return "tool_calls" if self.tool_calls else "stop"

    def pieces(self, text: str) -> list[str]:
        """``text`` split into the deltas a stream sends."""
        size = self.chunk_size
        if not text:
            return []
        if not size or size <= 0:
            return [text]
        return [text[i : i + size] for i in range(0, len(text), size)]


@dataclass
class Fault:
    """How an exchange goes wrong.

    * ``status`` (>= 400): answer with that HTTP status and a vendor-shaped error body
      (``body`` replaces it: a dict is sent as JSON, str/bytes verbatim); ``retry_after``
      (seconds) sets ``Retry-After``, ``retry_after_ms`` sets ``retry-after-ms``;
      ``headers`` adds more. For Gemini a 429 with ``retry_after`` also carries a
      ``RetryInfo.retryDelay`` in the body, as Gemini does.
    * ``cut_after=N``: stream ``reply`` but close the connection after ``N`` frames,
      never sending the vendor's terminal event (at most all frames but the last are
      sent). The HTTP body is left unterminated (no last chunk) unless ``cut_cleanly``,
      in which case it ends properly, just early. A non-streaming answer is cut to half
      its announced ``Content-Length``.
    * ``error_event=N``: stream ``N`` frames of ``reply``, then the vendor's mid-stream
      error (``error_message``/``error_type`` override the defaults), then end the body.
      A non-streaming request gets ``reply`` whole (use ``status`` for errors there).
    * ``chunk_delay``: seconds between frames; ``first_byte_delay``: seconds before the
      response head.
    * ``drop``: close the connection without answering at all.

    ``reply`` is what is streamed for the stream faults (default: the server's default
    reply, or ``Reply("ok")``).
    """

    status: int | None = None
    retry_after: float | str | None = None
    retry_after_ms: int | None = None
    body: Any = None
    headers: Mapping[str, str] | None = None
    cut_after: int | None = None
    cut_cleanly: bool = False
    error_event: int | None = None
    error_message: str | None = None
    error_type: str | None = None
    chunk_delay: float | None = None
    first_byte_delay: float | None = None
    drop: bool = False
    reply: Reply | None = None

    @property
    def is_http_error(self) -> bool:
        return self.status is not None and self.status >= 400


# --------------------------------------------------------------------------------------
# Recorded requests
# --------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One request the fake server received.

    ``headers`` have lower-case names; ``body`` is the parsed JSON (``None`` when the body
    was not JSON); ``format`` is the wire format the path routed to (``None`` for an
    unknown path); ``model`` comes from the body, or from the path for Gemini.
    """

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    raw_body: bytes
    format: str | None = None
    stream: bool = False
    model: str | None = None
    peer: tuple[str, int] | None = None
    """The client's address; requests on one keep-alive connection share it."""
    time: float = field(default_factory=time.time)

    @property
    def json(self) -> Any:
        return self.body

    @property
    def url(self) -> str:
        if not self.query:
            return self.path
        return self.path + "?" + "&".join(f"{k}={v}" for k, v in self.query.items())

    @property
    def messages(self) -> list[Any]:
        """The conversation as sent (``messages``, ``input`` or ``contents``)."""
        body = self.body if isinstance(self.body, dict) else {}
        if self.format == "responses":
            value = body.get("input")
            if isinstance(value, str):
                return [{"role": "user", "content": value}]
            return list(value or [])
        if self.format == "gemini":
            return list(body.get("contents") or [])
        return list(body.get("messages") or [])

    @property
    def last_user_text(self) -> str:
        """The text of the last user message, whatever the wire format ("" if none)."""
        for message in reversed(self.messages):
            if not isinstance(message, dict) or message.get("role") != "user":
                continue
            text = _text_of(message.get("content", message.get("parts")))
            if text:
                return text
        return ""


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                if part.get("type") in (None, "text", "input_text"):
                    texts.append(part["text"])
        return "".join(texts)
    return ""


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def _rand(n: int = 24) -> str:
    return uuid.uuid4().hex[:n]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _n(value: int | None) -> int:
    return value or 0


def sse(data: str, event: str | None = None, sep: str = "\n\n") -> bytes:
    """One Server-Sent Events frame."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}{sep}".encode()


ERROR_TEXT = {
    400: "Invalid request.",
    401: "Incorrect API key provided.",
    403: "Permission denied.",
    404: "Not found.",
    408: "Request timed out.",
    413: "Request too large.",
    429: "Rate limit reached. Please try again later.",
    500: "The server had an error while processing your request.",
    502: "Bad gateway.",
    503: "The service is temporarily unavailable.",
    504: "Gateway timeout.",
    529: "Overloaded",
}


def error_text(status: int) -> str:
    return ERROR_TEXT.get(status, f"HTTP {status}")


# --------------------------------------------------------------------------------------
# Renderers
# --------------------------------------------------------------------------------------


class Renderer:
    """Renders replies and errors in one wire format."""

    format: str = ""
    frame_separator = "\n\n"
    content_type = "application/json"

    def body(self, reply: Reply, request: RecordedRequest) -> dict[str, Any]:
        """The whole (non-streaming) JSON answer."""
        raise NotImplementedError

    def frames(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        """The streamed answer, one SSE frame per item; the last is the terminal one."""
        raise NotImplementedError

    def error_frames(self, fault: Fault, request: RecordedRequest) -> list[bytes]:
        """The vendor's mid-stream error."""
        raise NotImplementedError

    def error_body(self, status: int, fault: Fault | None, message: str | None = None) -> Any:
        """The vendor's body for an HTTP error status."""
        raise NotImplementedError

    def encode_body(self, reply: Reply, request: RecordedRequest) -> bytes:
        return _dumps(self.body(reply, request)).encode()

    def model(self, reply: Reply, request: RecordedRequest) -> str:
        return reply.model or request.model or "fake-model"

    def request_id_header(self) -> dict[str, str]:
        return {"x-request-id": f"req_{_rand()}"}


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
        return [tc.call_id or f"call_{_rand()}" for tc in reply.tool_calls]

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
            "id": f"chatcmpl-{_rand()}",
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
            "usage": self.usage(reply.tokens),
        }

    def frames(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        body = request.body if isinstance(request.body, dict) else {}
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        base = {
            "id": f"chatcmpl-{_rand()}",
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
        else:
            # Mistral, DeepSeek and others put the usage on the finishing chunk.
            frames.append(chunk({}, self.finish(reply), usage=usage))
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
                    "call_id": tc.call_id or f"call_{_rand()}",
                    "name": tc.name,
                }
            )
        return items

    def body(self, reply: Reply, request: RecordedRequest) -> dict[str, Any]:
        status, incomplete = self.status(reply)
        return self.response(
            f"resp_{_rand(40)}",
            self.model(reply, request),
            int(time.time()),
            status,
            self.items(reply),
            self.usage(reply.tokens),
            incomplete,
        )

    def frames(self, reply: Reply, request: RecordedRequest) -> list[bytes]:
        seq = itertools.count()
        frames: list[bytes] = []

        def emit(kind: str, **data: Any) -> None:
            payload = {"type": kind, **data, "sequence_number": next(seq)}
            frames.append(sse(_dumps(payload), kind))

        rid, model, created = f"resp_{_rand(40)}", self.model(reply, request), int(time.time())
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
        final = self.response(
            rid, model, created, status, items, self.usage(reply.tokens), incomplete
        )
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
                    "id": tc.call_id or f"toolu_01{_rand(22)}",
                    "name": tc.name,
                    "input": tc.arguments,
                }
            )
        return blocks

    def body(self, reply: Reply, request: RecordedRequest) -> dict[str, Any]:
        return {
            "model": self.model(reply, request),
            "id": f"msg_01{_rand(22)}",
            "type": "message",
            "role": "assistant",
            "content": self.blocks(reply),
            "stop_reason": self.finish(reply),
            "stop_sequence": None,
            "usage": self.usage(reply.tokens),
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
            "id": f"msg_01{_rand(22)}",
            "type": "message",
            "role": "assistant",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self.usage(tokens, output=1),
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
            if kind == "thinking":
                for piece in reply.pieces(block["thinking"]):
                    emit(
                        "content_block_delta",
                        index=index,
                        delta={"type": "thinking_delta", "thinking": piece},
                    )
                emit(
                    "content_block_delta",
                    index=index,
                    delta={"type": "signature_delta", "signature": block["signature"]},
                )
            elif kind == "text":
                for piece in reply.pieces(block["text"]):
                    emit(
                        "content_block_delta",
                        index=index,
                        delta={"type": "text_delta", "text": piece},
                    )
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
            usage=self.usage(tokens),
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
            if tc.call_id:
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
            "usageMetadata": usage,
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
        return self.response(reply, request, parts, self.usage(reply.tokens), _rand(22), True)

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
        rid = _rand(22)
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


_RENDERERS: dict[str, type[Renderer]] = {
    "chat_completions": ChatCompletionsRenderer,
    "responses": ResponsesRenderer,
    "anthropic": AnthropicRenderer,
    "gemini": GeminiRenderer,
}


def renderer_for(fmt: str, **options: Any) -> Renderer:
    """The renderer of one wire format (see :data:`FORMATS`)."""
    try:
        cls = _RENDERERS[fmt]
    except KeyError:
        raise ValueError(f"unknown wire format {fmt!r}; expected one of {FORMATS}") from None
    if cls is ChatCompletionsRenderer:
        return cls(options.get("reasoning_field"))
    return cls()


def coerce(item: Any) -> Reply | Fault | Callable[[RecordedRequest], Any]:
    """Accept the shorthand forms :meth:`FakeProviderServer.script` takes."""
    if isinstance(item, Reply | Fault) or callable(item):
        return item
    if isinstance(item, str):
        return Reply(text=item)
    if isinstance(item, Mapping):
        return Reply(**item)
    raise TypeError(f"cannot script {item!r}: expected a Reply, a Fault, a str or a callable")
