"""The Vercel AI SDK's UI message stream protocol (v1), as the ``ai`` npm package speaks it:
``POST ui/chat`` takes the body of its ``DefaultChatTransport`` and answers with UI
message chunks; ``GET ui/chat/{id}/stream`` resumes the run in progress (``204`` when
none is). The views are in :mod:`.views`.

This module is the stream on the wire: ``data:`` frames, the response, a run streamed in
it (:class:`UIRun`) and a run followed from the chat's event stream. The events become
chunks in :class:`~.stream.UIMessageStream` (the chunk types: :mod:`.chunks`); what
a request carries is read in :mod:`.requests`, the chats and calls it names are found
in :mod:`.chats`. The server's transcript is the truth: of the messages a client sends
only the new user message (or its answers to tool approvals) is read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

from django.http import HttpResponse, StreamingHttpResponse

from ... import streams
from ...conf import settings
from ...db import dbconn
from ...events import StreamEvent
from ...models import Chat, Run
from ..sse import SSE_HEADERS, InlineRun, heartbeat_ms, patience, sse_response, unavailable_message
from .chats import call_for, chat_for, decide_all
from .paths import reply_branch
from .requests import UIChatSerializer, UIMessageSerializer, approvals_of, prompt_of

# ui_messages reads the stream's three helpers from here
from .stream import UIMessageStream, _error_text, _output, _usd_sum  # noqa: F401

__all__ = [
    "DONE",
    "UI_STREAM_HEADERS",
    "UIChatSerializer",
    "UIMessageSerializer",
    "UIMessageStream",
    "UIRun",
    "approvals_of",
    "call_for",
    "can_resume",
    "chat_for",
    "chunk",
    "decide_all",
    "follow_chunks",
    "no_stream",
    "prompt_of",
    "ui_response",
]

logger = logging.getLogger("django_llmchat.api")

UI_STREAM_HEADERS = {**SSE_HEADERS, "x-vercel-ai-ui-message-stream": "v1"}
DONE = "data: [DONE]\n\n"


def chunk(data: dict[str, Any]) -> str:
    """One SSE frame of the protocol: ``data: <JSON>`` (no event name, no id)."""
    return f"data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"


# -- the stream in the response -------------------------------------------------------------
class UIRun(InlineRun):
    """A run streamed in the response as UI message chunks (the run itself is an
    :class:`InlineRun`: stored as it goes, published to the chat's event stream when
    ``EVENTS_URL`` is set, finished in the background when the client leaves)."""

    def __init__(self, chat: Chat, *, ui: UIMessageStream, **kwargs: Any):
        self.ui = ui
        super().__init__(chat, **kwargs)

    def encode(self, event: StreamEvent) -> Iterator[str]:
        for item in self.ui.feed(event):
            yield chunk(item)

    def encode_error(self, payload: dict[str, Any]) -> Iterator[str]:
        for item in self.ui.error(payload["message"]):
            yield chunk(item)

    def trailer(self) -> Iterator[str]:
        yield DONE


def ui_response(content, status: int = 200) -> StreamingHttpResponse:
    return sse_response(content, status, UI_STREAM_HEADERS)


def no_stream() -> HttpResponse:
    """``204``: no run to resume (the transport then leaves the chat as it is)."""
    return HttpResponse(status=204)


# -- following a run from the chat's event stream ----------------------------------------------
def _live(chat_id: int) -> bool:
    """Whether the chat has a run queued or running (the connection given back after:
    a follower waits on Redis)."""
    try:
        return Run.objects.filter(chat_id=chat_id, status__in=(Run.QUEUED, Run.RUNNING)).exists()
    finally:
        dbconn.release()


def follow_chunks(chat: Chat, *, asynchronous: bool):
    """The run in progress, from its start, as UI message chunks; ends after the run (or
    when no run is left to wait for)."""
    ui = UIMessageStream(
        chat_id=chat.pk, finish_metadata=lambda event: reply_branch(chat.pk, event.run_id)
    )
    options = {
        "last_id": None,
        "stop_at_run_end": True,
        "heartbeat": True,
        "block_ms": min(1000, heartbeat_ms()),  # and whether a run is still live
        "patience": patience(),
    }

    def frame(event: Any) -> str:
        """The frames of a followed event, a keep-alive for a heartbeat."""
        if event is not None:
            return "".join(chunk(item) for item in ui.feed(event))
        return ": keep-alive\n\n"

    def failed(exc: Exception) -> str:
        logger.exception("following chat %s failed", chat.pk, exc_info=exc)
        return "".join(chunk(i) for i in ui.error(unavailable_message(exc)))

    if asynchronous:
        from asgiref.sync import sync_to_async

        async def aframes():
            try:
                async for _, event in streams.afollow(chat.pk, **options):
                    if event is None and not await sync_to_async(_live)(chat.pk):
                        break
                    yield frame(event)
            except Exception as exc:
                yield failed(exc)
            yield DONE

        return aframes()

    def frames():
        try:
            for _, event in streams.follow(chat.pk, **options):
                if event is None and not _live(chat.pk):
                    break
                yield frame(event)
        except Exception as exc:
            yield failed(exc)
        yield DONE

    return frames()


def can_resume(chat: Chat) -> bool:
    return bool(settings.EVENTS_URL) and _live(chat.pk)
