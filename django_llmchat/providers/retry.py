"""Retry rules: how long to wait before trying a provider call again.

The server's hint comes first (``retry-after-ms``, then ``retry-after`` in seconds or as
an HTTP date, then Gemini's ``RetryInfo.retryDelay`` in the body); without one, bounded
exponential backoff with jitter.
"""

from __future__ import annotations

import email.utils
import json
import random
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from ..errors import ProviderError

BACKOFF_BASE = 0.5
BACKOFF_FACTOR = 2.0
BACKOFF_CAP = 8.0


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
