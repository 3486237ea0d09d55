"""Live events across processes: one Redis Stream per chat.

The task that runs a chat publishes every event of the run (``RunStarted`` first,
``RunFinished`` last) with :func:`publish_later` (or :func:`publish`); any process follows
them with :func:`follow` (or :func:`afollow` in ASGI views) and resumes after the last id
it saw, which is what an SSE client sends back as ``Last-Event-ID``.

Streams live under ``<EVENTS_KEY_PREFIX>:chat:<id>:events``, are capped near
``LLMCHAT["EVENTS_MAXLEN"]`` entries and expire ``LLMCHAT["EVENTS_TTL"]`` seconds after
their last event. Without ``LLMCHAT["EVENTS_URL"]``, publishing does nothing.

Every command names one chat's key and no other (pipelines are sent without ``MULTI``;
erasing chats deletes their streams one ``DEL`` each), so the streams can live on a Redis
Cluster: ``LLMCHAT["EVENTS_CLUSTER"] = True`` makes the clients redis-py's
``RedisCluster`` on the node ``EVENTS_URL`` names.

Each entry has three fields: ``type`` (the SSE event name), ``data`` (the ``to_dict()``
JSON) and ``ts`` (the publisher's clock, seconds since the epoch).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from .events import RunFinished, StreamEvent, event_from_dict
from .streams_publish import flush as flush
from .streams_publish import publish as publish
from .streams_publish import publish_later as publish_later
from .streams_redis import CLIENT_OPTIONS as CLIENT_OPTIONS
from .streams_redis import SOCKET_TIMEOUT as SOCKET_TIMEOUT
from .streams_redis import EventsUnavailable as EventsUnavailable
from .streams_redis import _client, _options, _quick, _read_timeout, _url
from .streams_redis import _client_class as _client_class
from .streams_redis import _redis as _redis
from .streams_redis import _reset_breaker as _reset_breaker
from .streams_redis import client as client
from .streams_redis import enabled as enabled
from .streams_redis import stream_key as stream_key

logger = logging.getLogger("django_llmchat.streams")

__all__ = [
    "FollowFailed",
    "afollow",
    "client",
    "decode",
    "delete",
    "enabled",
    "flush",
    "follow",
    "has_id",
    "last_id",
    "publish",
    "publish_later",
    "stream_key",
]

DEFAULT_BLOCK_MS = 5000
_SCAN_PAGE = 500
_READ_COUNT = 200


class FollowFailed(Exception):
    """A patient follow gave up: Redis did not answer, or could not be reached, for its
    ``patience`` seconds. ``cause`` says which, in words safe to show a user (no address,
    no Redis error text)."""

    def __init__(self, cause: str):
        self.cause = cause
        super().__init__(cause)


def delete(chat_ids) -> int:
    """Delete the event streams of ``chat_ids``; returns how many existed. One ``DEL`` per
    stream, pipelined without ``MULTI`` (a round trip per 500 chats): no command spans two
    chats, as a Redis Cluster requires."""
    removed = 0
    redis_client = client()
    chat_ids = list(chat_ids)
    for start in range(0, len(chat_ids), _SCAN_PAGE):
        pipe = redis_client.pipeline(transaction=False)
        for chat_id in chat_ids[start : start + _SCAN_PAGE]:
            pipe.delete(stream_key(chat_id))
        removed += sum(pipe.execute())
    return removed


def last_id(chat_id: int | str) -> str:
    """The id of the chat's latest event (``"0-0"`` when there is none): follow from it to
    see only what comes next, e.g. read it before ``ask_later`` to follow that run."""
    entries = _quick(lambda c: c.xrevrange(stream_key(chat_id), "+", "-", count=1))
    return entries[0][0] if entries else "0-0"


def has_id(chat_id: int | str, event_id: str) -> bool:
    """Whether ``event_id`` is the id of an event in the chat's stream, or older than the
    oldest event the stream still holds (trimmed: resuming from it replays what is left),
    or the stream is empty (expired)."""
    key = stream_key(chat_id)
    if _quick(lambda c: c.xrange(key, event_id, event_id, count=1)):
        return True
    oldest = _quick(lambda c: c.xrange(key, "-", "+", count=1))
    if not oldest:
        return True  # an expired (or never used) stream: its old ids replay nothing
    return _id_tuple(event_id) < _id_tuple(oldest[0][0])


def _id_tuple(event_id: str) -> tuple[int, int]:
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


def decode(fields: dict[str, str]) -> StreamEvent | None:
    """The event of one stream entry (``None`` for a type this version does not know)."""
    try:
        return event_from_dict(fields["type"], json.loads(fields["data"]))
    except (KeyError, ValueError, TypeError) as exc:
        logger.debug("skipping an unreadable stream entry: %s", exc)
        return None


def _is_run_end(event: StreamEvent | None) -> bool:
    return isinstance(event, RunFinished) and event.status != "retrying"


def _run_start_cursor(page) -> str | None:
    """Right after the latest final ``RunFinished`` in ``page`` (newest first), if any."""
    for entry_id, fields in page:
        if fields.get("type") == "run_finished" and _is_run_end(decode(fields)):
            return entry_id
    return None


def _check_block(block_ms: int) -> int:
    if block_ms < 1:
        raise ValueError("block_ms must be at least 1 (Redis reads 0 as 'block forever')")
    if block_ms >= SOCKET_TIMEOUT * 1000:
        raise ValueError(
            f"block_ms must be below {int(SOCKET_TIMEOUT * 1000)} (the socket timeout)"
        )
    return int(block_ms)


class _Failed:
    """A command's failure, sent back into a patient follow's protocol."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


