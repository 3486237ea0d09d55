"""One streamed provider call: framing, parsing, retries before the first event."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING

import httpx

from ..errors import IncompleteStreamError, ProviderError
from ..events import StreamEvent, TextDone
from .framing import NDJSONDecoder, SSEDecoder
from .parsing import StreamParser
from .types import ProviderRequest, ProviderResponse

if TYPE_CHECKING:
    from .base import Provider
    from .retry import OnRetry


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
    def __iter__(self) -> Iterator[StreamEvent]:
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
                                    delivered = True
                                    yield event
                                if parser.done:
                                    break
                            if parser.done:
                                break
                        else:
                            for name, data in decoder.flush():
                                for event in feed(name, data):
                                    add(event)
                                    delivered = True
                                    yield event
                                if parser.done:
                                    break
                    except httpx.HTTPError as exc:
                        raise provider._midstream_error(exc) from None
                    except json.JSONDecodeError as exc:
                        raise self._bad_json(exc, data) from None
                    for event in self._ending(parser):
                        delivered = True
                        yield event
                finally:
                    http.close()
                return
            except ProviderError as err:
                failure = provider._finish_error(err)
                # after an event was delivered a failure propagates, never a retry
                delay = None if delivered else provider.retry_delay(failure, attempt)
                if delay is None:
                    raise
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
