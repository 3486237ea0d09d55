"""HTTP plumbing shared by every provider: clients, auth, framing, errors, retries.

A vendor module subclasses :class:`Provider` and only builds requests and reads answers:

* ``auth_headers()``: the vendor's auth headers for ``self.api_key``;
* ``endpoint(request, stream=...)``: the path (and query) under ``base_url``;
* ``build_payload(request, stream=...)``: the JSON body;
* ``parse_response(data)``: a whole JSON answer -> :class:`ProviderResponse`;
* ``new_stream_parser(request)``: a :class:`StreamParser` for one streamed answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any, ClassVar

import httpx

from .. import __version__
from ..errors import (
    AuthenticationError,
    ContextLengthExceededError,
    IncompleteStreamError,
    OverloadedError,
    ProviderError,
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

USER_AGENT = f"django-llmchat/{__version__}"


def parse_arguments(text: str | None) -> dict[str, Any]:
    """Tool-call arguments arrive as JSON text; an empty string means no arguments."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"_raw": text}
    return value if isinstance(value, dict) else {"_value": value}


class ResponseBuilder:
    """Accumulates one streamed response from the events a parser yields.

    The base feeds it every event; vendor parsers set what events do not carry
    (``citations``, ``server_tool_calls``, ``raw``, ``model_id``, ``reasoning_items``,
    tool-call extras such as Gemini thought signatures) directly.
    """

    def __init__(self) -> None:
        self.text_parts: list[str] = []
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
    an error event; it sets ``done`` when the vendor's terminal event arrives.
    """

    def __init__(self, provider: Provider, request: ProviderRequest):
        self.provider = provider
        self.request = request
        self.builder = ResponseBuilder()
        self.done = False

    def feed(self, event: str | None, data: str) -> Iterable[StreamEvent]:
        raise NotImplementedError

    def finish(self) -> ProviderResponse:
        return self.builder.build()


class Provider:
    """Base class of a provider connection. Subclasses speak one wire protocol."""

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    default_base_url: ClassVar[str] = ""
    api_key_env: ClassVar[str | None] = None
    requires_api_key: ClassVar[bool] = True
    capabilities: ClassVar[Capabilities] = Capabilities()
    stream_framing: ClassVar[str] = "sse"  # or "ndjson"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        options: dict[str, Any] | None = None,
        transport: httpx.BaseTransport | None = None,
    ):
        self.api_key = api_key
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.timeout = timeout if timeout is not None else 120.0
        self.max_retries = 2 if max_retries is None else max_retries
        self.options = dict(options or {})
        self._transport = transport
        self._client: httpx.Client | None = None

    def __repr__(self) -> str:  # never shows the key
        return f"<{type(self).__name__} {self.name} {self.base_url}>"

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
                code = err.get("type") or err.get("code") or err.get("status")
                return str(message), (str(code) if code is not None else None)
        return (str(payload)[:500] if payload else ""), None

    def is_context_length_error(self, status: int | None, message: str, code: str | None) -> bool:
        text = f"{code or ''} {message}".lower()
        return "context_length" in text or "context window" in text or (
            "prompt is too long" in text
        ) or ("maximum context length" in text)

    def error_from_payload(
        self,
        payload: Any,
        *,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        body: str | None = None,
    ) -> ProviderError:
        """Turn an error answer (HTTP error body or a mid-stream error event) into an
        exception of the :mod:`django_llmchat.errors` tree."""
        message, code = self.error_details(payload)
        message = message or (f"HTTP {status}" if status else "error")
        codes = (code or "").lower()
        kw: dict[str, Any] = {
            "provider": self.name,
            "status": status,
            "body": body if body is not None else (json.dumps(payload) if payload else None),
            "headers": headers,
            "code": code,
        }
        if status in (401, 403) or "auth" in codes or "permission" in codes:
            return AuthenticationError(message, **kw)
        if status == 429 or "rate_limit" in codes or codes == "resource_exhausted":
            return RateLimitError(message, **kw)
        if status == 529 or "overloaded" in codes:
            return OverloadedError(message, **kw)
        if self.is_context_length_error(status, message, code):
            return ContextLengthExceededError(message, **kw)
        if status is None:
            kw["retryable"] = codes in ("server_error", "api_error", "internal", "unavailable")
        return ProviderError(message, **kw)

    def error_from_response(self, response: httpx.Response) -> ProviderError:
        text = response.text
        try:
            payload: Any = json.loads(text) if text else None
        except ValueError:
            payload = text
        headers = {k.lower(): v for k, v in response.headers.items()}
        return self.error_from_payload(payload, status=response.status_code, headers=headers, body=text)

    # -- plumbing ------------------------------------------------------------------------
    def headers(self) -> dict[str, str]:
        return {
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
            **self.auth_headers(),
        }

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout, transport=self._transport)
        return self._client

    def url(self, request: ProviderRequest, *, stream: bool) -> str:
        return self.base_url + self.endpoint(request, stream=stream)

    def complete(self, request: ProviderRequest) -> ProviderResponse:
        response = self.client.post(
            self.url(request, stream=False),
            json=self.build_payload(request, stream=False),
            headers=self.headers(),
        )
        if response.status_code >= 400:
            raise self.error_from_response(response)
        return self.parse_response(response.json())

    def stream(self, request: ProviderRequest) -> ProviderStream:
        return ProviderStream(self, request)


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


class ProviderStream:
    """Iterate for events; after the last one, ``response`` holds the whole answer."""

    def __init__(self, provider: Provider, request: ProviderRequest):
        self.provider = provider
        self.request = request
        self.response: ProviderResponse | None = None

    def __iter__(self) -> Iterator[StreamEvent]:
        provider, request = self.provider, self.request
        parser = provider.new_stream_parser(request)
        with provider.client.stream(
            "POST",
            provider.url(request, stream=True),
            json=provider.build_payload(request, stream=True),
            headers=provider.headers(),
        ) as http:
            if http.status_code >= 400:
                http.read()
                raise provider.error_from_response(http)
            decode = iter_sse if provider.stream_framing == "sse" else iter_ndjson
            builder = parser.builder
            for name, data in decode(http.iter_lines()):
                for event in parser.feed(name, data):
                    builder.add(event)
                    yield event
                if parser.done:
                    break
        if not parser.done:
            raise IncompleteStreamError(provider=provider.name)
        if builder.text_parts:
            yield TextDone(builder.text)
        self.response = parser.finish()

    async def __aiter__(self) -> AsyncIterator[StreamEvent]:  # pragma: no cover - replaced
        for event in self:
            yield event
