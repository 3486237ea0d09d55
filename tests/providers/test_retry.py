"""Retries (``providers/retry.py``): Retry-After in its forms, hints capped, x-should-retry,
bounded exponential backoff with jitter."""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime, timedelta

import pytest

from django_llmchat.errors import (
    AuthenticationError,
    ProviderError,
    RateLimitError,
)
from django_llmchat.providers import retry
from django_llmchat.providers.base import (
    backoff_delay,
    parse_duration,
    parse_retry_after,
)

from .test_base import KEY, REQUEST, EchoProvider, echo, err, ok


def test_429_with_retry_after_then_success():
    provider, sent, waits = echo(err(429, {"retry-after": "2"}), ok())
    assert provider.complete(REQUEST).content == "hello"
    assert waits == [2.0]
    assert len(sent) == 2


def test_retry_after_ms_wins_over_retry_after():
    provider, sent, waits = echo(err(503, {"retry-after-ms": "1500", "retry-after": "9"}), ok())
    provider.complete(REQUEST)
    assert waits == [1.5]


def test_retry_after_http_date():
    when = email.utils.format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    provider, sent, waits = echo(err(429, {"retry-after": when}), ok())
    provider.complete(REQUEST)
    assert 28.0 <= waits[0] <= 30.0


def test_gemini_retry_delay_in_the_body():
    body = {
        "error": {
            "code": 429,
            "message": "Quota exceeded",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "48s"}],
        }
    }
    provider, sent, waits = echo(err(429, body=body), ok())
    provider.complete(REQUEST)
    assert waits == [48.0]
    provider, sent, waits = echo(err(429, body=body), max_retries=0)
    with pytest.raises(RateLimitError) as info:
        provider.complete(REQUEST)
    assert info.value.retry_after == 48.0


@pytest.mark.parametrize("code, kind", [("429", RateLimitError), ("\u00b2", ProviderError)])
def test_a_mid_stream_error_code_in_other_digits_is_not_a_status(code, kind):
    """``str.isdigit()`` takes ``²``, which ``int()`` refuses."""
    error = EchoProvider(api_key=KEY).error_from_payload({"error": {"message": "x", "code": code}})
    assert type(error) is kind and error.status is None


def test_hints_are_capped_at_max_retry_wait(settings):
    settings.LLMCHAT = {"MAX_RETRY_WAIT": 5.0}
    provider, sent, waits = echo(err(429, {"retry-after": "3600"}), ok())
    provider.complete(REQUEST)
    assert waits == [5.0]


def test_x_should_retry_false_stops_and_true_forces():
    provider, sent, waits = echo(err(503, {"x-should-retry": "false"}), ok())
    with pytest.raises(ProviderError) as info:
        provider.complete(REQUEST)
    assert info.value.status == 503 and info.value.retryable is False
    assert len(sent) == 1 and waits == []

    provider, sent, waits = echo(err(400, {"x-should-retry": "true"}), ok())
    assert provider.complete(REQUEST).content == "hello"
    assert len(sent) == 2


@pytest.mark.parametrize("status, cls", [(400, ProviderError), (401, AuthenticationError)])
def test_no_retry_on_client_errors(status, cls):
    provider, sent, waits = echo(err(status), ok())
    with pytest.raises(cls) as info:
        provider.complete(REQUEST)
    assert info.value.status == status
    assert len(sent) == 1 and waits == []


def test_bounded_retries_with_exponential_backoff_and_jitter():
    provider, sent, waits = echo(*[err(500)] * 4, max_retries=3)
    with pytest.raises(ProviderError) as info:
        provider.complete(REQUEST)
    assert info.value.status == 500 and info.value.retryable
    assert len(sent) == 4
    for wait, nominal in zip(waits, (0.5, 1.0, 2.0), strict=True):
        assert nominal * 0.75 <= wait <= nominal


def test_max_retries_defaults_to_the_setting(settings):
    settings.LLMCHAT = {"MAX_RETRIES": 1}
    provider, sent, waits = echo(err(502), err(502), ok())
    with pytest.raises(ProviderError):
        provider.complete(REQUEST)
    assert len(sent) == 2
    settings.LLMCHAT = {"MAX_RETRIES": 2}
    provider, sent, waits = echo(err(502), err(502), ok())
    assert provider.complete(REQUEST).content == "hello"


def test_retry_after_is_parsed_on_every_error():
    provider, sent, waits = echo(err(429, {"retry-after": "7"}), max_retries=0)
    with pytest.raises(RateLimitError) as info:
        provider.complete(REQUEST)
    assert info.value.retry_after == 7.0
    assert info.value.headers["retry-after"] == "7"


def test_backoff_and_hint_helpers():
    assert backoff_delay(0, rand=lambda: 0.0) == 0.5
    assert backoff_delay(2, rand=lambda: 1.0) == 1.5
    assert backoff_delay(30, rand=lambda: 0.0) == retry.BACKOFF_CAP
    assert parse_duration("48s") == 48.0
    assert parse_duration("1.5s") == 1.5
    assert parse_duration("250ms") == 0.25
    assert parse_duration("soon") is None
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "garbage"}) is None
    assert parse_retry_after({"retry-after-ms": "20"}) == 0.02
