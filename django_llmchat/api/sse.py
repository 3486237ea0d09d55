"""Server-Sent Events responses: a run streamed inline in the response, and a run
followed from the chat's event stream (Redis) with ``Last-Event-ID`` resume.

Frames are ``event: <type>`` / ``data: <JSON>`` / ``id: <id>``. A run that fails ends
with an ``error`` event carrying a safe message (never a provider's raw error text)
rather than a broken connection.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

from django.db import connections
from django.http import StreamingHttpResponse
from rest_framework.renderers import BaseRenderer

from .. import errors, streams, streams_redis
from ..conf import settings
from ..db import dbconn
from ..events import StreamEvent, to_sse
from ..loop.session import RunSession
from ..models import Chat

__all__ = [
    "EventStreamRenderer",
    "InlineRun",
    "error_payload",
    "follow_frames",
    "frame",
    "sse_response",
]

logger = logging.getLogger("django_llmchat.api")


def heartbeat_ms() -> int:
    """``LLMCHAT["EVENTS_HEARTBEAT"]`` in milliseconds: a follower sends a keep-alive
    comment after this long without an event (each Redis read blocks this long)."""
    return max(1, int(float(settings.EVENTS_HEARTBEAT) * 1000))


def patience() -> float:
    """How long a follower waits for a Redis that does not answer (down or hung), keeping
    its client alive, before it ends with an ``error`` event: the publishers' breaker
    period (:data:`django_llmchat.streams_redis.BREAKER_SECONDS`)."""
    return streams_redis.BREAKER_SECONDS


SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx: do not buffer the stream
}


class EventStreamRenderer(BaseRenderer):
    """Lets content negotiation accept ``text/event-stream``. Streams bypass it; a plain
    payload is rendered as a single ``message`` frame."""

    media_type = "text/event-stream"
    format = "sse"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        if data is None:
            return b""
        return frame("message", data).encode()


def frame(event: str, data: Any, id: str | int | None = None) -> str:
    """One SSE frame with a JSON payload."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=str)
    out = f"event: {event}\ndata: {text}\n"
    if id is not None:
        out += f"id: {id}\n"
    return out + "\n"


def comment(text: str = "keep-alive") -> str:
    return f": {text}\n\n"


def error_payload(exc: BaseException) -> dict[str, Any]:
    """``{"type", "message"}`` for an ``error`` event, safe to show to the user (the
    provider's own error text stays in the logs)."""
    kind, message = errors.safe_error(exc)
    out: dict[str, Any] = {"type": kind, "message": message}
    status = getattr(exc, "status", None)
    if isinstance(exc, errors.ProviderError) and status is not None:
        out["status"] = status
    return out


def sse_response(
    content, status: int = 200, headers: dict[str, str] = SSE_HEADERS
) -> StreamingHttpResponse:
    """A ``text/event-stream`` response streaming ``content``, unbuffered."""
    response = StreamingHttpResponse(content, status=status, content_type="text/event-stream")
    for key, value in headers.items():
        response[key] = value
    return response


