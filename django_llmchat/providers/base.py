"""HTTP plumbing shared by every provider: clients, auth, framing, errors, retries.

A vendor module subclasses :class:`Provider` and only builds requests and reads answers:

* ``auth_headers()``: the vendor's auth headers for ``self.api_key``;
* ``endpoint(request, stream=...)``: the path (and query) under ``base_url``;
* ``build_payload(request, stream=...)``: the JSON body;
* ``parse_response(data)``: a whole JSON answer -> :class:`ProviderResponse`;
* ``new_stream_parser(request)``: a :class:`StreamParser` for one streamed answer.

Everything else lives here: one pooled httpx client per configuration and process,
timeouts, the User-Agent, SSE / NDJSON decoding, translation of HTTP and network failures
into :mod:`django_llmchat.errors`, and bounded retries with backoff. Sync and async calls
share the parsers and the retry rules.
"""

from __future__ import annotations

import asyncio
import codecs
import email.utils
import json
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

import httpx

from .. import __version__
from ..errors import (
    AuthenticationError,
    ContextLengthExceededError,
    IncompleteStreamError,
    OverloadedError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitError,
)
from ..events import (
    FinishReasonDone,
    ReasoningDelta,
    ReasoningDone,
    StreamEvent,
    TextDelta,
    TextDone,
    TokenUsageDone,
    ToolCallDone,
)
from ..values import Thinking, Tokens
from .types import Capabilities, ProviderRequest, ProviderResponse, ToolCallData

__all__ = [
    "USER_AGENT",
    "Provider",
    "ProviderStream",
    "StreamParser",
    "ResponseBuilder",
    "SSEDecoder",
    "NDJSONDecoder",
    "iter_sse",
    "iter_ndjson",
    "parse_arguments",
    "parse_retry_after",
    "parse_duration",
    "backoff_delay",
    "close_clients",
]

logger = logging.getLogger("django_llmchat.providers")

USER_AGENT = f"django-llmchat/{__version__} httpx/{httpx.__version__}"

DEFAULT_TIMEOUT = 120.0
CONNECT_TIMEOUT = 10.0
"""Longest wait for a TCP/TLS connection, whatever the (read) timeout is."""

# Many concurrent streams share one pool per configuration; each holds a connection.
POOL_LIMITS = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=30.0)

BACKOFF_BASE = 0.5
BACKOFF_FACTOR = 2.0
BACKOFF_CAP = 8.0

# Response headers never copied onto an error.
_PRIVATE_HEADERS = frozenset({"set-cookie", "authorization", "x-api-key", "x-goog-api-key"})


# -- small helpers -----------------------------------------------------------------------