class _Patience:
    """How long a follow waits for a failing Redis, and when it last answered."""

    def __init__(self, seconds: float, interval: float, heartbeat: bool):
        self.seconds = seconds
        self.interval = interval  # between two tries (a heartbeat's)
        self.heartbeat = heartbeat
        # when Redis last answered: from the first command asked (not from here: setting
        # up the follow, a first import of the client, is no wait for Redis)
        self.answered: float | None = None
        self.deadline: float | None = None  # the follow's own ``timeout``, once it runs


def _cause(exc: BaseException, seconds: float) -> str:
    if isinstance(exc, (TimeoutError, _redis().TimeoutError)):
        return f"Redis did not answer for {seconds:g} s"
    return f"Redis cannot be reached (for {seconds:g} s)"


def _ask(patience: _Patience | None, method: str, args: tuple, kwargs: dict):
    """One Redis command of the protocol: its answer. A patient follow asks again while
    Redis fails (a heartbeat each time, a heartbeat's interval apart) until Redis has
    not answered for ``patience.seconds``: :class:`FollowFailed`."""
    while True:
        asked = time.monotonic()
        if patience is not None and patience.answered is None:
            patience.answered = asked
        answer = yield (method, args, kwargs)
        if not isinstance(answer, _Failed):
            if patience is not None:
                patience.answered = time.monotonic()
            return answer
        if patience is None:  # pragma: no cover - the driver raises at once then
            raise answer.exc
        now = time.monotonic()
        if patience.deadline is not None and now >= patience.deadline:
            return None  # the follow's time is up: it ends as a quiet one does
        if now - patience.answered >= patience.seconds:
            raise FollowFailed(_cause(answer.exc, patience.seconds)) from answer.exc
        if patience.heartbeat:
            yield ("emit", (None, None), None)
        ends = patience.answered + patience.seconds
        if patience.deadline is not None:
            ends = min(ends, patience.deadline)
        pause = min(patience.interval - (now - asked), ends - now)
        if pause > 0:
            yield ("sleep", (pause,), None)


def _follow_protocol(
    key: str,
    last_id: str | None,
    block_ms: int,
    stop_at_run_end: bool,
    timeout: float | None,
    heartbeat: bool,
    patience: _Patience | None = None,
):
    """Following a stream, without I/O: a generator of the Redis commands to run, each
    ``(method, args, kwargs)`` and sent its answer (a :class:`_Failed` when it failed, in a
    patient follow), of ``("sleep", (seconds,), None)`` and of ``("emit", item)`` for each
    item to hand out. :func:`follow` and :func:`afollow` only run the commands."""
    if last_id is None:  # the start of the run in progress: scan back, newest first
        cursor, upper = "0-0", "+"
        while True:
            page = yield from _ask(patience, "xrevrange", (key, upper, "-"), {"count": _SCAN_PAGE})
            found = _run_start_cursor(page or [])
            if found is not None or len(page or []) < _SCAN_PAGE:
                cursor = found or "0-0"
                break
            upper = "(" + page[-1][0]
    elif last_id == "$":
        entries = yield from _ask(patience, "xrevrange", (key, "+", "-"), {"count": 1})
        cursor = entries[0][0] if entries else "0-0"
    else:
        cursor = last_id
    deadline = None if timeout is None else time.monotonic() + timeout
    if patience is not None:
        patience.deadline = deadline
    while True:
        block = block_ms
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            block = max(1, min(block, int(left * 1000)))
        response = yield from _ask(
            patience, "xread", ({key: cursor},), {"count": _READ_COUNT, "block": block}
        )
        if not response:
            if heartbeat:
                yield ("emit", (None, None), None)
            continue
        for entry_id, fields in response[0][1]:
            cursor = entry_id
            event = decode(fields)
            if event is None:
                continue
            yield ("emit", (entry_id, event), None)
            if stop_at_run_end and _is_run_end(event):
                return


