"""``chats/{id}/messages/``: the transcript and new user messages (a run queued, or
streamed in the response); ``chats/{id}/tool-calls/{call_id}/approve/`` and ``deny/``: the
decisions on tool calls waiting for approval."""

from __future__ import annotations

import hashlib
from contextlib import contextmanager

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from .. import runs
from ..db.prepared import known_relations
from ..errors import ArgumentError, ChatBusyError, DoubleTextingRejected
from ..models import Chat, Message, Run, ToolCall, branches
from ..models.branches import ROOT, branching
from .base import LLMChatView, once, rejected, stream_inline, stream_position
from .errors import Conflict
from .idempotency import (
    IDEMPOTENCY_CONFLICT,
    IDEMPOTENCY_PARAMETER,
    IDEMPOTENCY_REUSED,
    Idempotency,
)
from .message_page import page_json, page_rows
from .pagination import MessageCursorPagination
from .parsers import StrictJSONParser, StrictMultiPartParser
from .responses import BUDGET, ERROR, KEY_REFUSED, MESSAGE_RULES, SSE_RESPONSE
from .schema import document
from .serializers import (
    MessageAcceptedSerializer,
    MessageContentSerializer,
    MessageCreateSerializer,
    MessageSerializer,
    RunSerializer,
)
from .sse import EventStreamRenderer

STREAM_RETRIED = OpenApiResponse(
    response=inline_serializer("StreamedRetry", fields={"run": RunSerializer()}),
    description="A streamed request retried with its `Idempotency-Key` when the run cannot "
    'be replayed (no `LLMCHAT["EVENTS_URL"]`): the run as JSON, once it ended.',
)

__all__ = ["MessageListCreateView", "ToolCallDecisionView"]


