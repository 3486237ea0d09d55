"""What every endpoint shares: :class:`LLMChatView` (authentication, permissions,
throttles, parsing, the chat lookup) and the steps of a request that starts a run:
admitting it, streaming it in the response, answering once per ``Idempotency-Key``."""

from __future__ import annotations

import logging
from typing import Any

from django.core.handlers.asgi import ASGIRequest
from django.http import Http404
from drf_spectacular.openapi import AutoSchema
from rest_framework.exceptions import ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from .. import runs
from ..conf import settings
from ..errors import ChatBusyError, DoubleTextingRejected
from ..models import Chat
from .errors import Conflict, api_exception_handler
from .idempotency import Idempotency, Replayed
from .parsers import StrictJSONParser
from .permissions import ChatAccess, chats_for, default_authenticators, default_throttles
from .sse import EventStreamRenderer, InlineRun, sse_response

__all__ = [
    "FormatNegotiation",
    "LLMChatView",
    "admit",
    "interrupt_current",
    "once",
    "stream_inline",
    "stream_position",
]

logger = logging.getLogger("django_llmchat.api")


class FormatNegotiation(DefaultContentNegotiation):
    """DRF's content negotiation, with ``?format=`` checked: a value that names no
    renderer of the route (an empty one included) is a 400 naming ``format`` and the
    values the route takes, where DRF would ignore an empty one and answer 404 to others."""

    def select_renderer(self, request, renderers, format_suffix=None):
        key = self.settings.URL_FORMAT_OVERRIDE
        if key and not format_suffix and key in request.query_params:
            formats = [renderer.format for renderer in renderers]
            for value in request.query_params.getlist(key):
                if value not in formats:
                    raise ValidationError(
                        {
                            key: [
                                f"{value[:32]!r} is not a format of this route; one of: "
                                f"{', '.join(formats)}"
                            ]
                        }
                    )
        return super().select_renderer(request, renderers, format_suffix)


class LLMChatView(GenericAPIView):
    """Authentication, permission, throttling and parsing shared by every endpoint."""

    schema = AutoSchema()
    content_negotiation_class = FormatNegotiation
    permission_classes = [ChatAccess]
    parser_classes = [StrictJSONParser]
    renderer_classes = [JSONRenderer]
    starts_runs = False  # the ``llmchat_runs`` throttle scope applies
    post_serializer_class: type | None = None
    """The serializer of a POST's body, where it is not ``serializer_class`` (the answer's)."""

    def get_serializer_class(self):
        post = self.post_serializer_class
        if post is not None and self.request is not None and self.request.method == "POST":
            return post
        return super().get_serializer_class()

    asgi = False
    """Whether the request came through ASGI (set by :meth:`initialize_request`)."""

    def initialize_request(self, request, *args, **kwargs):
        # DRF's documented hook, given Django's own request: whether it came through ASGI
        self.asgi = isinstance(request, ASGIRequest)
        return super().initialize_request(request, *args, **kwargs)

    def get_authenticators(self):
        return [cls() for cls in default_authenticators()]

    def get_exception_handler(self):
        return api_exception_handler

    def get_throttles(self):
        return [cls() for cls in default_throttles(runs=self._starts_run())]

    def _starts_run(self) -> bool:
        return self.starts_runs and self.request.method == "POST"

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        # an error answering an event-stream request is still JSON
        if isinstance(response, Response) and isinstance(
            getattr(response, "accepted_renderer", None), EventStreamRenderer
        ):
            response.accepted_renderer = JSONRenderer()
            response.accepted_media_type = "application/json"
        return response

    def get_chat(self, pk: Any) -> Chat:
        chat = chats_for(self.request.user).filter(pk=pk).first()
        if chat is None:
            raise Http404("No such chat.")
        return chat

    def wants_events(self) -> bool:
        return isinstance(getattr(self.request, "accepted_renderer", None), EventStreamRenderer)

    def is_asgi(self) -> bool:
        return self.asgi


def admit(inline: InlineRun) -> InlineRun:
    """Admit an inline run now; a chat that cannot take it is a 409 (a limit's refusal
    is the API's 429)."""
    try:
        return inline.start()
    except DoubleTextingRejected as exc:
        raise rejected(exc) from None
    except runs.RunInProgress:
        raise Conflict(
            "The chat has a run in progress; wait for it to end (or cancel it)."
        ) from None
    except ChatBusyError:
        raise Conflict(
            "The chat's run waits for a decision on its tool calls: approve or deny them "
            "(or cancel the run) first."
        ) from None
    except runs.NothingToRegenerate:
        raise ValidationError({"trigger": ["the chat has no reply to regenerate"]}) from None


def rejected(exc: DoubleTextingRejected) -> Conflict:
    """The 409 of a message refused by the ``reject`` double-texting policy."""
    return Conflict(
        "The chat has a run queued or working and its double-texting policy is 'reject': "
        "send the message when the run has ended (or cancel the run).",
        code="double_texting_rejected",
    )


def stream_inline(view: LLMChatView, chat: Chat, **run: Any):
    """Stream a run in the response (WSGI: a sync iterator; ASGI: an async one). The run
    passes the gate before the response starts: a refusal is a 429 or a 409."""
    inline = InlineRun(chat, asynchronous=view.is_asgi(), **run)
    admit(inline)
    return sse_response(inline.frames())


def once(idem: Idempotency | None, view: LLMChatView, answer, *, stream=None, after=None):
    """``answer()`` once per ``Idempotency-Key``: a retry gets the first outcome (a racing
    one too, once the first stored its key)."""
    if idem is None:
        return answer()
    row = idem.earlier()
    if row is not None:
        return idem.replay(view, row)
    try:
        with idem.admitting(stream=stream, events_after=after):
            return answer()
    except Replayed as found:
        return idem.replay(view, found.row)


def stream_position(chat: Chat) -> str | None:
    """The chat's latest event id before a run is queued: following from it shows that
    run even when it ends before the client connects (``None`` without live events)."""
    if not settings.EVENTS_URL:
        return None
    from .. import streams

    try:
        return streams.last_id(chat.pk)
    except Exception as exc:  # the run goes on without live events
        logger.warning("cannot read the event stream of chat %s: %s", chat.pk, exc)
        return None


def interrupt_current(chat: Chat) -> int | None:
    """Cancel the chat's run current now, and only it: the run's id, or ``None`` when
    the chat has none or its cancel was already asked for (of requests racing, one
    stops it)."""
    current = chat.runs.unfinished().order_by("id").values_list("pk", flat=True).first()
    if current is None or not runs.interrupt(chat.pk, "cancelled", run_id=current):
        return None
    return current