class _Following:
    """The commands of :func:`_follow_protocol` for a chat, to iterate: the driver sets
    ``answer`` to the result of each Redis command before taking the next (an ``emit``
    or a ``sleep`` needs none)."""

    def __init__(
        self, chat_id, last_id, block_ms, stop_at_run_end, timeout, heartbeat, patience=None
    ) -> None:
        block_ms, key = _check_block(block_ms), stream_key(chat_id)
        self.block_ms = block_ms
        self.patient = patience is not None
        waiting = None if patience is None else _Patience(patience, block_ms / 1000, heartbeat)
        self.steps = _follow_protocol(
            key, last_id, block_ms, stop_at_run_end, timeout, heartbeat, waiting
        )
        self.answer: Any = None
        self.failures = (_redis().ConnectionError, _redis().TimeoutError, TimeoutError)

    def __iter__(self):
        while True:
            answer, self.answer = self.answer, None
            try:
                yield self.steps.send(answer)
            except StopIteration:
                return

    def failed(self, exc: BaseException) -> None:
        """The command failed: a patient follow is told, any other raises."""
        if not self.patient or not isinstance(exc, self.failures):
            raise exc
        self.answer = _Failed(exc)


def follow(
    chat_id: int | str,
    last_id: str | None = None,
    *,
    block_ms: int = DEFAULT_BLOCK_MS,
    stop_at_run_end: bool = True,
    timeout: float | None = None,
    heartbeat: bool = False,
    patience: float | None = None,
) -> Iterator[tuple[str | None, StreamEvent | None]]:
    """Yield ``(entry_id, event)`` for the chat's events after ``last_id``.

    ``last_id`` is the id of the last event already seen (an SSE ``Last-Event-ID``);
    ``"0"`` replays everything retained, ``"$"`` starts with the next event, and ``None``
    starts at the beginning of the run in progress (or waits for the next run when none
    is). With ``stop_at_run_end`` the iterator ends after the run's ``RunFinished`` (one
    with status ``"retrying"`` is followed by the retry and does not end it). ``timeout``
    (seconds) bounds the whole follow; ``heartbeat=True`` yields ``(None, None)`` after each
    ``block_ms`` without an event, so an SSE view can write a keep-alive comment.

    ``patience`` (seconds): a Redis that fails (down, or hung: a command gets
    ``block_ms`` plus ``LLMCHAT["EVENTS_PUBLISH_TIMEOUT"]`` to answer) is asked again a
    ``block_ms`` apart, a heartbeat each time, until it has not answered for that long:
    then :class:`FollowFailed`. Without it, a Redis error is raised at once.
    """
    steps = _Following(chat_id, last_id, block_ms, stop_at_run_end, timeout, heartbeat, patience)
    if patience is None:
        redis_client = client()
    else:
        redis_client = _client(_url(), publishing=False, read_timeout=_read_timeout(steps.block_ms))
    for method, args, kwargs in steps:
        if method == "emit":
            yield args
        elif method == "sleep":
            time.sleep(*args)
        else:
            try:
                steps.answer = getattr(redis_client, method)(*args, **kwargs)
            except Exception as exc:
                steps.failed(exc)


async def afollow(
    chat_id: int | str,
    last_id: str | None = None,
    *,
    block_ms: int = DEFAULT_BLOCK_MS,
    stop_at_run_end: bool = True,
    timeout: float | None = None,
    heartbeat: bool = False,
    patience: float | None = None,
) -> AsyncIterator[tuple[str | None, StreamEvent | None]]:
    """Async twin of :func:`follow` (``redis.asyncio``), for ASGI views."""
    import asyncio

    steps = _Following(chat_id, last_id, block_ms, stop_at_run_end, timeout, heartbeat, patience)
    read_timeout = None if patience is None else _read_timeout(steps.block_ms)
    options = _options(False, read_timeout, asynchronous=True)
    redis_client = _client_class(asynchronous=True).from_url(_url(), **options)
    try:
        for method, args, kwargs in steps:
            if method == "emit":
                yield args
            elif method == "sleep":
                await asyncio.sleep(*args)
            else:
                try:
                    steps.answer = await getattr(redis_client, method)(*args, **kwargs)
                except Exception as exc:
                    steps.failed(exc)
    finally:
        await redis_client.aclose()