# -- messages -------------------------------------------------------------------------------
class MessageListCreateView(LLMChatView):
    """The chat's transcript (cursor-paginated) and new user messages."""

    pagination_class = MessageCursorPagination
    serializer_class = MessageSerializer
    post_serializer_class = MessageCreateSerializer
    parser_classes = [StrictJSONParser, StrictMultiPartParser]
    renderer_classes = [JSONRenderer, EventStreamRenderer]
    starts_runs = True
    queryset = Message.objects.none()

    @document(
        summary="List a chat's messages",
        description="The active path (what the next request is built from) in transcript "
        "order, by `(position, id)`; `?path=all`: every message of every branch, in the "
        "order they were stored (`parent`, `siblings` and `on_path` tell the tree). Each "
        "message with its tool calls and their results, citations, attachments, tokens and "
        "cost. `?from=end` starts with the latest page.",
        parameters=[
            OpenApiParameter(
                "path",
                OpenApiTypes.STR,
                OpenApiParameter.QUERY,
                enum=["active", "all"],
                description="`active` (default): the active path; `all`: every branch.",
            )
        ],
        responses={200: MessageSerializer(many=True), 400: ERROR, 404: ERROR},
    )
    def get(self, request, pk: int):
        scope = request.query_params.get("path", "active")
        if scope not in ("active", "all"):
            raise ValidationError({"path": ["must be 'active' or 'all'"]})
        # the chat's access check rides in the page's statement; only an empty page asks
        # whether the chat is there at all (a 404 otherwise)
        paginator = self.paginator

        def fetch(position, backwards: bool, size: int) -> list:
            every_branch = scope == "all"
            return page_rows(paginator, request.user, pk, every_branch, position, backwards, size)

        try:
            page = paginator.paginate(request, fetch)
        except ValidationError:
            self.get_chat(pk)  # an unknown chat is a 404 before a bad cursor is a 400
            raise
        if not page:
            self.get_chat(pk)
        # what MessageSerializer(many=True) shows of the page, built from its rows
        return self.get_paginated_response(page_json(page, request))

    @document(
        summary="Send a user message and start the reply",
        description=(
            "Saves the message and queues a run answering it: 202 with the message and the "
            "run (follow it at `events_url`). A message sent while an earlier run works is "
            "queued behind it and answered in order. With `Accept: text/event-stream` the "
            "run streams in this response instead (409 when the chat's run waits for a "
            "tool-call decision). With `parent`, the message starts a new branch after "
            "that message (edit and resubmit): the provider receives the new path alone; "
            "409 while a run of the chat is in progress. `double_texting` says what the "
            "message does while a run of the chat is queued or working (409 "
            "`double_texting_rejected` under `reject`)."
        ),
        request={
            "application/json": MessageContentSerializer,
            "multipart/form-data": MessageCreateSerializer,
        },
        responses={
            (202, "application/json"): MessageAcceptedSerializer,
            (200, "text/event-stream"): SSE_RESPONSE,
            (200, "application/json"): STREAM_RETRIED,
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
            ),
            OpenApiExample(
                "An edited prompt (a new branch)",
                value={"content": "And of Italy?", "parent": 2},
                request_only=True,
            ),
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
        policy = serializer.validated_data.get("double_texting")
        if policy is not None:
            body["double_texting"] = policy
        parent = None
        if "parent" in serializer.validated_data:
            body["parent"] = serializer.validated_data["parent"]
            parent = _checked_parent(chat, body["parent"])
        idem = Idempotency.of(request, "messages", chat, body)
        if streamed:
            after = stream_position(chat) if idem is not None else None

            def stream():
                with branching(parent), _branch_refusals(parent), runs.double_texting(policy):
                    return stream_inline(self, chat, prompt=content, attachments=attachments)

            return once(idem, self, stream, stream="sse", after=after)
        return once(
            idem,
            self,
            lambda: self._ask_later(chat, content, attachments, idem, parent, policy),
        )

    def _ask_later(self, chat, content, attachments, idem, parent=None, policy=None):
        from ..tasks import in_process_mode

        after = stream_position(chat)
        with _branch_refusals(parent):
            try:
                message = chat.ask_later(
                    content, attachments=attachments, parent=parent, double_texting=policy
                )
            except DoubleTextingRejected as exc:
                raise rejected(exc) from None
        if message is None:
            tripwire = chat.last_run.tripwire
            return Response(
                {"detail": "A guardrail blocked the message.", "guardrail": tripwire.to_dict()},
                status=status.HTTP_422_UNPROCESSABLE_ENTITY,
            )
        run = chat.last_run
        if in_process_mode() == "inline" and not _in_transaction():
            # the run was answered here, when its admission committed: as it is now, its
            # totals in the same statement
            run = Run.objects.with_totals().get(pk=run.pk)
        # else its task went to a worker (the broker's, or a thread's), or waits for the
        # caller's transaction to commit: the run as this request admitted it (follow it
        # at events_url)
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


def _in_transaction() -> bool:
    """Whether runs are written in a transaction still open (the caller's): a task sent
    on its commit has not run yet."""
    from django.db import router, transaction

    return transaction.get_connection(router.db_for_write(Run)).in_atomic_block


def _checked_parent(chat: Chat, parent: int | None):
    """The ``parent`` of a new branch as the chat's runs take it (``ROOT`` for null); a
    400 naming the field for a message a prompt cannot follow."""
    parent = ROOT if parent is None else parent
    try:
        branches.check_parent(chat.pk, parent)
    except ArgumentError as exc:
        raise ValidationError({"parent": [str(exc)]}) from None
    return parent


@contextmanager
def _branch_refusals(parent):
    """A branch (``parent`` given) refused while the prompt is admitted: 409 while a run
    is in progress, 400 naming ``parent`` when its message changed meanwhile."""
    try:
        yield
    except runs.RunInProgress:
        raise Conflict(
            "The chat has a run in progress; wait for it to end (or cancel it) before "
            "starting a branch."
        ) from None
    except ArgumentError as exc:
        if parent is None:
            raise
        raise ValidationError({"parent": [str(exc)]}) from None


def _fingerprint(attachments: list | None) -> list:
    """Attachments as the request hash reads them: name, SHA-256 of the bytes, type."""
    out = []
    for item in attachments or ():
        name, data, kind = (list(item) + [None, None, None])[:3]
        digest = hashlib.sha256(data).hexdigest() if isinstance(data, bytes) else str(data)
        out.append([str(name), digest, str(kind)])
    return out


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
            (200, "application/json"): STREAM_RETRIED,
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
        after = stream_position(chat) if idem is not None and streamed else None
        return once(idem, self, lambda: self._decide(chat, call_id, idem, after))

    def _decide(self, chat: Chat, call_id: str, idem: Idempotency | None, after):
        calls = list(
            ToolCall.objects.filter(chat=chat, call_id=call_id)
            .select_related("result")
            .order_by("id")
        )
        if not calls:
            raise Http404("No such tool call.")
        call = ToolCall.first_waiting(calls) or calls[0]  # answered: the 409 below says so
        try:
            run = runs.decide(chat.pk, call, self.decision)
        except runs.AlreadyDecided:
            raise Conflict("The tool call has already been answered.") from None
        except ChatBusyError:
            raise Conflict("The chat is running; wait for it to pause.") from None
        resumed = run is not None
        decided = run or chat.runs.filter(status=Run.AWAITING_APPROVAL).order_by("id").first()
        if resumed and self.wants_events():
            response = stream_inline(self, chat, resume=run)
            if idem is not None:
                idem.answered(200, {"stream": "sse", "run_id": run.pk, "events_after": after})
            return response
        after = None
        if resumed:
            after = stream_position(chat)
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