def parse_arguments(text: str | None) -> dict[str, Any]:
    """Tool-call arguments arrive as JSON text; an empty string means no arguments."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_value": value}


def _setting(name: str) -> Any:
    """An ``LLMCHAT`` setting, or its default when Django is not configured (scripts)."""
    from ..conf import DEFAULTS, settings

    try:
        return getattr(settings, name)
    except Exception:  # ImproperlyConfigured outside a Django project
        return DEFAULTS[name]


def parse_duration(value: Any) -> float | None:
    """Seconds from ``"48s"``, ``"1.5s"``, ``"250ms"`` or a bare number; ``None`` if unreadable."""
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    scale = 1.0
    if text.endswith("ms"):
        text, scale = text[:-2], 0.001
    elif text.endswith("s"):
        text = text[:-1]
    try:
        return float(text) * scale
    except ValueError:
        return None


def _body_retry_delay(body: Any) -> float | None:
    """Gemini-style ``RetryInfo.retryDelay`` found in an error body (text or parsed)."""
    if isinstance(body, str):
        if "retryDelay" not in body:
            return None
        try:
            body = json.loads(body)
        except ValueError:
            return None
    if isinstance(body, list) and body:
        body = body[0]
    if not isinstance(body, dict):
        return None
    err = body.get("error", body)
    details = err.get("details") if isinstance(err, dict) else None
    for item in details if isinstance(details, list) else ():
        if isinstance(item, dict) and "retryDelay" in item:
            return parse_duration(item["retryDelay"])
    return None


def parse_retry_after(headers: Mapping[str, str] | None, body: Any = None) -> float | None:
    """The server's wait hint in seconds: ``retry-after-ms``, then ``retry-after`` (seconds
    or an HTTP date), then a ``RetryInfo.retryDelay`` in the body. ``None`` when absent."""
    if headers:
        value = headers.get("retry-after-ms")
        if value:
            try:
                return max(0.0, float(value) / 1000.0)
            except ValueError:
                pass
        value = headers.get("retry-after")
        if value:
            try:
                return max(0.0, float(value))
            except ValueError:
                try:
                    when = email.utils.parsedate_to_datetime(value)
                except (TypeError, ValueError):
                    when = None
                if when is not None:
                    if when.tzinfo is None:
                        when = when.replace(tzinfo=UTC)
                    return max(0.0, (when - datetime.now(UTC)).total_seconds())
    if body is not None:
        return _body_retry_delay(body)
    return None


def backoff_delay(attempt: int, *, rand: Callable[[], float] = random.random) -> float:
    """Exponential backoff with jitter: 0.5 s, 1 s, 2 s... capped, minus up to 25 %."""
    delay = min(BACKOFF_BASE * BACKOFF_FACTOR**attempt, BACKOFF_CAP)
    return delay * (1.0 - 0.25 * rand())


OnRetry = Callable[[ProviderError, int], Any]
"""``on_retry(error, retry_number)``: told about each failed attempt that will be retried."""


# -- clients -----------------------------------------------------------------------------

_CLIENT_LOCK = threading.Lock()
_SYNC_CLIENTS: dict[tuple, httpx.Client] = {}
_ASYNC_CLIENTS: weakref.WeakKeyDictionary[Any, dict[tuple, httpx.AsyncClient]] = (
    weakref.WeakKeyDictionary()
)
_SSL_CONTEXT: Any = None
_GENERATION = 0
"""Bumped when pooled clients are dropped (fork, close_clients): instances re-fetch theirs."""


def _ssl_context() -> Any:
    # Building a verifying SSL context is most of a client's construction cost: share one.
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = httpx.create_ssl_context()
    return _SSL_CONTEXT


def close_clients() -> None:
    """Close and forget every pooled sync client (async ones are dropped with their loop)."""
    global _GENERATION
    with _CLIENT_LOCK:
        clients = list(_SYNC_CLIENTS.values())
        _SYNC_CLIENTS.clear()
        _ASYNC_CLIENTS.clear()
        _GENERATION += 1
    for client in clients:
        client.close()


def _forget_clients_after_fork() -> None:
    # A forked worker must not share the parent's sockets; it builds its own clients.
    global _CLIENT_LOCK, _GENERATION
    _CLIENT_LOCK = threading.Lock()
    _SYNC_CLIENTS.clear()
    _ASYNC_CLIENTS.clear()
    _GENERATION += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_clients_after_fork)


# -- responses ---------------------------------------------------------------------------


class ResponseBuilder:
    """Accumulates one streamed response from the events a parser yields.

    The base feeds it every event; vendor parsers set what events do not carry
    (``citations``, ``server_tool_calls``, ``raw``, ``model_id``, ``reasoning_items``,
    tool-call extras such as Gemini thought signatures) directly.
    """

    def __init__(self) -> None:
        self.text_parts: list[str] = []
        self.text_done = False
        self.tool_calls: list[ToolCallData] = []
        self.reasoning_parts: list[str] = []
        self.reasoning_signature: str | None = None
        self.reasoning_items: list[dict[str, Any]] = []
        self.citations: list = []
        self.server_tool_calls: list = []
        self.finish_reason: str | None = None
        self.raw_finish_reason: str | None = None
        self.tokens = Tokens()
        self.model_id: str | None = None
        self.raw: dict[str, Any] = {}
        self.tool_call_extras: dict[str, dict[str, Any]] = {}

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def add(self, event: StreamEvent) -> None:
        kind = type(event)
        if kind is TextDelta:
            self.text_parts.append(event.content)
        elif kind is ReasoningDelta:
            pass
        elif kind is ToolCallDone:
            extras = self.tool_call_extras.get(event.call_id, {})
            self.tool_calls.append(
                ToolCallData(
                    call_id=event.call_id,
                    name=event.name,
                    arguments=parse_arguments(event.arguments),
                    thought_signature=extras.get("thought_signature"),
                    item_id=event.item_id,
                )
            )
        elif kind is ReasoningDone:
            self.reasoning_parts.append(event.part.text)
            if event.part.signature:
                self.reasoning_signature = event.part.signature
        elif kind is TokenUsageDone:
            self.tokens = event.token_usage
        elif kind is FinishReasonDone:
            self.finish_reason = event.finish_reason
            self.raw_finish_reason = event.raw_finish_reason
        elif kind is TextDone:
            self.text_done = True

    def build(self) -> ProviderResponse:
        thinking = None
        if self.reasoning_parts or self.reasoning_signature:
            thinking = Thinking("".join(self.reasoning_parts), self.reasoning_signature)
        finish = self.finish_reason or ("tool_calls" if self.tool_calls else "stop")
        return ProviderResponse(
            content=self.text,
            tool_calls=self.tool_calls,
            thinking=thinking,
            reasoning_items=self.reasoning_items,
            citations=self.citations,
            server_tool_calls=self.server_tool_calls,
            finish_reason=finish,
            raw_finish_reason=self.raw_finish_reason,
            tokens=self.tokens,
            model_id=self.model_id,
            raw=self.raw or None,
        )


class StreamParser:
    """Reads one streamed answer, one decoded SSE event (or NDJSON line) at a time.

    ``feed()`` returns the events that input produced and raises a ``ProviderError`` for
    an error event; it sets ``done`` when the vendor's terminal event arrives. When the
    body ends without it, the base calls ``end_of_stream()`` once: a vendor whose stream
    has no terminator may emit its last events there and set ``done``; otherwise the
    stream raises :class:`IncompleteStreamError`.
    """

    def __init__(self, provider: Provider, request: ProviderRequest):
        self.provider = provider
        self.request = request
        self.builder = ResponseBuilder()
        self.done = False

    def feed(self, event: str | None, data: str) -> Iterable[StreamEvent]:
        raise NotImplementedError

    def end_of_stream(self) -> Iterable[StreamEvent]:
        return ()

    def finish(self) -> ProviderResponse:
        return self.builder.build()


# -- framing -----------------------------------------------------------------------------


class SSEDecoder:
    """Incremental Server-Sent Events decoder over raw body chunks.

    ``feed(chunk)`` returns the complete ``(event, data)`` pairs the chunk finished;
    ``flush()`` returns what is left at the end of the body. Lines end with LF, CRLF or
    CR only (never at U+2028 or the other separators ``str.splitlines`` knows), so JSON
    text holding those characters stays intact. Comment lines (``: ping``) are skipped.
    """

    __slots__ = ("_utf8", "_pending", "_tail", "_cr", "_event", "_data")

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = False  # the incremental decoder holds part of a character
        self._tail: list[str] = []
        self._cr = False
        self._event: str | None = None
        self._data: list[str] = []

    def _split(self, text: str) -> list[str]:
        if self._cr:
            text = "\r" + text
            self._cr = False
        if "\r" in text:
            if text[-1] == "\r":  # may be the first half of a CRLF
                self._cr = True
                text = text[:-1]
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        if "\n" not in text:
            if text:
                self._tail.append(text)
            return []
        lines = text.split("\n")
        if self._tail:
            self._tail.append(lines[0])
            lines[0] = "".join(self._tail)
            self._tail = []
        last = lines.pop()
        if last:
            self._tail.append(last)
        return lines

    def feed(self, chunk: bytes | str) -> list[tuple[str | None, str]]:
        if isinstance(chunk, bytes):
            text = None
            if not self._pending:
                try:  # a chunk holding whole characters: the fast, common case
                    text = chunk.decode("utf-8")
                except UnicodeDecodeError:
                    pass
            if text is None:
                text = self._utf8.decode(chunk)
                self._pending = bool(self._utf8.getstate()[0])
        else:
            text = chunk
        if not text:
            return []
        return self._lines(self._split(text))

    def flush(self) -> list[tuple[str | None, str]]:
        text = self._utf8.decode(b"", final=True)
        lines = self._split(text) if text else []
        self._cr = False
        if self._tail:
            lines.append("".join(self._tail))
            self._tail = []
        lines.append("")  # the body's end dispatches a pending event
        return self._lines(lines)

    def _lines(self, lines: list[str]) -> list[tuple[str | None, str]]:
        out: list[tuple[str | None, str]] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    out.append((self._event, data[0] if len(data) == 1 else "\n".join(data)))
                    data = self._data = []
                self._event = None
            elif line[0] == "d" and line[:5] == "data:":
                data.append(line[6:] if line[5:6] == " " else line[5:])
            elif line[0] == ":":
                continue
            else:
                name, _, value = line.partition(":")
                if name == "event":
                    self._event = value[1:] if value[:1] == " " else value
                elif name == "data":  # "data" with no colon
                    data.append("")
        return out


class NDJSONDecoder(SSEDecoder):
    """One JSON document per line (Ollama's native API); blank lines are skipped."""

    __slots__ = ()

    def _lines(self, lines: list[str]) -> list[tuple[str | None, str]]:
        return [(None, line) for line in lines if line and not line.isspace()]


def iter_sse(lines: Iterable[str]) -> Iterator[tuple[str | None, str]]:
    """Decode Server-Sent Events from text lines into ``(event, data)`` pairs."""
    event: str | None = None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = None, []
            continue
        if line[0] == ":":
            continue
        name, _, value = line.partition(":")
        if value[:1] == " ":
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        yield event, "\n".join(data)


def iter_ndjson(lines: Iterable[str]) -> Iterator[tuple[str | None, str]]:
    for line in lines:
        if line.strip():
            yield None, line


# -- the provider ------------------------------------------------------------------------


class Provider:
    """Base class of a provider connection. Subclasses speak one wire protocol.

    ``sleep`` / ``asleep`` are the waits between retries; tests replace them on an
    instance (``provider.sleep = waits.append``) so nothing really waits.
    """

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    default_base_url: ClassVar[str] = ""
    api_key_env: ClassVar[str | None] = None
    requires_api_key: ClassVar[bool] = True
    capabilities: ClassVar[Capabilities] = Capabilities()
    stream_framing: ClassVar[str] = "sse"  # or "ndjson"

    sleep: Callable[[float], Any] = staticmethod(time.sleep)
    asleep: Callable[[float], Any] = staticmethod(asyncio.sleep)

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | Mapping[str, float] | None = None,
        max_retries: int | None = None,
        options: dict[str, Any] | None = None,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        name: str | None = None,
    ):
        if name and name != self.name:
            self.name = name  # a configured alias, e.g. LLMCHAT["PROVIDERS"]["lmstudio"]
        self.api_key = api_key
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.timeout = timeout if timeout is not None else DEFAULT_TIMEOUT
        self._max_retries = max_retries
        self.options = dict(options or {})
        self._transport = transport
        self._client: httpx.Client | None = None
        self._generation = _GENERATION
        self._async_clients: weakref.WeakKeyDictionary[Any, httpx.AsyncClient] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:  # never shows the key
        return f"<{type(self).__name__} {self.name} {self.base_url}>"

    @property
    def max_retries(self) -> int:
        """Retries after the first attempt; ``LLMCHAT["MAX_RETRIES"]`` unless configured."""
        if self._max_retries is not None:
            return self._max_retries
        return int(_setting("MAX_RETRIES"))

    @max_retries.setter
    def max_retries(self, value: int | None) -> None:
        self._max_retries = value

    # -- what a vendor module implements -------------------------------------------------
    def auth_headers(self) -> dict[str, str]:
        return {}

    def endpoint(self, request: ProviderRequest, *, stream: bool) -> str:
        raise NotImplementedError

    def build_payload(self, request: ProviderRequest, *, stream: bool) -> dict[str, Any]:
        raise NotImplementedError

    def parse_response(self, data: dict[str, Any]) -> ProviderResponse:
        raise NotImplementedError

    def new_stream_parser(self, request: ProviderRequest) -> StreamParser:
        raise NotImplementedError

    # -- errors --------------------------------------------------------------------------
    def error_details(self, payload: Any) -> tuple[str, str | None]:
        """``(message, code)`` from an error body. Override for unusual shapes."""
        if isinstance(payload, list) and payload:
            payload = payload[0]
        if isinstance(payload, dict):
            err = payload.get("error", payload)
            if isinstance(err, str):
                return err, None
            if isinstance(err, dict):
                message = err.get("message") or payload.get("message") or ""
                if not message and "detail" in payload:  # {"detail": "Invalid API Key"}
                    detail = payload["detail"]
                    if isinstance(detail, list):  # validation errors: [{"msg": ...}]
                        detail = "; ".join(
                            str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail
                        )
                    message = detail
                code = err.get("type") or err.get("code") or err.get("status")
                return str(message), (str(code) if code is not None else None)
        return (str(payload)[:500] if payload else ""), None

    def is_context_length_error(self, status: int | None, message: str, code: str | None) -> bool:
        text = f"{code or ''} {message}".lower()
        return (
            "context_length" in text
            or "context window" in text
            or ("prompt is too long" in text)
            or ("maximum context length" in text)
        )

    def error_from_payload(
        self,
        payload: Any,
        *,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        body: str | None = None,
    ) -> ProviderError:
        """Turn an error answer (HTTP error body or a mid-stream error event) into an
        exception of the :mod:`django_llmchat.errors` tree, with its retry hints."""
        message, code = self.error_details(payload)
        message = message or (f"HTTP {status}" if status else "error")
        codes = (code or "").lower()
        # A mid-stream error often carries the HTTP status it stands for as its code.
        effective = status if status is not None else (int(codes) if codes.isdigit() else None)
        kw: dict[str, Any] = {
            "provider": self.name,
            "status": status,
            "body": body if body is not None else (json.dumps(payload) if payload else None),
            "headers": headers,
            "code": code,
        }
        if effective in (401, 403) or "auth" in codes or "permission" in codes:
            err: ProviderError = AuthenticationError(message, **kw)
        elif effective == 429 or "rate_limit" in codes or codes == "resource_exhausted":
            err = RateLimitError(message, **kw)
        elif effective == 529 or "overloaded" in codes:
            err = OverloadedError(message, **kw)
        elif self.is_context_length_error(status, message, code):
            err = ContextLengthExceededError(message, **kw)
        else:
            if status is None:
                kw["retryable"] = (
                    effective in ProviderError.retryable_statuses
                    if effective is not None
                    else codes in ("server_error", "api_error", "internal", "unavailable")
                )
            err = ProviderError(message, **kw)
        return self._apply_retry_hints(err, payload)

    def error_from_response(self, response: httpx.Response) -> ProviderError:
        text = response.text
        try:
            payload: Any = json.loads(text) if text else None
        except ValueError:
            payload = text
        headers = {
            k.lower(): v for k, v in response.headers.items() if k.lower() not in _PRIVATE_HEADERS
        }
        return self.error_from_payload(
            payload, status=response.status_code, headers=headers, body=text
        )

    def _apply_retry_hints(self, err: ProviderError, payload: Any = None) -> ProviderError:
        if err.retry_after is None:
            err.retry_after = parse_retry_after(
                err.headers, payload if payload is not None else err.body
            )
        should = (err.headers.get("x-should-retry") or "").lower()
        if should == "true":
            err.retryable = True
        elif should == "false":
            err.retryable = False
        return err

    def _finish_error(self, err: ProviderError) -> ProviderError:
        """Last pass over every error leaving the base: provider name, hints, no key."""
        if err.provider is None:
            err.provider = self.name
        if err.retry_after is None or err.headers.get("x-should-retry"):
            self._apply_retry_hints(err)
        key = self.api_key
        if key and len(key) >= 6:

            def scrub(value: Any) -> Any:
                return value.replace(key, "[redacted]") if isinstance(value, str) else value

            err.message = scrub(err.message)
            err.args = tuple(scrub(a) for a in err.args)
            err.body = scrub(err.body)
            err.code = scrub(err.code)
            err.headers = {k: scrub(v) for k, v in err.headers.items()}
        return err

    def _scrub_text(self, text: str) -> str:
        key = self.api_key
        return text.replace(key, "[redacted]") if key and len(key) >= 6 else text

    def _transport_error(self, exc: Exception) -> ProviderError:
        """A failure before any response: connection refused, DNS, TLS, timeouts."""
        where = self._where()
        detail = self._scrub_text(str(exc)) or type(exc).__name__
        if isinstance(exc, httpx.TimeoutException):
            phase = {
                httpx.ConnectTimeout: "connecting to",
                httpx.ReadTimeout: "waiting for",
                httpx.WriteTimeout: "sending to",
                httpx.PoolTimeout: "waiting for a free connection to",
            }.get(type(exc), "talking to")
            return ProviderTimeoutError(
                f"timed out {phase} {where} ({type(exc).__name__})", provider=self.name
            )
        if isinstance(exc, httpx.NetworkError | httpx.RemoteProtocolError | httpx.ProxyError):
            return ProviderTimeoutError(
                f"connection to {where} failed ({type(exc).__name__}: {detail})",
                provider=self.name,
            )
        return ProviderError(
            f"request to {where} failed ({type(exc).__name__}: {detail})",
            provider=self.name,
            retryable=False,
        )

    def _midstream_error(self, exc: Exception) -> IncompleteStreamError:
        detail = self._scrub_text(str(exc)) or "no detail"
        return IncompleteStreamError(
            f"stream from {self._where()} broke before its terminal event "
            f"({type(exc).__name__}: {detail})",
            provider=self.name,
        )

    def _where(self) -> str:
        # Host only: a query string could carry a key.
        try:
            return httpx.URL(self.base_url).host or self.base_url
        except Exception:
            return self.name or "the provider"

    # -- retries -------------------------------------------------------------------------
    def retry_delay(self, error: ProviderError, attempt: int) -> float | None:
        """Seconds to wait before retry number ``attempt + 1``, or ``None`` to give up."""
        if not error.retryable or attempt >= self.max_retries:
            return None
        cap = float(_setting("MAX_RETRY_WAIT"))
        if error.retry_after is not None:
            return max(0.0, min(error.retry_after, cap))
        return min(backoff_delay(attempt), cap)

    def _before_retry(
        self, error: ProviderError, delay: float, attempt: int, on_retry: OnRetry | None
    ) -> None:
        logger.info(
            "%s; retrying in %.2fs (retry %d of %d)", error, delay, attempt + 1, self.max_retries
        )
        if on_retry is not None:
            on_retry(error, attempt + 1)

    # -- plumbing ------------------------------------------------------------------------
    def headers(self) -> dict[str, str]:
        return {
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
            **(self.options.get("headers") or {}),
            **self.auth_headers(),
        }

    def httpx_timeout(self) -> httpx.Timeout:
        """``timeout`` is seconds (connect capped at :data:`CONNECT_TIMEOUT`) or a dict of
        ``connect`` / ``read`` / ``write`` / ``pool``."""
        t = self.timeout
        if isinstance(t, Mapping):
            read = float(t.get("read", DEFAULT_TIMEOUT))
            return httpx.Timeout(
                read,
                connect=float(t.get("connect", min(read, CONNECT_TIMEOUT))),
                write=float(t.get("write", read)),
                pool=float(t.get("pool", read)),
            )
        t = float(t)
        return httpx.Timeout(t, connect=min(t, CONNECT_TIMEOUT))

    def client_key(self) -> tuple:
        """What makes two configurations need different connection pools."""
        t = self.timeout
        timeout = tuple(sorted(t.items())) if isinstance(t, Mapping) else t
        return (
            type(self).__module__,
            type(self).__qualname__,
            self.base_url,
            timeout,
            self.options.get("proxy"),
            self.options.get("verify", True),
        )

    def _client_kwargs(self) -> dict[str, Any]:
        verify = self.options.get("verify", True)
        return {
            "timeout": self.httpx_timeout(),
            "limits": POOL_LIMITS,
            "headers": {"User-Agent": USER_AGENT},
            "verify": _ssl_context() if verify is True else verify,
            "proxy": self.options.get("proxy"),
            "follow_redirects": False,
        }

    @property
    def client(self) -> httpx.Client:
        """The pooled sync client for this configuration (created once per process)."""
        if self._client is not None and self._generation == _GENERATION:
            return self._client
        with _CLIENT_LOCK:
            if self._generation != _GENERATION:
                self._client = None
                self._async_clients = weakref.WeakKeyDictionary()
                self._generation = _GENERATION
            if self._client is None:
                if self._transport is not None:
                    self._client = httpx.Client(transport=self._transport, **self._client_kwargs())
                else:
                    key = self.client_key()
                    client = _SYNC_CLIENTS.get(key)
                    if client is None:
                        client = _SYNC_CLIENTS[key] = httpx.Client(**self._client_kwargs())
                    self._client = client
        return self._client

    @property
    def async_client(self) -> httpx.AsyncClient:
        """The pooled async client for this configuration and the running event loop."""
        loop = asyncio.get_running_loop()
        try:
            client = self._async_clients.get(loop)
        except TypeError:
            client = None
        if client is not None and self._generation == _GENERATION:
            return client
        with _CLIENT_LOCK:
            if self._generation != _GENERATION:
                self._client = None
                self._async_clients = weakref.WeakKeyDictionary()
                self._generation = _GENERATION
            try:
                client = self._async_clients.get(loop)
            except TypeError:
                client = None
            if client is None:
                if self._transport is not None:
                    client = httpx.AsyncClient(transport=self._transport, **self._client_kwargs())
                else:
                    try:
                        shared = _ASYNC_CLIENTS.setdefault(loop, {})
                    except TypeError:  # a loop type without weak references
                        shared = {}
                    key = self.client_key()
                    client = shared.get(key)
                    if client is None:
                        client = shared[key] = httpx.AsyncClient(**self._client_kwargs())
                try:
                    self._async_clients[loop] = client
                except TypeError:
                    pass
        return client

    def url(self, request: ProviderRequest, *, stream: bool) -> str:
        return self.base_url + self.endpoint(request, stream=stream)

    def encode_payload(self, payload: dict[str, Any]) -> bytes:
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def _read_json(self, response: httpx.Response) -> ProviderResponse:
        if response.status_code >= 400:
            raise self.error_from_response(response)
        try:
            data = json.loads(response.content)
        except ValueError:
            raise ProviderError(
                "the answer is not JSON",
                provider=self.name,
                status=response.status_code,
                body=response.text[:2000],
                retryable=False,
            ) from None
        return self.parse_response(data)

    def complete(
        self, request: ProviderRequest, *, on_retry: OnRetry | None = None
    ) -> ProviderResponse:
        """One whole answer, retried on retryable errors.

        ``on_retry(error, retry_number)`` is called for each failed attempt that will be
        retried (``retry_number`` counts from 1), before the wait.
        """
        url = self.url(request, stream=False)
        body = self.encode_payload(self.build_payload(request, stream=False))
        attempt = 0
        while True:
            try:
                try:
                    response = self.client.post(url, content=body, headers=self.headers())
                except httpx.HTTPError as exc:
                    raise self._transport_error(exc) from None
                return self._read_json(response)
            except ProviderError as err:
                failure = self._finish_error(err)
                delay = self.retry_delay(failure, attempt)
                if delay is None:
                    raise
            self._before_retry(failure, delay, attempt, on_retry)
            self.sleep(delay)
            attempt += 1

    async def acomplete(
        self, request: ProviderRequest, *, on_retry: OnRetry | None = None
    ) -> ProviderResponse:
        """Async twin of :meth:`complete`."""
        url = self.url(request, stream=False)
        body = self.encode_payload(self.build_payload(request, stream=False))
        attempt = 0
        while True:
            try:
                try:
                    response = await self.async_client.post(
                        url, content=body, headers=self.headers()
                    )
                except httpx.HTTPError as exc:
                    raise self._transport_error(exc) from None
                return self._read_json(response)
            except ProviderError as err:
                failure = self._finish_error(err)
                delay = self.retry_delay(failure, attempt)
                if delay is None:
                    raise
            self._before_retry(failure, delay, attempt, on_retry)
            await self.asleep(delay)
            attempt += 1

    def stream(
        self, request: ProviderRequest, *, on_retry: OnRetry | None = None
    ) -> ProviderStream:
        """Events as they arrive (``for``); ``.response`` holds the whole answer after."""
        return ProviderStream(self, request, on_retry=on_retry)

    def astream(
        self, request: ProviderRequest, *, on_retry: OnRetry | None = None
    ) -> ProviderStream:
        """The same stream, for ``async for``."""
        return ProviderStream(self, request, on_retry=on_retry)