class InlineRun:
    """A run streamed in the response itself: the frames of its
    :class:`~django_llmchat.loop.session.RunSession` (``run_started``, the loop's events, an
    ``error`` event if it failed, ``run_finished``). It is the same kind of run a worker
    makes (:mod:`django_llmchat.runs`); with ``LLMCHAT["EVENTS_URL"]`` set each event also
    goes to the chat's Redis Stream and the frames carry the stream's ids, so another tab
    can follow the run on ``events/`` and resume it; without it frames are numbered from 1.

    :meth:`start` stores the prompt with its run through the gate before the response
    begins (so a refusal is an HTTP status: over a limit, a busy chat); without it,
    nothing is stored before the first frame is asked for. A client that disconnects
    before the end does not throw the reply away: the run goes on in a background thread
    and is stored (``LLMCHAT["CANCEL_ON_DISCONNECT"] = True`` cancels it instead, and its
    followers are told); either way every provider attempt keeps its usage row. It
    iterates synchronously (WSGI) or, with ``asynchronous=True``, asynchronously with the
    loop in a worker thread (ASGI). Subclasses encode the events another way
    (:meth:`encode`, :meth:`encode_error`, :meth:`trailer`).
    """

    def __init__(
        self,
        chat: Chat,
        *,
        prompt: str | None = None,
        attachments: list | None = None,
        resume: Any = None,
        regenerate: bool = False,
        asynchronous: bool = False,
        prompt_raw: dict[str, Any] | None = None,
    ):
        self.chat = chat
        self.asynchronous = asynchronous
        self._n = 0
        self._done = False
        publishing = streams.enabled()
        runner = chat.runner()
        runner.prompt_raw = prompt_raw  # kept on the prompt's row (a client's own id)
        self.session = RunSession(
            runner,
            prompt,
            chat._check_prompt_type(prompt, attachments) if resume is None else [],
            regenerate=regenerate,
            resume=resume,
            publish=(lambda event: streams.publish(chat.pk, event)) if publishing else None,
            raise_errors=False,
        )
        self._gen = self._frames()

    # -- the run --------------------------------------------------------------------------
    @property
    def run(self):
        """The run (``None`` before :meth:`start`, or when a guardrail blocked the
        prompt)."""
        return self.session.run

    @property
    def runner(self):
        return self.session.runner

    def start(self) -> InlineRun:
        """Store the prompt (or the regenerate, the resumed run) with its run now, through
        the gate: :class:`~django_llmchat.errors.BudgetExceededError` over a limit,
        :class:`~django_llmchat.errors.ChatBusyError` when the chat cannot take it, and
        nothing stored. Waiting for the run's turn is left to the stream."""
        self.session.admit()
        return self

    def _id(self) -> str | int | None:
        """The frame's id: the Redis stream id the event got, else the next number."""
        if self.session.publish is not None:
            return self.session.last_id
        self._n += 1
        return self._n

    # -- encoding (a subclass speaks another protocol) --------------------------------------
    def encode(self, event: StreamEvent) -> Iterator[str]:
        yield to_sse(event, self._id())

    def encode_error(self, payload: dict[str, Any]) -> Iterator[str]:
        """The run failed: an ``error`` frame before its ``run_finished``."""
        yield frame("error", payload, None if self.session.publish is not None else self._id())

    def trailer(self) -> Iterator[str]:
        return iter(())

    def _frames(self) -> Iterator[str]:
        session = self.session
        for event in session:
            if event is session.finished:
                self._done = True
                if session.error is not None:
                    exc = session.error
                    logger.error("streamed run of chat %s failed", self.chat.pk, exc_info=exc)
                    yield from self.encode_error(error_payload(exc))
            yield from self.encode(event)
        yield from self.trailer()

    def _drain(self) -> None:
        """The client left: finish the run here, in the background."""
        try:
            for _ in self._gen:
                pass
        except Exception:
            logger.exception("the run of chat %s failed after its client left", self.chat.pk)
        finally:
            connections.close_all()  # this thread's connections

    def frames(self):
        """The iterator to give ``StreamingHttpResponse``: Django tells sync from async
        content by the protocol it has, so each gets an object with only one."""
        return _AsyncFrames(self) if self.asynchronous else _SyncFrames(self)

    def close(self) -> None:
        """Called by Django when the response ends (or the client went away)."""
        if self._done:
            return
        self._done = True
        if not self.session.admitted or settings.CANCEL_ON_DISCONNECT:
            self._gen.close()  # nothing began, or cancel: the run ends cancelled
            self.session.close()
            return
        threading.Thread(
            target=self._drain, name=f"llmchat-inline-{self.chat.pk}", daemon=True
        ).start()


class _SyncFrames:
    def __init__(self, run: InlineRun):
        self.run = run

    def __iter__(self):
        return self

    def __next__(self) -> str:
        return next(self.run._gen)

    def close(self) -> None:
        self.run.close()


class _AsyncFrames:
    def __init__(self, run: InlineRun):
        self.run = run
        self._it: Any = None

    def __aiter__(self):
        return self

    async def __anext__(self) -> str:
        from ..loop.aio import stream_in_thread

        if self._it is None:
            self.run._done = True  # the thread below owns the generator from now on
            self._it = stream_in_thread(
                lambda: self.run._gen, drain=not settings.CANCEL_ON_DISCONNECT
            ).__aiter__()
        return await self._it.__anext__()

    def close(self) -> None:
        if self._it is None:
            self.run.close()


# -- following a chat's event stream ------------------------------------------------------
def follow_frames(chat_id: int, last_id: str | None, *, until_end: bool, asynchronous: bool):
    """SSE frames of the chat's event stream after ``last_id``: a comment first (so
    proxies and browsers see the stream open at once), keep-alive comments while idle
    (every ``EVENTS_HEARTBEAT`` seconds, also while Redis fails), an ``error`` event
    naming the cause when the event store fails for good (Redis down or hung for
    :func:`patience` seconds), and the end."""
    options = {
        "last_id": last_id,
        "stop_at_run_end": until_end,
        "heartbeat": True,
        "block_ms": heartbeat_ms(),
        "patience": patience(),
    }
    if asynchronous:

        async def aframes():
            yield comment("connected")
            try:
                async for event_id, event in streams.afollow(chat_id, **options):
                    yield _follow_frame(event_id, event)
            except Exception as exc:
                yield _follow_failure(chat_id, exc)

        return aframes()

    def frames():
        dbconn.release()  # what the request's middleware took back since the view
        yield comment("connected")
        try:
            for event_id, event in streams.follow(chat_id, **options):
                yield _follow_frame(event_id, event)
        except Exception as exc:
            yield _follow_failure(chat_id, exc)

    return frames()


def _follow_frame(event_id, event) -> str:
    if event is None:  # nothing for a while: keep the connection alive
        return comment()
    return to_sse(event, event_id)


def unavailable_message(exc: BaseException) -> str:
    """What a follower is told when following failed: the cause when Redis did not
    answer (:class:`~django_llmchat.streams.FollowFailed`), else no detail."""
    if isinstance(exc, streams.FollowFailed):
        return f"The event stream is unavailable: {exc.cause}."
    return "The event stream is unavailable."


def _follow_failure(chat_id: int, exc: BaseException) -> str:
    if isinstance(exc, streams.FollowFailed):
        logger.warning("following the events of chat %s ended: %s", chat_id, exc.__cause__)
    else:
        logger.exception("following the events of chat %s failed", chat_id, exc_info=exc)
    return frame("error", {"type": "events_unavailable", "message": unavailable_message(exc)})
