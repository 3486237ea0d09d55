"""``chats/``: the user's chats, their cancel, usage totals and live events; ``runs/``: how
each answer went."""

from __future__ import annotations

import logging
import re

from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from .. import runs
from ..conf import settings
from ..db import dbconn
from ..errors import ArgumentError, RunInProgress
from ..models import Chat, Message, Run
from .base import LLMChatView, interrupt_current
from .chat_filters import CHAT_FILTER_PARAMETERS, filter_chats
from .errors import Conflict
from .idempotency import (
    IDEMPOTENCY_CONFLICT,
    IDEMPOTENCY_PARAMETER,
    IDEMPOTENCY_REUSED,
    Idempotency,
    Replayed,
)
from .pagination import ChatCursorPagination, RunCursorPagination
from .permissions import chats_for
from .responses import CHAT_RULES, ERROR, KEY_REFUSED, SSE_RESPONSE
from .schema import document
from .search import (
    PAGE_PARAMETER,
    SEARCH_PARAMETER,
    ChatSearchSerializer,
    checked_page,
    search_page,
)
from .serializers import (
    BranchSwitchSerializer,
    ChatSerializer,
    MessageSerializer,
    RunSerializer,
    UsageSerializer,
    load_messages,
)
from .sse import EventStreamRenderer, follow_frames, sse_response
from .usage import chat_usage

__all__ = ["ChatViewSet", "EventsUnavailable", "RunViewSet"]

logger = logging.getLogger("django_llmchat.api")


class EventsUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = (
        "Live events need LLMCHAT['EVENTS_URL'] (Redis). Without it, stream a reply inline: "
        "POST to the messages endpoint with 'Accept: text/event-stream'."
    )
    default_code = "events_unavailable"


