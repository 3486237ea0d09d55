"""API views. They stay thin: chats are reached through :func:`chats_for` (others answer
404), runs are started with ``Chat.ask_later`` / ``Chat.stream``, live events come from
``django_llmchat.streams``."""

from __future__ import annotations

import io
import logging
import re
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import RequestDataTooBig
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    inline_serializer,
)
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import (
    APIException,
    ParseError,
    UnsupportedMediaType,
    ValidationError,
)
from rest_framework.generics import GenericAPIView
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from .. import runs
from ..conf import settings
from ..errors import ChatBusyError
from ..models import Chat, LLMModel, Message, Run, ToolCall
from ..transcript import known_relations
from . import ui, ui_messages
from .errors import Conflict, api_exception_handler
from .filters import CAPABILITY_PATTERN, LLMModelFilter
from .idempotency import (
    IDEMPOTENCY_CONFLICT,
    IDEMPOTENCY_PARAMETER,
    IDEMPOTENCY_REUSED,
    Idempotency,
    Replayed,
)
from .pagination import (
    ChatCursorPagination,
    MessageCursorPagination,
    ModelPagination,
    RunCursorPagination,
)
from .permissions import (
    ChatAccess,
    TokenAddressThrottle,
    TokenUsernameThrottle,
    chats_for,
    default_authenticators,
    default_throttles,
)
from .schema import SCHEMA_SETTINGS, document
from .serializers import (
    ChatSerializer,
    LLMModelSerializer,
    MessageAcceptedSerializer,
    MessageContentSerializer,
    MessageCreateSerializer,
    MessageSerializer,
    RunSerializer,
    UsageSerializer,
    load_messages,
)
from .sse import EventStreamRenderer, InlineRun, follow_frames, sse_response
from .usage import chat_usage

__all__ = [
    "ChatViewSet",
    "LLMModelViewSet",
    "MessageListCreateView",
    "RunViewSet",
    "SchemaRedocView",
    "SchemaView",
    "SchemaSwaggerView",
    "TokenView",
    "ToolCallDecisionView",
    "UIChatMessagesView",
    "UIChatStreamView",
    "UIChatView",
]

logger = logging.getLogger("django_llmchat.api")

_EVENT_ID = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")  # ASCII: ``\d`` is any script's digit


def _valid_event_id(value: str) -> bool:
    """A Redis stream id ``<ms>-<seq>``, each part a 64-bit unsigned int (or ``0``: from
    the start of what the stream holds)."""
    if value == "0":
        return True
    found = _EVENT_ID.fullmatch(value)
    return bool(found) and all(int(p) < 2**64 for p in found.groups())


# -- plumbing -------------------------------------------------------------------------------
_UTF8 = ("utf-8", "utf8")


def _require_utf8(parser_context: dict | None) -> None:
    """A body whose ``Content-Type`` declares a charset other than UTF-8 is a 415 naming
    it: JSON is UTF-8 (RFC 8259), and Django would decode form fields in a charset it
    knows (``latin-1``) and ignore one it does not (``bogus``)."""
    request = (parser_context or {}).get("request")
    charset = request.content_params.get("charset") if request is not None else None
    if charset is not None and charset.lower() not in _UTF8:
        raise UnsupportedMediaType(
            request.content_type,
            detail=f"Unsupported charset {charset[:40]!r} in request: send the body as "
            "UTF-8 (charset=utf-8, or no charset).",
        )


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, plus: a charset other than UTF-8 is a 415; absurd nesting is a
    400, not a 500; a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is a 413."""

    def parse(self, stream, media_type=None, parser_context=None):
        _require_utf8(parser_context)
        limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and stream is not None:
            request = (parser_context or {}).get("request")
            length = request.META.get("CONTENT_LENGTH") if request is not None else None
            try:
                too_big = int(length or 0) > limit
            except ValueError:
                too_big = False
            body = stream.read(limit + 1)
            if too_big or len(body) > limit:
                raise RequestDataTooBig("request body over DATA_UPLOAD_MAX_MEMORY_SIZE")
            stream = io.BytesIO(body)
        try:
            return super().parse(stream, media_type, parser_context)
        except LookupError:
            raise ParseError("JSON parse error - unknown charset") from None
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None


class StrictMultiPartParser(MultiPartParser):
    """DRF's multipart parser, plus: a charset other than UTF-8 is a 415."""

    def parse(self, stream, media_type=None, parser_context=None):
        _require_utf8(parser_context)
        return super().parse(stream, media_type, parser_context)


class EventsUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = (
        "Live events need LLMCHAT['EVENTS_URL'] (Redis). Without it, stream a reply inline: "
        "POST to the messages endpoint with 'Accept: text/event-stream'."
    )
    default_code = "events_unavailable"


class LLMChatView(GenericAPIView):
    """Authentication, permission, throttling and parsing shared by every endpoint."""

    schema = AutoSchema()
    permission_classes = [ChatAccess]
    parser_classes = [StrictJSONParser]
    renderer_classes = [JSONRenderer]
    starts_runs = False  # the ``llmchat_runs`` throttle scope applies

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
        return isinstance(self.request._request, ASGIRequest)


def _inline(view: LLMChatView, chat: Chat, *, status_code: int = 200, **run: Any):
    """Stream a run in the response (WSGI: a sync iterator; ASGI: an async one). The run
    passes the gate before the response starts: a refusal is a 429 or a 409."""
    inline = InlineRun(chat, asynchronous=view.is_asgi(), **run)
    start(inline)
    return sse_response(inline.frames(), status=status_code)


def _fingerprint(attachments: list | None) -> list:
    """Attachments as the request hash reads them: name, SHA-256 of the bytes, type."""
    import hashlib

    out = []
    for item in attachments or ():
        name, data, kind = (list(item) + [None, None, None])[:3]
        digest = hashlib.sha256(data).hexdigest() if isinstance(data, bytes) else str(data)
        out.append([str(name), digest, str(kind)])
    return out


def _once(idem: Idempotency | None, view: LLMChatView, answer, *, stream=None, after=None):
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


def start(inline: InlineRun) -> InlineRun:
    """Admit an inline run now; a chat that cannot take it is a 409 (a limit's refusal
    is the API's 429)."""
    try:
        return inline.start()
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


SSE_RESPONSE = OpenApiResponse(
    response=OpenApiTypes.STR,
    description=(
        "Server-Sent Events: `event: <type>` / `data: <JSON>` / `id: <n>` frames: "
        "`run_started`, the loop's events (`text_delta`, `tool_call_done`, "
        "`token_usage_done`, ...), an `error` event with a safe message if the run fails, "
        "then `run_finished`."
    ),
)
UI_STREAM_RESPONSE = OpenApiResponse(
    response=OpenApiTypes.STR,
    description="The AI SDK's UI message stream (v1): `data: <chunk JSON>` frames "
    "(`start`, `start-step`, `text-start`/`text-delta`/`text-end`, reasoning, "
    "`tool-input-start`/`tool-input-delta`/`tool-input-available`, "
    "`tool-approval-request`, `tool-output-available`/`tool-output-error`/"
    "`tool-output-denied`, `message-metadata`, `finish-step`, `finish`, `error`), then "
    "`data: [DONE]`.",
)
ERROR = OpenApiResponse(
    response=OpenApiTypes.OBJECT,
    description='An error: `{"detail": ...}`, or `{"<field>": ["<reason>", ...]}` for '
    "invalid input.",
)


KEY_REFUSED = OpenApiResponse(
    response=OpenApiTypes.OBJECT,
    description="An `Idempotency-Key` that is not 1 to 255 printable ASCII characters: "
    '`{"Idempotency-Key": ["<reason>"]}`.',
)


def refused(rules: str) -> OpenApiResponse:
    """A 400 that also answers requests the schema allows but a rule refuses."""
    return OpenApiResponse(
        response=OpenApiTypes.OBJECT,
        description='Invalid input: `{"<field>": ["<reason>", ...]}`. Also refused with this '
        f"status although the schema allows them: {rules}.",
    )


