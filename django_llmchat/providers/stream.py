"""One streamed provider call: framing, parsing, retries before the first event."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from itertools import chain
from typing import TYPE_CHECKING

import httpx

from .. import events as ev
from ..errors import IncompleteStreamError, ProviderError
from .framing import NDJSONDecoder, SSEDecoder
from .parsing import StreamParser
from .types import ProviderRequest, ProviderResponse

if TYPE_CHECKING:
    from .base import Provider
    from .retry import OnRetry


_END = object()
_Frame = tuple[str | None, str]  # (event name, data)


def call_in(trace_context, function: Callable, *args, **kwargs):
    """``function(*args, **kwargs)`` with ``trace_context`` (an OpenTelemetry context: the
    attempt's span) current, so spans made inside (an instrumented HTTP client's) are its
    children; a plain call when it is ``None`` (telemetry off)."""
    if trace_context is None:
        return function(*args, **kwargs)
    from opentelemetry import context

    token = context.attach(trace_context)
    try:
        return function(*args, **kwargs)
    finally:
        context.detach(token)


def _read_in(trace_context, chunks: Iterator[bytes]) -> Iterator[bytes]:
    """``chunks`` with ``trace_context`` current while each one is read (and only then:
    the caller's own context is current between them)."""
    from opentelemetry import context

    while True:
        token = context.attach(trace_context)
        try:
            chunk = next(chunks, None)
        finally:
            context.detach(token)
        if chunk is None:
            return
        yield chunk


def _later(produce: Callable[[], Iterable[_Frame]]) -> Iterator[_Frame]:
    """What ``produce()`` returns, called only once the first item is asked for."""
    yield from produce()


def response_events(response: ProviderResponse) -> list[ev.StreamEvent]:
    """The events a stream of ``response`` would have ended with: its reasoning, text,
    tool calls, token usage and finish reason, each as one finished piece."""
    events: list[ev.StreamEvent] = []
    thinking = response.thinking
    if thinking is not None and thinking.text:
        events.append(ev.ReasoningDelta(thinking.text))
        events.append(
            ev.ReasoningDone(ev.ReasoningPart(text=thinking.text, signature=thinking.signature))
        )
    if response.content:
        events.append(ev.TextDelta(response.content))
    for call in response.tool_calls:
        arguments = json.dumps(call.arguments, ensure_ascii=False)
        events.append(
            ev.ToolCallDone(
                item_id=call.item_id or call.call_id,  # as a stream names it
                call_id=call.call_id,
                name=call.name,
                arguments=arguments,
            )
        )
    if response.content:
        events.append(ev.TextDone(response.content))
    events.append(ev.TokenUsageDone(response.tokens))
    events.append(ev.FinishReasonDone(response.finish_reason, response.raw_finish_reason))
    return events


class ProviderStream:
    """Iterate (``for`` or ``async for``) for events; after the last one, ``response``
    holds the whole answer. A streamed request answered with a whole JSON body (some
    gateways ignore ``stream``) is read as that answer, its events made from it.

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
        return url, provider.request_body(request, stream=True)

    def _decoder(self) -> SSEDecoder:
        return SSEDecoder() if self.provider.stream_framing == "sse" else NDJSONDecoder()

    def _bad_json(self, exc: json.JSONDecodeError, data: str) -> ProviderError:
        return ProviderError(
            f"a stream event is not valid JSON ({exc.msg})",
            provider=self.provider.name,
            body=data[:2000],
            retryable=True,
        )

    def _ending(self, parser: StreamParser) -> Iterator[ev.StreamEvent]:
        """What follows the last frame: end-of-stream events, the check, TextDone."""
        builder = parser.builder
        if not parser.done:
            for event in parser.end_of_stream():
                builder.add(event)
                yield event
        if not parser.done:
            raise IncompleteStreamError(provider=self.provider.name)
        if builder.text_parts and not builder.text_done:
            event = ev.TextDone(builder.text)
            builder.add(event)
            yield event
        self.response = parser.finish()

    def _whole_answer(self, http: httpx.Response) -> bool:
        """A streamed request answered with one JSON document (some gateways do that)."""
        kind = http.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        return kind == "application/json" or kind.endswith("+json")

    def _whole(self, http: httpx.Response) -> Iterator[ev.StreamEvent]:
        """The events a whole JSON answer stands for, and the response."""
        try:
            call_in(getattr(self.request, "trace_context", None), http.read)
        except httpx.HTTPError as exc:
            raise self.provider.midstream_error(exc) from None
        response = self.provider.read_response(http, self.request)
        yield from response_events(response)
        self.response = response

    def _frames(self, http: httpx.Response) -> Iterator[_Frame]:
        """The body's frames as its bytes arrive, then any the decoder held back (chained
        in C: no Python frame per frame)."""
        decoder = self._decoder()
        chunks = http.iter_bytes()
        trace_context = getattr(self.request, "trace_context", None)
        if trace_context is not None:
            chunks = _read_in(trace_context, chunks)
        arriving = chain.from_iterable(map(decoder.feed, chunks))
        return chain(arriving, _later(decoder.flush))

    def __iter__(self) -> Iterator[ev.StreamEvent]:
        # One generator for the attempts and the reading: a frame per event costs less.
        provider = self.provider
        client = provider.client
        url, body = self._prepare()
        attempt = 0
        delivered = False
        while True:
            try:
                parser = provider.new_stream_parser(self.request)
                add = parser.builder.add
                try:
                    http = call_in(
                        getattr(self.request, "trace_context", None),
                        client.send_direct,
                        url,
                        body,
                        provider.headers(),
                        stream=True,
                    )
                except httpx.HTTPError as exc:
                    raise provider.transport_error(exc) from None
                try:
                    if http.status_code >= 400:
                        try:
                            http.read()
                        except httpx.HTTPError:
                            pass
                        raise provider.error_from_response(http)
                    if self._whole_answer(http):
                        for event in self._whole(http):
                            delivered = True
                            yield event
                        return
                    feed = parser.feed
                    data = ""
                    try:
                        for name, data in self._frames(http):
                            for event in feed(name, data):
                                add(event)
                                delivered = True
                                yield event
                            if parser.done:
                                break
                    except httpx.HTTPError as exc:
                        raise provider.midstream_error(exc) from None
                    except json.JSONDecodeError as exc:
                        raise self._bad_json(exc, data) from None
                    for event in self._ending(parser):
                        delivered = True
                        yield event
                finally:
                    http.close()
                return
            except ProviderError as err:
                failure = provider.finish_error(err)
                # after an event was delivered a failure propagates, never a retry
                delay = None if delivered else provider.retry_delay(failure, attempt)
                if delay is None:
                    raise
            provider.before_retry(failure, delay, attempt, self.on_retry)
            provider.sleep(delay)
            attempt += 1

    async def __aiter__(self) -> AsyncIterator[ev.StreamEvent]:
        """The same attempts and events, the sync iteration run in a worker thread."""
        events = iter(self)
        try:
            while True:
                event = await asyncio.to_thread(next, events, _END)
                if event is _END:
                    return
                yield event
        finally:
            await asyncio.to_thread(events.close)