async def _aframes(
    decoder: SSEDecoder, chunks: AsyncIterator[bytes]
) -> AsyncIterator[tuple[str | None, str]]:
    async for chunk in chunks:
        for frame in decoder.feed(chunk):
            yield frame
    for frame in decoder.flush():
        yield frame


class ProviderStream:
    """Iterate (``for`` or ``async for``) for events; after the last one, ``response``
    holds the whole answer.

    A retryable failure before the first event is retried like :meth:`Provider.complete`;
    after an event has been yielded it propagates (an :class:`IncompleteStreamError` when
    the body ended or broke before the vendor's terminal event).
    """

    def __init__(
        self,
        provider: Provider,
        request: ProviderRequest,
        *,
        on_retry: OnRetry | None = None,
    ):
        self.provider = provider
        self.request = request
        self.on_retry = on_retry
        self.response: ProviderResponse | None = None

    def _prepare(self) -> tuple[str, bytes]:
        provider, request = self.provider, self.request
        url = provider.url(request, stream=True)
        return url, provider.encode_payload(provider.build_payload(request, stream=True))

    def _decoder(self) -> SSEDecoder:
        return SSEDecoder() if self.provider.stream_framing == "sse" else NDJSONDecoder()

    def _bad_json(self, exc: json.JSONDecodeError, data: str) -> ProviderError:
        return ProviderError(
            f"a stream event is not valid JSON ({exc.msg})",
            provider=self.provider.name,
            body=data[:2000],
            retryable=True,
        )

    def _feed(self, parser: StreamParser, name: str | None, data: str) -> Iterable[StreamEvent]:
        try:
            return parser.feed(name, data)
        except json.JSONDecodeError as exc:
            raise self._bad_json(exc, data) from None

    def _ending(self, parser: StreamParser) -> Iterator[StreamEvent]:
        """What follows the last frame: end-of-stream events, the check, TextDone."""
        builder = parser.builder
        if not parser.done:
            for event in parser.end_of_stream():
                builder.add(event)
                yield event
        if not parser.done:
            raise IncompleteStreamError(provider=self.provider.name)
        if builder.text_parts and not builder.text_done:
            event = TextDone(builder.text)
            builder.add(event)
            yield event
        self.response = parser.finish()

    # -- sync ----------------------------------------------------------------------------
    def _attempt(self, url: str, body: bytes) -> Iterator[StreamEvent]:
        provider = self.provider
        client = provider.client
        parser = provider.new_stream_parser(self.request)
        add = parser.builder.add
        try:
            http = client.send(
                client.build_request("POST", url, content=body, headers=provider.headers()),
                stream=True,
            )
        except httpx.HTTPError as exc:
            raise provider._transport_error(exc) from None
        try:
            if http.status_code >= 400:
                try:
                    http.read()
                except httpx.HTTPError:
                    pass
                raise provider.error_from_response(http)
            decoder = self._decoder()
            feed_frames = decoder.feed
            feed = parser.feed
            data = ""
            try:
                for chunk in http.iter_bytes():
                    for name, data in feed_frames(chunk):
                        for event in feed(name, data):
                            add(event)
                            yield event
                        if parser.done:
                            break
                    if parser.done:
                        break
                else:
                    for name, data in decoder.flush():
                        for event in feed(name, data):
                            add(event)
                            yield event
                        if parser.done:
                            break
            except httpx.HTTPError as exc:
                raise provider._midstream_error(exc) from None
            except json.JSONDecodeError as exc:
                raise self._bad_json(exc, data) from None
            yield from self._ending(parser)
        finally:
            http.close()

    def __iter__(self) -> Iterator[StreamEvent]:
        provider = self.provider
        url, body = self._prepare()
        attempt = 0
        while True:
            events = self._attempt(url, body)
            try:
                first = next(events)
            except StopIteration:
                return
            except ProviderError as err:
                events.close()
                failure = provider._finish_error(err)
                delay = provider.retry_delay(failure, attempt)
                if delay is None:
                    raise
            else:
                # delivered: from here on a failure propagates, never a retry
                try:
                    yield first
                    yield from events
                except ProviderError as err:
                    provider._finish_error(err)
                    raise
                finally:
                    events.close()
                return
            provider._before_retry(failure, delay, attempt, self.on_retry)
            provider.sleep(delay)
            attempt += 1

    # -- async ---------------------------------------------------------------------------
    async def _aattempt(self, url: str, body: bytes) -> AsyncIterator[StreamEvent]:
        provider = self.provider
        client = provider.async_client
        parser = provider.new_stream_parser(self.request)
        add = parser.builder.add
        try:
            http = await client.send(
                client.build_request("POST", url, content=body, headers=provider.headers()),
                stream=True,
            )
        except httpx.HTTPError as exc:
            raise provider._transport_error(exc) from None
        try:
            if http.status_code >= 400:
                try:
                    await http.aread()
                except httpx.HTTPError:
                    pass
                raise provider.error_from_response(http)
            frames = _aframes(self._decoder(), http.aiter_bytes())
            try:
                async for name, data in frames:
                    for event in self._feed(parser, name, data):
                        add(event)
                        yield event
                    if parser.done:
                        break
            except httpx.HTTPError as exc:
                raise provider._midstream_error(exc) from None
            finally:
                await frames.aclose()
            for event in self._ending(parser):
                yield event
        finally:
            await http.aclose()

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:
        provider = self.provider
        url, body = self._prepare()
        attempt = 0
        while True:
            delivered = False
            events = self._aattempt(url, body)
            try:
                async for event in events:
                    delivered = True
                    yield event
                return
            except ProviderError as err:
                failure = provider._finish_error(err)
                delay = None if delivered else provider.retry_delay(failure, attempt)
                if delay is None:
                    raise
            finally:
                await events.aclose()
            provider._before_retry(failure, delay, attempt, self.on_retry)
            await provider.asleep(delay)
            attempt += 1
