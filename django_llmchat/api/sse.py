"""Server-Sent Events responses: a run streamed inline in the response, and a run
followed from the chat's event stream (Redis) with ``Last-Event-ID`` resume.

Frames are ``event: <type>`` / ``data: <JSON>`` / ``id: <id>``. A run that fails ends
with an ``error`` event carrying a safe message (never a provider's raw error text)
rather than a broken connection.
"""

from __future__ import annotations

import inspect
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.http import StreamingHttpResponse
from rest_framework.renderers import BaseRenderer

from .. import errors
from ..events import RunFinished, RunStarted, StreamEvent, to_sse
from ..models import Chat, Message

__all__ = [
    "EventStreamRenderer",
    "InlineRun",
    "error_payload",
    "follow_frames",
    "frame",
    "sse_response",
]

logger = logging.getLogger("django_llmchat.api")

# Keep-alive comment after this long without an event; below redis-py's default socket
# timeout (5 s), which a longer blocking read would hit.
FOLLOW_BLOCK_MS = 3000

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


# Safe messages, most specific first: the provider's own error text stays in the logs
# and in Chat.error, it is not sent to browsers.
_SAFE_ERRORS: tuple[tuple[type[BaseException], str, str], ...] = (
    (errors.AuthenticationError, "authentication_error", "The provider rejected the credentials."),
    (errors.RateLimitError, "rate_limit", "The provider is rate limiting requests; retry later."),
    (
        errors.ContextLengthExceededError,
        "context_length_exceeded",
        "The conversation is too long for the model.",
    ),
    (errors.OverloadedError, "overloaded", "The provider is overloaded; retry later."),
    (errors.ProviderTimeoutError, "timeout", "The provider did not answer in time."),
    (
        errors.IncompleteStreamError,
        "incomplete_stream",
        "The provider's stream ended early; retry to continue.",
    ),
    (errors.ProviderError, "provider_error", "The provider returned an error."),
    (
        errors.StructuredOutputError,
        "structured_output_error",
        "The reply was not valid JSON for the chat's schema.",
    ),
    (errors.ConfigurationError, "configuration_error", "The provider is not configured."),
    (ImproperlyConfigured, "configuration_error", "The provider is not configured."),
    (errors.UnsupportedFeatureError, "unsupported", ""),
    (errors.ArgumentError, "invalid", ""),
)


def error_payload(exc: BaseException) -> dict[str, Any]:
    """``{"type", "message"}`` for an ``error`` event, safe to show to the user."""
    for cls, kind, message in _SAFE_ERRORS:
        if isinstance(exc, cls):
            # our own messages (unsupported feature, bad argument) name no secret
            text = message or str(exc)[:500]
            out: dict[str, Any] = {"type": kind, "message": text}
            status = getattr(exc, "status", None)
            if isinstance(exc, errors.ProviderError) and status is not None:
                out["status"] = status
            return out
    return {"type": "internal_error", "message": "The reply failed."}


def sse_response(content, status: int = 200) -> StreamingHttpResponse:
    response = StreamingHttpResponse(content, status=status, content_type="text/event-stream")
    for key, value in SSE_HEADERS.items():
        response[key] = value
    return response


