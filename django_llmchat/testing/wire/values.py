"""What a scripted exchange says: replies, tool calls, faults, and the recorded request."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ...values import TOKEN_FIELDS, Tokens

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

    ``call_id`` is generated in the vendor's style when omitted or ``None`` (``call_...``
    for OpenAI, ``toolu_...`` for Anthropic; Gemini sends no id unless one is given).
    Any string given is sent exactly as it is, in every wire format: ``""`` sends an empty
    id (Gemini: ``"id": ""``), and several calls of a reply may share one id, as some
    servers and proxies do.
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
    token per four characters); ``False`` reports none at all (a server that omits usage:
    no usage block, no usage chunk). Gemini has no field for ``cache_write_tokens``, so it
    is not sent there. ``finish_reason`` is ``"stop"``, ``"tool_calls"``,
    ``"length"`` or ``"content_filter"`` (spelled the vendor's way on the wire), or any raw
    vendor value; by default ``"tool_calls"`` when the reply has tool calls, else
    ``"stop"``. Text, thinking and tool-call arguments stream in pieces of ``chunk_size``
    characters (``0`` sends each in one piece). ``model`` overrides the model name echoed
    back (default: the requested one); ``headers`` are added to the HTTP response.
    ``response_id`` is the answer's id on the wire (default: a new random one in the
    vendor's shape, ``resp_...``, ``chatcmpl-...``, ``msg_01...``, Gemini's
    ``responseId``).
    """

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    thinking: str | None = None
    thinking_signature: str | None = None
    usage: Tokens | Mapping[str, int | None] | Literal[False] | None = None
    finish_reason: str | None = None
    chunk_size: int = 8
    model: str | None = None
    headers: Mapping[str, str] | None = None
    response_id: str | None = None

    def __post_init__(self) -> None:
        self.tool_calls = [
            tc if isinstance(tc, ToolCall) else ToolCall(**tc) for tc in self.tool_calls
        ]

    # -- derived values -------------------------------------------------------------------
    @property
    def tokens(self) -> Tokens:
        """The usage to report, as :class:`Tokens` (empty when none is reported)."""
        if self.usage is False:
            return Tokens()
        if self.usage is True:
            raise ValueError("usage=True is not a usage: leave it out, or False for none")
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
    def reports_usage(self) -> bool:
        """Whether the answer carries a usage block (``usage=False``: it does not)."""
        return self.usage is not False

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