# what each route refuses although the schema allows it: the rules of django_llmchat.inputs
CHAT_RULES = refused(
    "a `history` naming a strategy or an `estimator` that is neither built in nor "
    'registered (`LLMCHAT["HISTORY_PROCESSORS"]`, `["TOKEN_ESTIMATORS"]`; a dotted path '
    "never is), or a `summary_provider` that is not configured, or a `summary_model` "
    '`LLMCHAT["ALLOWED_MODELS"]` leaves out; a `provider` that is not configured, a blank '
    "`model_id` or one `ALLOWED_MODELS` leaves out; `params` a provider cannot take "
    "(vendor options outside its allowlist, or `max_tokens` above the model's output "
    "limit, also the chat's own when `model_id` or `provider` changes); reserved "
    "`context` keys, unregistered or too many `tools`"
)
MESSAGE_RULES = refused(
    'a `content` of whitespace only or longer than `LLMCHAT["MAX_CONTENT_LENGTH"]`, '
    'more files than `LLMCHAT["MAX_ATTACHMENTS"]`, an empty file, one over '
    '`LLMCHAT["MAX_ATTACHMENT_SIZE"]`, or one whose type sniffed from its bytes is not in '
    '`LLMCHAT["ALLOWED_ATTACHMENT_TYPES"]` (or is not the type it claims)'
)
TOKEN_RULES = refused("a username and password that do not log in")
TOKEN_THROTTLED = OpenApiResponse(
    response=OpenApiTypes.OBJECT,
    description="Too many attempts for this username or from this client address "
    '(`LLMCHAT["TOKEN_THROTTLE_RATES"]`), failed or not; `Retry-After` says when to try '
    'again: `{"detail", "code": "throttled"}`.',
)
UI_RULES = refused(
    "the rules of a REST message, reported on `messages`: a new user message with neither "
    'text nor a file part, text longer than `LLMCHAT["MAX_CONTENT_LENGTH"]`, too many, '
    "empty, too large or disallowed files (typed by their bytes); a file part whose `url` "
    "is not a base64 `data:` URL; an `id` with characters a resume URL cannot carry, or "
    "naming no chat of yours while the project's default provider is not configured (or "
    "its default model not allowed): no chat is made; an "
    "approval whose `id` no tool call can have (a control character, over 255 characters)"
)

BUDGET = OpenApiResponse(
    response=OpenApiTypes.OBJECT,
    description="A spending limit is reached (`Retry-After` says when it frees up): "
    '`{"detail", "code": "budget_exceeded", "limit", "used", "allowed", "resets_at"}`; or '
    'throttled: `{"detail", "code": "throttled"}`.',
)


# -- chats ----------------------------------------------------------------------------------
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
        return chats_for(self.request.user).with_totals()

    @document(summary="List your chats", responses={200: ChatSerializer(many=True), 400: ERROR})
    def list(self, request, *args, **kwargs):
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

    @document(summary="Delete a chat", responses={204: None, 404: ERROR})
    def destroy(self, request, *args, **kwargs):
        return super().destroy(request, *args, **kwargs)

    def perform_create(self, serializer):
        serializer.save(user=self.request.user)

    def perform_update(self, serializer):
        chat: Chat = serializer.instance
        fields = list(serializer.validated_data)
        for name, value in serializer.validated_data.items():
            setattr(chat, name, value)
        if fields:
            # only the sent columns: a running loop writes status and error meanwhile
            chat.save(update_fields=[*fields, "updated_at"])

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
        # the run current now, and only it: of requests racing, one stops it
        current = chat.runs.unfinished().order_by("id").values_list("pk", flat=True).first()
        if current is None or not runs.interrupt(chat.pk, "cancelled", run_id=current):
            raise Conflict("The chat has no run to cancel, or its cancel was already asked for.")
        chat.refresh_from_db(fields=["status"])
        return Response(
            {"status": chat.status, "cancel_requested": True}, status=status.HTTP_202_ACCEPTED
        )

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
        field, last_id = "Last-Event-ID", request.headers.get("Last-Event-ID")
        if last_id is None:
            field, last_id = "last_event_id", request.query_params.get("last_event_id")
        if last_id is not None:
            last_id = last_id.strip()
            if not _valid_event_id(last_id):
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
        return sse_response(frames)

    def get_renderers(self):
        if getattr(self, "action", None) == "events":
            return [EventStreamRenderer(), JSONRenderer()]
        return super().get_renderers()