class InlineRun:
    """A run streamed in the response itself, its frames numbered from 1: ``run_started``,
    the loop's events, then ``run_finished`` (after an ``error`` event if it failed).

    ``start`` is called (in the thread that iterates) to begin the run and return its
    events; ``release`` undoes the caller's claim on the chat when the loop never took
    it over (a blocked prompt, a failure to start, a client gone before the first byte).
    It iterates synchronously (WSGI) or, with ``asynchronous=True``, asynchronously with
    the loop in a worker thread (ASGI).
    """

    STATUSES = {"idle": "completed", "interrupted": "interrupted", "blocked": "blocked"}

    def __init__(
        self,
        chat: Chat,
        start: Callable[[], Any],
        *,
        release: Callable[[], None],
        asynchronous: bool = False,
    ):
        self.chat = chat
        self.run_id = uuid.uuid4().hex
        self._start = start
        self._release = release
        self._begun = False
        self._owned = False  # the loop took over the chat's status
        self._released = False
        self._error: dict[str, Any] | None = None
        self.asynchronous = asynchronous
        self._frames: Any = self._aframes() if asynchronous else self._sframes()

    # -- driving the run ------------------------------------------------------------------
    def _open(self) -> Iterator[StreamEvent]:
        try:
            events = self._start()
        except BaseException:
            self._release_once()
            raise
        # a generator is the loop: its own ``finally`` writes the chat's final status
        self._owned = inspect.isgenerator(events)
        prompt = (
            Message.objects.filter(chat_id=self.chat.pk, role="user")
            .order_by("-created_at", "-id")
            .values_list("pk", flat=True)
            .first()
        )
        return self._chain(RunStarted(run_id=self.run_id, message_id=prompt), events)

    @staticmethod
    def _chain(first: StreamEvent, events: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
        yield first
        yield from events

    def _release_once(self) -> None:
        if not self._released and not self._owned:
            self._released = True
            self._release()

    def _failure(self, exc: BaseException, n: int) -> str:
        logger.exception("streamed run of chat %s failed", self.chat.pk, exc_info=exc)
        self._error = error_payload(exc)
        return frame("error", self._error, n)

    def _finished(self) -> RunFinished:
        status = Chat.objects.filter(pk=self.chat.pk).values_list("status", flat=True).first()
        if self._error is not None:
            return RunFinished(self.run_id, "failed", self._error["message"])
        return RunFinished(self.run_id, self.STATUSES.get(status or "", status or "completed"))

    def _sframes(self) -> Iterator[str]:
        n = 0
        events = None
        try:
            events = self._open()
            for event in events:
                n += 1
                yield to_sse(event, n)
        except Exception as exc:
            n += 1
            yield self._failure(exc, n)
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()
            self._release_once()
        yield to_sse(self._finished(), n + 1)

    async def _aframes(self) -> AsyncIterator[str]:
        from ..aio import stream_in_thread

        n = 0
        try:
            async for event in stream_in_thread(self._open):
                n += 1
                yield to_sse(event, n)
        except Exception as exc:
            n += 1
            yield self._failure(exc, n)
        finally:
            if not self._released and not self._owned:
                await sync_to_async(self._release_once)()
        finished = await sync_to_async(self._finished)()
        yield to_sse(finished, n + 1)

    def frames(self):
        """The iterator to give ``StreamingHttpResponse``: Django tells sync from async
        content by the protocol it has, so each gets an object with only one."""
        return _AsyncFrames(self) if self.asynchronous else _SyncFrames(self)

    def close(self) -> None:
        """Called by Django when the response ends (or the client went away)."""
        if not self._begun:
            self._release_once()
        close = getattr(self._frames, "close", None)
        if close is not None:
            close()


class _SyncFrames:
    def __init__(self, run: InlineRun):
        self.run = run

    def __iter__(self):
        return self

    def __next__(self) -> str:
        self.run._begun = True
        return next(self.run._frames)

    def close(self) -> None:
        self.run.close()


class _AsyncFrames:
    def __init__(self, run: InlineRun):
        self.run = run

    def __aiter__(self):
        return self

    async def __anext__(self) -> str:
        self.run._begun = True
        return await self.run._frames.__anext__()

    def close(self) -> None:
        self.run.close()


# -- following a chat's event stream ------------------------------------------------------
def follow_frames(chat_id: int, last_id: str | None, *, until_end: bool, asynchronous: bool):
    """SSE frames of the chat's event stream after ``last_id``: a comment first (so
    proxies and browsers see the stream open at once), keep-alive comments while idle,
    an ``error`` event if the event store fails."""
    from .. import streams

    options = {
        "last_id": last_id,
        "stop_at_run_end": until_end,
        "heartbeat": True,
        "block_ms": FOLLOW_BLOCK_MS,
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


def _follow_failure(chat_id: int, exc: BaseException) -> str:
    logger.exception("following the events of chat %s failed", chat_id, exc_info=exc)
    return frame(
        "error", {"type": "events_unavailable", "message": "The event stream is unavailable."}
    )
