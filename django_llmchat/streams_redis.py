"""The Redis side of the event streams: the clients (pooled, one per purpose; redis-py's
``RedisCluster`` with ``LLMCHAT["EVENTS_CLUSTER"]``), the key of each chat's stream, and
the breaker that keeps a run from waiting on a broken Redis more than once a period.
:mod:`django_llmchat.streams` is what the rest of the package uses."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from .conf import settings

logger = logging.getLogger("django_llmchat.streams")

# Blocking reads wait up to block_ms on the socket: its timeout must be longer (redis-py 8
# defaults to 5 s, which equals the default block).
SOCKET_TIMEOUT = 60.0


CLIENT_OPTIONS = {
    "decode_responses": True,
    "socket_timeout": SOCKET_TIMEOUT,
    "socket_connect_timeout": 5.0,
}


_clients: dict[Any, Any] = {}


_clients_mutex = threading.Lock()


# After a publish fails (Redis down or hung), publishing is skipped this long: a run
# never waits on a broken Redis more than once per period.
BREAKER_SECONDS = 10.0


_broken_until: dict[str, float] = {}  # Redis URL -> until when its publishes are skipped


_broken_mutex = threading.Lock()


class EventsUnavailable(Exception):
    """Publishing is off for a while: the last publish to Redis failed (its error is
    logged once); the run goes on, the database holds the truth."""


def enabled() -> bool:
    """Whether ``LLMCHAT["EVENTS_URL"]`` is set (events fan out through Redis)."""
    return bool(settings.EVENTS_URL)


def stream_key(chat_id: int | str) -> str:
    """The Redis key of one chat's event stream."""
    return f"{settings.EVENTS_KEY_PREFIX}:chat:{chat_id}:events"


def _redis():
    try:
        import redis
    except ImportError:
        raise ImproperlyConfigured(
            "LLMCHAT['EVENTS_URL'] is set, so live events need the redis package: "
            "pip install 'django-llmchat[redis]' (or unset LLMCHAT['EVENTS_URL'])."
        ) from None
    return redis


def _url() -> str:
    url = settings.EVENTS_URL
    if not url:
        raise ImproperlyConfigured(
            "following events across processes needs LLMCHAT['EVENTS_URL'] "
            "(a Redis URL such as 'redis://127.0.0.1:6379/0')."
        )
    return url


def client():
    """The process's Redis client for ``LLMCHAT["EVENTS_URL"]`` (thread-safe, pooled),
    with the long socket timeout blocking reads need."""
    return _client(_url(), publishing=False)


def _client(url: str, *, publishing: bool, read_timeout: float | None = None):
    """A pooled client; the publishing one times out after
    ``LLMCHAT["EVENTS_PUBLISH_TIMEOUT"]`` seconds, so a hung Redis never stalls a run;
    with ``read_timeout`` (a patient follow's), every command after that many seconds."""
    timeout = float(settings.EVENTS_PUBLISH_TIMEOUT)
    if read_timeout is not None:
        key: Any = (url, "follow", read_timeout)
    else:
        key = (url, timeout) if publishing else url
    with _clients_mutex:
        found = _clients.get(key)
        if found is None:
            found = _clients[key] = _client_class().from_url(
                url, **_options(publishing, read_timeout)
            )
        return found


def _client_class(*, asynchronous: bool = False):
    """redis-py's client class for ``EVENTS_URL``: ``RedisCluster`` with
    ``LLMCHAT["EVENTS_CLUSTER"]``, else ``Redis`` (``redis.asyncio``'s, ``asynchronous``)."""
    redis = _redis()
    if settings.EVENTS_CLUSTER:
        if asynchronous:
            from redis.asyncio.cluster import RedisCluster
        else:
            from redis.cluster import RedisCluster  # type: ignore[assignment]
        return RedisCluster
    return redis.asyncio.Redis if asynchronous else redis.Redis


def _options(
    publishing: bool, read_timeout: float | None, *, asynchronous: bool = False
) -> dict[str, Any]:
    options = dict(CLIENT_OPTIONS)
    if read_timeout is not None:
        # a patient follow asks again itself, a heartbeat apart: no retries inside
        # redis-py (with their backoff, one command could outlast the heartbeat)
        from redis.backoff import NoBackoff

        if asynchronous:
            from redis.asyncio.retry import Retry
        else:
            from redis.retry import Retry  # type: ignore[assignment]
        connect = min(read_timeout, CLIENT_OPTIONS["socket_connect_timeout"])
        options.update(
            socket_timeout=read_timeout, socket_connect_timeout=connect, retry=Retry(NoBackoff(), 0)
        )
    elif publishing:
        timeout = float(settings.EVENTS_PUBLISH_TIMEOUT)
        options.update(socket_timeout=timeout, socket_connect_timeout=timeout)
    return options


def _read_timeout(block_ms: int) -> float:
    """How long a patient follow's command may take: its blocking wait, then
    ``EVENTS_PUBLISH_TIMEOUT`` (what any quick command may take)."""
    return block_ms / 1000 + float(settings.EVENTS_PUBLISH_TIMEOUT)


def _check_breaker(url: str) -> None:
    until = _broken_until.get(url)
    if until is not None and time.monotonic() < until:
        raise EventsUnavailable("live events are off for a while: Redis did not answer")


def _trip(url: str, exc: BaseException) -> None:
    """A publish to ``url`` failed: skip publishing there for :data:`BREAKER_SECONDS`
    (logged once)."""
    with _broken_mutex:
        until = _broken_until.get(url)
        already = until is not None and time.monotonic() < until
        _broken_until[url] = time.monotonic() + BREAKER_SECONDS
    if not already:
        logger.warning(
            "live events are off for %.0f s: publishing to Redis failed (%s: %s); replies "
            "are stored as usual, followers are told the events are unavailable",
            BREAKER_SECONDS,
            type(exc).__name__,
            exc,
        )


def _quick(command):
    """A short command (not a blocking read) on the publishing client: it times out as a
    publish does, and trips or honours the same breaker."""
    url = _url()
    _check_breaker(url)
    try:
        return command(_client(url, publishing=True))
    except Exception as exc:
        if isinstance(exc, _redis().RedisError):
            _trip(url, exc)
        raise


def _reset_breaker() -> None:
    with _broken_mutex:
        _broken_until.clear()