# -- messages -------------------------------------------------------------------------------
UNSHOWN_MESSAGE_COLUMNS = (
    "raw",
    "thinking_signature",
    "parent_tool_call__arguments",
    "parent_tool_call__thought_signature",
)


class MessageListCreateView(LLMChatView):
    """The chat's transcript (cursor-paginated) and new user messages."""

    pagination_class = MessageCursorPagination
    serializer_class = MessageSerializer
    parser_classes = [StrictJSONParser, StrictMultiPartParser]
    renderer_classes = [JSONRenderer, EventStreamRenderer]
    starts_runs = True
    queryset = Message.objects.none()

    def get_serializer_class(self):
        if self.request is not None and self.request.method == "POST":
            return MessageCreateSerializer
        return MessageSerializer

    @document(
        summary="List a chat's messages",
        description="In transcript order, by `(position, id)`; each message with its tool calls "
        "and their results, citations, attachments, tokens and cost. `?from=end` starts "
        "with the latest page.",
        responses={200: MessageSerializer(many=True), 400: ERROR, 404: ERROR},
    )
    def get(self, request, pk: int):
        # the chat's access check rides in the page's statement; only an empty page asks
        # whether the chat is there at all (a 404 otherwise)
        rows = Message.objects.filter(chat__in=chats_for(request.user).filter(pk=pk))
        # the columns MessageSerializer never shows stay in the database
        rows = rows.select_related("parent_tool_call").defer(*UNSHOWN_MESSAGE_COLUMNS)
        try:
            page = self.paginate_queryset(rows)
        except ValidationError:
            self.get_chat(pk)  # an unknown chat is a 404 before a bad cursor is a 400
            raise
        if not page:
            self.get_chat(pk)
        load_messages(page)
        data = MessageSerializer(page, many=True, context=self.get_serializer_context()).data
        return self.get_paginated_response(data)

    @document(
        summary="Send a user message and start the reply",
        description=(
            "Saves the message and queues a run answering it: 202 with the message and the "
            "run (follow it at `events_url`). A message sent while an earlier run works is "
            "queued behind it and answered in order. With `Accept: text/event-stream` the "
            "run streams in this response instead (409 when the chat's run waits for a "
            "tool-call decision)."
        ),
        request={
            "application/json": MessageContentSerializer,
            "multipart/form-data": MessageCreateSerializer,
        },
        responses={
            (202, "application/json"): MessageAcceptedSerializer,
            (200, "text/event-stream"): SSE_RESPONSE,
            400: MESSAGE_RULES,
            404: ERROR,
            409: IDEMPOTENCY_CONFLICT,
            422: IDEMPOTENCY_REUSED,
            429: BUDGET,
        },
        parameters=[IDEMPOTENCY_PARAMETER],
        examples=[
            OpenApiExample(
                "A prompt", value={"content": "What is the capital of France?"}, request_only=True
            )
        ],
    )
    def post(self, request, pk: int):
        chat = self.get_chat(pk)
        serializer = MessageCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        content = serializer.validated_data["content"]
        attachments = serializer.validated_data.get("attachments") or None
        streamed = self.wants_events()
        body = {"content": content, "attachments": _fingerprint(attachments), "sse": streamed}
        idem = Idempotency.of(request, "messages", chat, body)
        if streamed:
            after = _stream_position(chat) if idem is not None else None
            return _once(
                idem,
                self,
                lambda: _inline(self, chat, prompt=content, attachments=attachments),
                stream="sse",
                after=after,
            )
        return _once(idem, self, lambda: self._ask_later(chat, content, attachments, idem))

    def _ask_later(self, chat, content, attachments, idem):
        after = _stream_position(chat)
        message = chat.ask_later(content, attachments=attachments)
        if message is None:
            tripwire = chat.last_run.tripwire
            return Response(
                {"detail": "A guardrail blocked the message.", "guardrail": tripwire.to_dict()},
                status=status.HTTP_422_UNPROCESSABLE_ENTITY,
            )
        run = chat.last_run
        run.refresh_from_db()  # a worker (or an in-process run) may have taken it already
        if attachments:
            message = Message.objects.filter(pk=message.pk).transcript().get()
        else:  # just stored, with nothing attached: nothing to read back
            known_relations(message, tool_calls=[], attachments=[], usages=[])
        context = self.get_serializer_context()
        body = {
            "message": MessageSerializer(message, context=context).data,
            "run": RunSerializer(run, context={**context, "events_after": after}).data,
        }
        if idem is not None:
            idem.answered(status.HTTP_202_ACCEPTED, body)
        return Response(body, status=status.HTTP_202_ACCEPTED)


