"""Publishing a run's events to its chat's stream: now (:func:`publish`) or through this
process's publisher thread, which sends what piled up in one pipelined round trip
(:func:`publish_later`, :func:`flush`). :mod:`django_llmchat.streams` re-exports them."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque

from .conf import settings
from .db._per_process import PerProcess
from .events import StreamEvent
from .streams_redis import EventsUnavailable, _check_breaker, _client, _redis, _trip, stream_key

logger = logging.getLogger("django_llmchat.streams")

_EXPIRY_REFRESH = 30.0


_expiry_set: dict[str, float] = {}  # stream key -> when this process last set its expiry


def _entry(chat_id: int | str, event: StreamEvent) -> tuple[str, dict[str, str]]:
    fields = {
        "type": event.type,
        "data": json.dumps(event.to_dict(), separators=(",", ":"), ensure_ascii=False),
        "ts": f"{time.time():.6f}",
    }
    return stream_key(chat_id), fields


def _add(pipe, key: str, fields: dict[str, str], maxlen: int, ttl: int) -> bool:
    """Queue the ``XADD`` (and the ``EXPIRE`` when due) on ``pipe``; returns whether an
    ``EXPIRE`` was queued."""
    pipe.xadd(key, fields, maxlen=maxlen, approximate=True)
    now = time.monotonic()
    refreshed = _expiry_set.get(key)
    if refreshed is not None and now - refreshed < min(_EXPIRY_REFRESH, ttl / 10):
        return False
    pipe.expire(key, ttl)
    if len(_expiry_set) > 10_000:
        _expiry_set.clear()
    _expiry_set[key] = now
    return True


def publish(chat_id: int | str, event: StreamEvent) -> str | None:
    """Append ``event`` to the chat's stream now; returns the entry id (``None`` when
    ``LLMCHAT["EVENTS_URL"]`` is not set). One round trip: ``XADD`` capped with
    ``MAXLEN ~``, plus an ``EXPIRE`` when this process has not refreshed the stream's
    expiry for a while (every ``EVENTS_TTL / 10`` seconds, 30 s at most)."""
    url = settings.EVENTS_URL
    if not url:
        return None
    _check_breaker(url)
    key, fields = _entry(chat_id, event)
    pipe = _client(url, publishing=True).pipeline(transaction=False)
    _add(pipe, key, fields, int(settings.EVENTS_MAXLEN), int(settings.EVENTS_TTL))
    try:
        return pipe.execute()[0]
    except Exception as exc:
        if isinstance(exc, _redis().RedisError):
            _trip(url, exc)
        raise


def publish_later(chat_id: int | str, event: StreamEvent) -> None:
    """Queue ``event`` for this process's publisher thread, which sends whatever piled up
    in one pipelined round trip: what the worker's tasks use, so 50 streams in one process
    cost a few round trips per tick instead of one per event. Order is kept; :func:`flush`
    waits until everything queued so far is in Redis. Does nothing without
    ``LLMCHAT["EVENTS_URL"]``."""
    url = settings.EVENTS_URL
    if not url:
        return
    key, fields = _entry(chat_id, event)
    _outboxes.get().put((url, key, fields, int(settings.EVENTS_MAXLEN), int(settings.EVENTS_TTL)))


def flush(timeout: float | None = 5.0) -> bool:
    """Wait until the events queued by :func:`publish_later` so far are sent (or dropped
    after a Redis error); returns ``False`` on timeout."""
    box = _outboxes.current()
    if box is None:
        return True
    return box.flush(timeout)


class _Outbox:
    """One thread per process sending queued events in pipelines."""

    LIMIT = 100_000  # events held while Redis is unreachable; older ones are dropped

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.cond = threading.Condition()
        self.items: deque[tuple] = deque()
        self.queued = 0
        self.done = 0
        self.warned = 0.0
        self.thread = threading.Thread(target=self._run, name="llmchat-events", daemon=True)
        self.thread.start()

    def put(self, item: tuple) -> None:
        with self.cond:
            if len(self.items) >= self.LIMIT:
                self.items.popleft()
                self.done += 1
            self.items.append(item)
            self.queued += 1
            if len(self.items) == 1:
                self.cond.notify_all()

    def flush(self, timeout: float | None) -> bool:
        with self.cond:
            target = self.queued
            return self.cond.wait_for(lambda: self.done >= target, timeout)

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.items:
                    self.cond.wait()
                batch = list(self.items)
                self.items.clear()
            try:
                self._send(batch)
            except Exception as exc:
                now = time.monotonic()
                if now - self.warned > 10:
                    self.warned = now
                    logger.warning("could not publish %d live events: %s", len(batch), exc)
            with self.cond:
                self.done += len(batch)
                self.cond.notify_all()

    @staticmethod
    def _send(batch: list[tuple]) -> None:
        by_url: dict[str, list[tuple]] = {}
        for url, *rest in batch:
            by_url.setdefault(url, []).append(rest)
        for url, items in by_url.items():
            try:
                _check_breaker(url)
            except EventsUnavailable:
                continue  # dropped: the breaker is open (its reason was logged)
            pipe = _client(url, publishing=True).pipeline(transaction=False)
            for key, fields, maxlen, ttl in items:
                _add(pipe, key, fields, maxlen, ttl)
            try:
                pipe.execute()
            except Exception as exc:
                if isinstance(exc, _redis().RedisError):
                    _trip(url, exc)
                raise


_outboxes = PerProcess(_Outbox)
