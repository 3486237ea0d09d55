"""The providers' streams (``providers/stream.py``): events then the response, retried before
the first event only, incomplete when cut, closed when abandoned."""

from __future__ import annotations

import json

import httpx
import pytest

from django_llmchat.errors import (
    AuthenticationError,
    IncompleteStreamError,
    OverloadedError,
    ProviderTimeoutError,
)
from django_llmchat.events import FinishReasonDone, TextDelta, TextDone

from .test_base import (
    REQUEST,
    Broken,
    echo,
    err,
    sse,
    stream_ok,
)


def test_stream_events_then_response():
    provider, sent, waits = echo(stream_ok("Hel", "lo"))
    stream = provider.stream(REQUEST)
    assert list(stream) == [
        TextDelta("Hel"),
        TextDelta("lo"),
        FinishReasonDone("stop", "stop"),
        TextDone("Hello"),
    ]
    assert stream.response.content == "Hello"
    assert json.loads(sent[0].content) == {"model": "m", "stream": True}


def test_stream_retries_before_the_first_event():
    provider, sent, waits = echo(err(429, {"retry-after": "1"}), stream_ok("ok"))
    stream = provider.stream(REQUEST)
    assert [e for e in stream if isinstance(e, TextDelta)] == [TextDelta("ok")]
    assert waits == [1.0] and len(sent) == 2


def test_stream_error_event_before_any_event_is_retried():
    overloaded = 'data: {"error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
    provider, sent, waits = echo(httpx.Response(200, content=overloaded.encode()), stream_ok("ok"))
    stream = provider.stream(REQUEST)
    list(stream)
    assert stream.response.content == "ok" and len(sent) == 2


def test_no_retry_after_the_first_event():
    body = sse("partial", done=False) + b'data: {"error": {"type": "overloaded_error"}}\n\n'
    provider, sent, waits = echo(httpx.Response(200, content=body), stream_ok("again"))
    seen = []
    with pytest.raises(OverloadedError):
        for event in provider.stream(REQUEST):
            seen.append(event)
    assert seen == [TextDelta("partial")]
    assert len(sent) == 1 and waits == []


@pytest.mark.parametrize(
    "exc",
    [
        httpx.RemoteProtocolError("peer closed connection without sending complete message body"),
        httpx.ReadError("connection reset"),
        httpx.ReadTimeout("timed out"),
    ],
)
def test_network_error_mid_stream_is_incomplete(exc):
    broken = httpx.Response(200, stream=Broken(sse("partial", done=False), exc))
    provider, sent, waits = echo(broken, stream_ok("again"))
    seen = []
    with pytest.raises(IncompleteStreamError) as info:
        for event in provider.stream(REQUEST):
            seen.append(event)
    assert seen == [TextDelta("partial")]
    assert info.value.provider == "echo" and info.value.retryable
    assert type(exc).__name__ in str(info.value)
    assert len(sent) == 1 and waits == []


def test_stream_ending_early_is_incomplete():
    provider, sent, waits = echo(stream_ok("Hel", done=False))
    seen = []
    with pytest.raises(IncompleteStreamError) as info:
        for event in provider.stream(REQUEST):
            seen.append(event)
    assert seen == [TextDelta("Hel")]
    assert str(info.value) == "echo: stream ended before its terminal event"


def test_empty_stream_is_retried_then_incomplete():
    provider, sent, waits = echo(stream_ok(done=False), stream_ok(done=False), max_retries=1)
    with pytest.raises(IncompleteStreamError):
        list(provider.stream(REQUEST))
    assert len(sent) == 2 and len(waits) == 1


def test_stream_connect_timeout():
    provider, sent, waits = echo(
        httpx.ConnectTimeout("x"), httpx.ConnectTimeout("x"), max_retries=1
    )
    with pytest.raises(ProviderTimeoutError, match="connecting to echo.example"):
        list(provider.stream(REQUEST))
    assert len(sent) == 2


def test_stream_http_error_body_is_read():
    provider, sent, waits = echo(err(401, body={"error": {"message": "bad key"}}))
    with pytest.raises(AuthenticationError, match="bad key"):
        list(provider.stream(REQUEST))


def test_abandoned_stream_closes_the_response():
    closed = []

    class Tracking(httpx.SyncByteStream):
        def __iter__(self):
            yield sse("a", "b")

        def close(self):
            closed.append(True)

    provider, sent, waits = echo(httpx.Response(200, stream=Tracking()))
    events = iter(provider.stream(REQUEST))
    assert next(events) == TextDelta("a")
    events.close()
    assert closed == [True]