def _stream_position(chat: Chat) -> str | None:
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


def _known_event_id(chat_id: int, event_id: str) -> bool:
    """Whether ``event_id`` is an id of the chat's event stream (or older than what the
    stream still holds: resuming from it replays what is left)."""
    from .. import streams

    try:
        return streams.has_id(chat_id, event_id)
    except Exception as exc:
        logger.warning("cannot read the event stream of chat %s: %s", chat_id, exc)
        return True  # the follow itself reports the event store's failure


# -- tool-call approvals --------------------------------------------------------------------
class ToolCallDecisionView(LLMChatView):
    """Approve or deny a tool call waiting for approval; once none is left waiting, the
    run resumes (in the background, or in this response with
    ``Accept: text/event-stream``)."""

    decision = "approved"
    starts_runs = True
    renderer_classes = [JSONRenderer, EventStreamRenderer]
    serializer_class = serializers.Serializer  # no body (OPTIONS describes it)

    @document(
        request=None,
        responses={
            202: inline_serializer(
                "ToolCallDecision",
                {
                    "call_id": serializers.CharField(),
                    "approval": serializers.CharField(),
                    "resumed": serializers.BooleanField(),
                    "run": RunSerializer(allow_null=True),
                },
            ),
            (200, "text/event-stream"): SSE_RESPONSE,
            400: KEY_REFUSED,
            404: ERROR,
            409: IDEMPOTENCY_CONFLICT,
            422: IDEMPOTENCY_REUSED,
        },
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    def post(self, request, pk: int, call_id: str):
        chat = self.get_chat(pk)
        streamed = self.wants_events()
        idem = Idempotency.of(request, self.decision, chat, {"call_id": call_id, "sse": streamed})
        after = _stream_position(chat) if idem is not None and streamed else None
        return _once(idem, self, lambda: self._decide(chat, call_id, idem, after))

    def _decide(self, chat: Chat, call_id: str, idem: Idempotency | None, after):
        calls = list(
            ToolCall.objects.filter(chat=chat, call_id=call_id)
            .select_related("result")
            .order_by("id")
        )
        if not calls:
            raise Http404("No such tool call.")
        # vendors may repeat an id: the first call with it still waiting is the one
        call = next((c for c in calls if not c.approval and c.get_result() is None), calls[0])
        try:
            run = runs.decide(chat.pk, call, self.decision)
        except runs.AlreadyDecided:
            raise Conflict("The tool call has already been answered.") from None
        except ChatBusyError:
            raise Conflict("The chat is running; wait for it to pause.") from None
        resumed = run is not None
        decided = run or chat.runs.filter(status=Run.AWAITING_APPROVAL).order_by("id").first()
        if resumed and self.wants_events():
            response = _inline(self, chat, resume=run)
            if idem is not None:
                idem.answered(200, {"stream": "sse", "run_id": run.pk, "events_after": after})
            return response
        after = None
        if resumed:
            after = _stream_position(chat)
            _resume_later(chat, run)
        if decided is not None:
            decided = Run.objects.with_totals().get(pk=decided.pk)
        context = {**self.get_serializer_context(), "events_after": after}
        body = {
            "call_id": call_id,
            "approval": self.decision,
            "resumed": resumed,
            "run": RunSerializer(decided, context=context).data if decided else None,
        }
        if idem is not None:
            idem.answered(status.HTTP_202_ACCEPTED, body, run=decided)
        return Response(body, status=status.HTTP_202_ACCEPTED)


def _resume_later(chat: Chat, run: Run) -> None:
    """Continue the run outside the request (the Celery task, or in-process)."""
    from django.db import transaction

    from ..tasks import complete_chat

    chat_id, run_id = chat.pk, run.pk
    transaction.on_commit(lambda: complete_chat.delay(chat_id, run_id=run_id))


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


# -- the model registry ---------------------------------------------------------------------
class LLMModelViewSet(LLMChatView, viewsets.ReadOnlyModelViewSet):
    """The model registry: limits, modalities, capabilities and prices."""

    queryset = LLMModel.objects.all().order_by("provider", "model_id")
    serializer_class = LLMModelSerializer
    pagination_class = ModelPagination
    filter_backends = [DjangoFilterBackend]
    filterset_class = LLMModelFilter

    @document(
        summary="List the model registry",
        parameters=[
            OpenApiParameter(
                "capability",
                str,
                description="A capability the model has (tools, vision, streaming...); "
                "repeat the parameter to require several.",
                pattern=CAPABILITY_PATTERN,
            )
        ],
        responses={200: LLMModelSerializer(many=True), 400: ERROR},
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @document(summary="Read one model", responses={200: LLMModelSerializer, 404: ERROR})
    def retrieve(self, request, *args, **kwargs):
        return super().retrieve(request, *args, **kwargs)


# -- API tokens -----------------------------------------------------------------------------
class TokenView(LLMChatView):
    """Exchange a username and password for the user's API token (created on first use),
    for clients that cannot use the session cookie: send it as
    ``Authorization: Bearer <token>`` (or ``Token <token>``). Needs
    ``rest_framework.authtoken`` in ``INSTALLED_APPS``."""

    permission_classes: list = []
    authentication_classes: list = []
    serializer_class = serializers.Serializer

    def get_authenticators(self):
        return []  # credentials are in the body: no session, so no CSRF check either

    def get_throttles(self):
        # the address first: it counts a request whose body the username throttle cannot read
        return [*super().get_throttles(), TokenAddressThrottle(), TokenUsernameThrottle()]

    def get_serializer_class(self):
        from rest_framework.authtoken.serializers import AuthTokenSerializer

        return AuthTokenSerializer

    @document(
        summary="Get an API token",
        request=inline_serializer(
            "Credentials",
            {"username": serializers.CharField(), "password": serializers.CharField()},
        ),
        responses={
            200: inline_serializer("TokenResponse", {"token": serializers.CharField()}),
            400: TOKEN_RULES,
            429: TOKEN_THROTTLED,
        },
        auth=[],
    )
    def post(self, request):
        from rest_framework.authtoken.models import Token
        from rest_framework.authtoken.serializers import AuthTokenSerializer

        serializer = AuthTokenSerializer(data=request.data, context={"request": request})
        serializer.is_valid(raise_exception=True)
        token, _ = Token.objects.get_or_create(user=serializer.validated_data["user"])
        return Response({"token": token.key})


# -- the AI SDK's UI message stream -------------------------------------------------------------
class UIChatView(LLMChatView):
    """``POST ui/chat``: the Vercel AI SDK's ``DefaultChatTransport`` (``useChat``) as it
    is. Answers with the UI message stream protocol v1."""

    starts_runs = True
    serializer_class = ui.UIChatSerializer

    @document(
        summary="Send a message the AI SDK way (UI message stream protocol v1)",
        description=(
            "The body of the AI SDK's `DefaultChatTransport`: `id` (a chat id of yours, or "
            "an id the client made up: the chat is created on first use), `messages` (only "
            "the last is read: the new user message, or the assistant message with answers "
            "to tool approvals), `trigger` (`submit-message`, `regenerate-message`: the "
            "last reply is replaced by a new run) and `messageId`. The answer streams UI "
            "message chunks (`data: <JSON>` frames, then `data: [DONE]`) with the header "
            "`x-vercel-ai-ui-message-stream: v1`."
        ),
        request=ui.UIChatSerializer,
        responses={
            (200, "text/event-stream"): UI_STREAM_RESPONSE,
            400: UI_RULES,
            409: IDEMPOTENCY_CONFLICT,
            422: IDEMPOTENCY_REUSED,
        },
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    def post(self, request):
        serializer = ui.UIChatSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        chat = ui.chat_for(request.user, data["id"], create=True)
        if chat is None:  # cannot happen for an authenticated user
            raise Http404("No such chat.")
        last = data["last"]
        # a new user message's own id names the request when no header does: a retried
        # sendMessage stores no second prompt
        fallback = None
        if data["trigger"] == "submit-message" and last.get("role") == "user":
            fallback = str(last.get("id") or "") or None
        body = {"trigger": data["trigger"], "last": _json_safe(last)}
        idem = Idempotency.of(request, "ui-chat", chat, body, fallback=fallback)
        after = _stream_position(chat) if idem is not None else None
        return _once(
            idem, self, lambda: self._answer(chat, data, last, idem), stream="ui", after=after
        )

    def _answer(self, chat: Chat, data: dict, last: dict, idem: Idempotency | None):
        stream = ui.UIMessageStream(chat_id=chat.pk)
        run: dict[str, Any] = {}
        if data["trigger"] == "regenerate-message":
            run["regenerate"] = True
        elif last["role"] == "user":
            run["prompt"] = data["prompt"]  # checked by the serializer (the input rules)
            run["attachments"] = data["attachments"] or None
        elif last["role"] == "assistant":
            decisions = ui.approvals_of(last)
            if not decisions:
                raise ValidationError(
                    {
                        "messages": [
                            "the last message must be a user message, or an assistant "
                            "message answering approval requests"
                        ]
                    }
                )
            decided: list = []
            resumed = ui.decide_all(chat, decisions, decided=decided)
            if resumed is None:
                if idem is not None:
                    idem.forget()
                raise Conflict("Other tool calls of the run still wait for a decision.")
            stream = ui.UIMessageStream(
                chat_id=chat.pk,
                message_id=last.get("id") or None,
                known_calls=[(call.call_id, call.name, known) for call, known in decided],
                run_calls=list(
                    ToolCall.objects.filter(message__run=resumed)
                    .order_by("id")
                    .values_list("call_id", flat=True)
                ),
            )
            run["resume"] = resumed
        else:
            raise ValidationError({"messages": ["a client cannot send system messages"]})
        inline = ui.UIRun(chat, ui=stream, asynchronous=self.is_asgi(), **run)
        start(inline)
        if "prompt" in run:  # a reloaded chat names the user message as its client did
            row = getattr(inline.runner, "run_row", None)
            ui_messages.remember_user_message_id(getattr(row, "prompt_id", None), last.get("id"))
        return ui.ui_response(inline.frames())


def _json_safe(value: Any) -> Any:
    """The client's message as JSON (what the request hash reads)."""
    import json

    return json.loads(json.dumps(value, default=str))


class UIChatStreamView(LLMChatView):
    """``GET ui/chat/{id}/stream``: the transport's ``reconnectToStream``."""

    serializer_class = serializers.Serializer

    @document(
        summary="Resume the run in progress (AI SDK reconnect)",
        description="The chat's run in progress from its start, as UI message chunks "
        "(`204` when no run is in progress, or without `LLMCHAT['EVENTS_URL']`). A run "
        "waiting for a decision on its tool calls is replayed from the stored messages, "
        "ending with its `tool-approval-request` chunks (with or without "
        "`EVENTS_URL`): the client shows the approval request again.",
        responses={
            (200, "text/event-stream"): UI_STREAM_RESPONSE,
            204: OpenApiResponse(description="No run to resume."),
            404: ERROR,
        },
    )
    def get(self, request, id: str):
        chat = ui.chat_for(request.user, id, create=False)
        if chat is None:
            raise Http404("No such chat.")
        if not ui.can_resume(chat):
            waiting = ui_messages.waiting_reply(chat, request)
            if waiting is None:
                return ui.no_stream()
            frames = [ui.chunk(c) for c in ui_messages.replay_chunks(waiting)]
            return ui.ui_response(iter([*frames, ui.DONE]))
        return ui.ui_response(ui.follow_chunks(chat, asynchronous=self.is_asgi()))


class UIChatMessagesView(LLMChatView):
    """``GET ui/chat/{id}/messages``: the chat as the AI SDK's ``UIMessage[]``, for
    ``useChat({ id, messages })`` after a reload."""

    serializer_class = serializers.Serializer

    @document(
        summary="The chat as AI SDK UI messages (reload a useChat page)",
        description=(
            "The chat's messages as the AI SDK's `UIMessage[]`, as the UI message stream "
            "built them: a user message per prompt (`text` and `file` parts), one "
            "assistant message per run (`step-start` between its steps, `reasoning`, "
            "`text`, `tool-<name>` parts in the states `input-available`, "
            "`approval-requested`, `approval-responded`, `output-available`, "
            "`output-error`, `output-denied`) with the stream's `metadata` (`chatId`, "
            "`runId`, `status`, `storedMessageId`, `tokens`, `cost`). Ids are the ones "
            "the client saw: `run-<run id>` for a reply, the client's id of a user "
            "message it sent, else `msg-<message id>`. Summaries and system messages "
            "are left out. Pass it as `useChat({ id, messages })`; a call waiting for a "
            "decision is answered with `addToolApprovalResponse` as when streamed."
        ),
        responses={200: ui.UIMessageSerializer(many=True), 404: ERROR},
    )
    def get(self, request, id: str):
        chat = ui.chat_for(request.user, id, create=False)
        if chat is None:
            raise Http404("No such chat.")
        return Response(ui_messages.ui_messages(chat, request))


class UIChatStopView(LLMChatView):
    """``POST ui/chat/{id}/stop``: what the AI SDK's ``stop()`` should also call. The
    chat's current run ends ``cancelled``; its stream (the one in the response, or a
    resumed one) sends what the run stored, an ``abort`` chunk and its ``finish``."""

    serializer_class = serializers.Serializer  # no body (OPTIONS describes it)

    @document(
        summary="Stop the run in progress (AI SDK stop)",
        description="Ends the chat's current run `cancelled`: a running one stops between "
        "chunks (the text streamed so far is stored as its reply), one queued or waiting "
        "for a decision ends now. Answers with the run (its `cancel_requested` set; its "
        "`status` turns `cancelled` when its process has stopped). `409` when the chat has "
        "no run to stop, or its stop was already asked for.",
        request=None,
        responses={200: RunSerializer, 404: ERROR, 409: ERROR},
    )
    def post(self, request, id: str):
        chat = ui.chat_for(request.user, id, create=False)
        if chat is None:
            raise Http404("No such chat.")
        # the run current now, and only it: of requests racing, one stops it
        current = chat.runs.unfinished().order_by("id").values_list("pk", flat=True).first()
        if current is None or not runs.interrupt(chat.pk, "cancelled", run_id=current):
            raise Conflict("The chat has no run to stop, or its stop was already asked for.")
        run = Run.objects.with_totals().get(pk=current)
        return Response(RunSerializer(run, context=self.get_serializer_context()).data)


# -- the schema, readable -----------------------------------------------------------------------
def _local_asset(path: str) -> str | None:
    """The static URL of a drf-spectacular-sidecar asset when that app is installed."""
    from django.apps import apps
    from django.templatetags.static import static

    if apps.is_installed("drf_spectacular_sidecar"):
        return static(f"drf_spectacular_sidecar/{path}")
    return None


class SchemaView(SpectacularAPIView):
    """``schema/``: the API's OpenAPI schema, generated with
    :data:`~django_llmchat.api.schema_settings.SCHEMA_SETTINGS`."""

    custom_settings = SCHEMA_SETTINGS
    schema = None  # not an endpoint of the schema itself


class SchemaSwaggerView(SpectacularSwaggerView):
    """Swagger UI for ``schema/``, its scripts served by this site when
    ``drf_spectacular_sidecar`` is installed (no CDN)."""

    url_name = "llmchat-api:schema"
    title = SCHEMA_SETTINGS["TITLE"]
    schema = None  # a page, not an endpoint of the schema

    @staticmethod
    def _swagger_ui_resource(filename):
        found = _local_asset(f"swagger-ui-dist/{filename}")
        return found or SpectacularSwaggerView._swagger_ui_resource(filename)

    @staticmethod
    def _swagger_ui_favicon():
        found = _local_asset("swagger-ui-dist/favicon-32x32.png")
        return found or SpectacularSwaggerView._swagger_ui_favicon()


class SchemaRedocView(SpectacularRedocView):
    """Redoc for ``schema/``, served by this site when ``drf_spectacular_sidecar`` is
    installed."""

    url_name = "llmchat-api:schema"
    title = SCHEMA_SETTINGS["TITLE"]
    schema = None

    @staticmethod
    def _redoc_standalone():
        found = _local_asset("redoc/bundles/redoc.standalone.js")
        return found or SpectacularRedocView._redoc_standalone()