# -- chats --------------------------------------------------------------------------------
class ChatViewSet(
    LLMChatView,
    mixins.ListModelMixin,
    mixins.CreateModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Chats of the authenticated user (all chats for staff when
    ``LLMCHAT["STAFF_SEES_ALL_CHATS"]``)."""

    serializer_class = ChatSerializer
    pagination_class = ChatCursorPagination
    queryset = Chat.objects.none()  # for the schema; requests use get_queryset()

    def get_queryset(self):
        return chats_for(self.request.user).with_totals().with_tags()

    def filter_queryset(self, queryset):
        # the list's filters (archived hidden by default); a chat is read by id whatever
        return filter_chats(self.request, queryset) if self.action == "list" else queryset

    @document(
        summary="List your chats",
        description="Pinned first, then most recently updated first; archived chats only "
        "with `archived`. With `search`, the chats matching its words, best first, each "
        "with `match` (the filters apply to it too).",
        parameters=[SEARCH_PARAMETER, PAGE_PARAMETER, *CHAT_FILTER_PARAMETERS],
        responses={200: ChatSearchSerializer(many=True), 400: ERROR},
    )
    def list(self, request, *args, **kwargs):
        if "search" in request.query_params:
            # the plain list's paging parameters are checked there too (a search pages
            # with ``page``)
            if request.query_params.get("from") not in (None, "start", "end"):
                raise ValidationError({"from": ["must be 'start' or 'end'"]})
            if "cursor" in request.query_params:
                self.paginator.decode_cursor(request.query_params["cursor"])
            found = self.filter_queryset(self.get_queryset())
            return search_page(self, request, found, request.query_params["search"])
        checked_page(request)  # a page only numbers a search's results, but is checked
        return super().list(request, *args, **kwargs)

    @document(summary="Create a chat", responses={201: ChatSerializer, 400: CHAT_RULES})
    def create(self, request, *args, **kwargs):
        return super().create(request, *args, **kwargs)

    @document(summary="Read a chat", responses={200: ChatSerializer, 404: ERROR})
    def retrieve(self, request, *args, **kwargs):
        return super().retrieve(request, *args, **kwargs)

    @document(summary="Update a chat", responses={200: ChatSerializer, 400: CHAT_RULES, 404: ERROR})
    def update(self, request, *args, **kwargs):
        return super().update(request, *args, **kwargs)

    @document(
        summary="Update some fields of a chat",
        responses={200: ChatSerializer, 400: CHAT_RULES, 404: ERROR},
    )
    def partial_update(self, request, *args, **kwargs):
        return super().partial_update(request, *args, **kwargs)

    @document(summary="Delete a chat", responses={204: None, 404: ERROR, 409: ERROR})
    def destroy(self, request, *args, **kwargs):
        return super().destroy(request, *args, **kwargs)

    def get_serializer_class(self):
        # the list's items carry ``match`` (null without ``search``)
        return ChatSearchSerializer if self.action == "list" else ChatSerializer

    def perform_create(self, serializer):
        serializer.save(user=self.request.user)

    def perform_destroy(self, instance):
        from ..chats.lifecycle import purge_chats

        with transaction.atomic():
            if not runs.hold_if_idle(instance.pk):  # no run can start while this holds
                raise Conflict(
                    "The chat has a run in progress; cancel it (or wait for it to end) first."
                )
            # its attachment files and event stream go too; its usage rows stay (the ledger)
            purge_chats(Chat.objects.filter(pk=instance.pk))

    def perform_update(self, serializer):
        chat: Chat = serializer.instance
        values = dict(serializer.validated_data)
        tags = values.pop("tags", None)
        fields = list(values)
        for name, value in values.items():
            setattr(chat, name, value)
        with transaction.atomic():
            if fields:
                # only the sent columns: a running loop writes status and error meanwhile;
                # archiving, pinning or tagging alone is no activity (updated_at stays)
                stamp = [] if set(fields) <= set(Chat.ORGANISING_FIELDS) else ["updated_at"]
                chat.save(update_fields=[*fields, *stamp])
            if tags is not None:
                chat.set_tags(tags)

    @document(
        summary="Cancel the running run",
        request=None,
        responses={
            202: inline_serializer(
                "CancelAccepted",
                {"status": serializers.CharField(), "cancel_requested": serializers.BooleanField()},
            ),
            400: KEY_REFUSED,
            409: IDEMPOTENCY_CONFLICT,
            422: IDEMPOTENCY_REUSED,
        },
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    def cancel(self, request, pk=None):
        chat = self.get_chat(pk)
        idem = Idempotency.of(request, "cancel", chat, {})
        if idem is None:
            return self._cancel(chat)
        row = idem.earlier()
        if row is not None:
            return idem.replay(self, row)
        try:
            with idem.atomic():  # the key first: a racing retry waits for it, then replays
                response = self._cancel(chat)
                idem.answered(response.status_code, response.data)
                return response
        except Replayed as found:
            return idem.replay(self, found.row)

    def _cancel(self, chat: Chat) -> Response:
        if interrupt_current(chat) is None:
            raise Conflict("The chat has no run to cancel, or its cancel was already asked for.")
        chat.refresh_from_db(fields=["status"])
        return Response(
            {"status": chat.status, "cancel_requested": True}, status=status.HTTP_202_ACCEPTED
        )

    @document(
        summary="Switch the active branch",
        description="Makes the branch through `message` (any message of the chat's tree: "
        "a regenerated reply, an edited prompt, one in the middle) the active path: its "
        "ancestors, itself, then the newest reply each time down to a leaf. The next "
        "message continues it; `GET messages/` lists it. Answers the new path's leaf. "
        "404 when `message` is no message of the chat's tree (unknown, another chat's, a "
        "system message or a prompt still queued), as for an unknown chat; 409 while a run "
        "of the chat is in progress.",
        request=BranchSwitchSerializer,
        responses={200: MessageSerializer, 404: ERROR, 409: ERROR},
    )
    def switch(self, request, pk=None):
        chat = self.get_chat(pk)
        serializer = BranchSwitchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            leaf = runs.switch_to(chat.pk, serializer.validated_data["message"])
        except RunInProgress:
            raise Conflict(
                "The chat has a run in progress; wait for it to end (or cancel it) before "
                "switching branches."
            ) from None
        except ArgumentError as exc:  # no such message in the chat's tree
            raise NotFound(str(exc)) from None
        message = Message.objects.filter(pk=leaf).select_related("parent_tool_call").get()
        load_messages([message])
        return Response(MessageSerializer(message, context=self.get_serializer_context()).data)

    @document(summary="Token and cost totals", responses={200: UsageSerializer})
    def usage(self, request, pk=None):
        chat = self.get_chat(pk)
        return Response(chat_usage(chat))

    @document(
        summary="Follow the chat's runs live (Server-Sent Events)",
        parameters=[
            OpenApiParameter(
                "Last-Event-ID",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="Resume after this event id (sent by EventSource on reconnect).",
            ),
            OpenApiParameter(
                "last_event_id",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                description="The same as the header, for clients that cannot set headers.",
            ),
            OpenApiParameter(
                "follow",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                enum=["run", "all"],
                description="`run` (default): end after the current (or next) run finishes; "
                "`all`: keep following every run until the client disconnects.",
            ),
        ],
        responses={(200, "text/event-stream"): SSE_RESPONSE, 400: ERROR, 503: ERROR},
    )
    def events(self, request, pk=None):
        chat = self.get_chat(pk)
        # an empty value (``Last-Event-ID:``) is no id: from the run in progress
        field, last_id = "Last-Event-ID", (request.headers.get("Last-Event-ID") or "").strip()
        if not last_id:
            field = "last_event_id"
            last_id = (request.query_params.get("last_event_id") or "").strip()
        if not last_id:
            last_id = None
        elif not _valid_event_id(last_id):
            raise ValidationError({field: ["must be an event id such as 1712000000000-0"]})
        scope = request.query_params.get("follow", "run")
        if scope not in ("run", "all"):
            raise ValidationError({"follow": ["must be 'run' or 'all'"]})
        if not settings.EVENTS_URL:
            raise EventsUnavailable()
        if last_id not in (None, "0", "0-0") and not _known_event_id(chat.pk, last_id):
            raise ValidationError({field: ["is not the id of an event of this chat's stream"]})
        frames = follow_frames(
            chat.pk, last_id, until_end=scope == "run", asynchronous=self.is_asgi()
        )
        dbconn.release()  # following waits on Redis, not on the database
        return sse_response(frames)

    def get_renderers(self):
        if getattr(self, "action", None) == "events":
            return [EventStreamRenderer(), JSONRenderer()]
        return super().get_renderers()


_EVENT_ID = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")  # ASCII: ``\d`` is any script's digit


def _valid_event_id(value: str) -> bool:
    """A Redis stream id ``<ms>-<seq>``, each part a 64-bit unsigned int (or ``0``: from
    the start of what the stream holds)."""
    if value == "0":
        return True
    found = _EVENT_ID.fullmatch(value)
    return bool(found) and all(int(p) < 2**64 for p in found.groups())


def _known_event_id(chat_id: int, event_id: str) -> bool:
    """Whether ``event_id`` is an id of the chat's event stream (or older than what the
    stream still holds: resuming from it replays what is left)."""
    from .. import streams

    try:
        return streams.has_id(chat_id, event_id)
    except Exception as exc:
        logger.warning("cannot read the event stream of chat %s: %s", chat_id, exc)
        return True  # the follow itself reports the event store's failure


# -- runs -----------------------------------------------------------------------------------
class RunViewSet(
    LLMChatView, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """The runs of the chats you can see: each answer's status, safe error, attempts,
    steps, tokens and cost."""

    serializer_class = RunSerializer
    pagination_class = RunCursorPagination
    queryset = Run.objects.none()

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Run.objects.none()
        if self.action == "list":  # chats/{id}/runs/: the chat's (404 when not yours)
            return Run.objects.filter(chat=self.get_chat(self.kwargs["pk"])).with_totals()
        return Run.objects.filter(chat__in=chats_for(self.request.user)).with_totals()

    @document(
        summary="List a chat's runs, newest first",
        responses={200: RunSerializer(many=True), 400: ERROR, 404: ERROR},
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @document(summary="Read one run", responses={200: RunSerializer, 404: ERROR})
    def retrieve(self, request, *args, **kwargs):
        return super().retrieve(request, *args, **kwargs)
