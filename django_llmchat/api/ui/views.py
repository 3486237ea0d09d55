"""``ui/chat``: the Vercel AI SDK's chat transport as it is. ``POST ui/chat`` sends a
message (or answers approvals, or regenerates) and streams the reply as UI message chunks;
``GET ui/chat/{id}/stream`` resumes it, ``GET ui/chat/{id}/messages`` reloads the chat as
``UIMessage[]``, ``POST ui/chat/{id}/stop`` stops its run."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from ... import runs
from ...errors import ArgumentError
from ...models import Chat, Run, branches
from ..base import LLMChatView, admit, interrupt_current, once, stream_position
from ..errors import Conflict, text_refusal
from ..idempotency import (
    IDEMPOTENCY_CONFLICT,
    IDEMPOTENCY_PARAMETER,
    IDEMPOTENCY_REUSED,
    Idempotency,
)
from ..responses import ERROR, UI_RULES, UI_STREAM_RESPONSE
from ..schema import document
from ..serializers import RunSerializer
from . import DONE, UIRun, can_resume, chunk, follow_chunks, no_stream, ui_response
from . import messages as ui_messages
from .chats import chat_for, decide_all, made_chat
from .paths import Tree, placement_of, reply_branch
from .requests import UIChatSerializer, UIMessageSerializer, approvals_of
from .stream import UIMessageStream

__all__ = ["UIChatMessagesView", "UIChatStopView", "UIChatStreamView", "UIChatView"]


TEXT_REFUSALS = {"x-llmchat-text-refusals": True}  # for the schema: see document_refusals
REFUSALS_AS_TEXT = (
    " A refusal is plain text (`text/plain; charset=utf-8`: its message, which the AI "
    "SDK shows as `chat.error.message`) with its status and headers, or the API's JSON "
    "error with `Accept: application/json`."
)


class TransportView(LLMChatView):
    """A route the AI SDK's transport calls. It throws ``new Error(await
    response.text())`` on a refusal, so the body it shows is the refusal's message:
    plain text, unless the client's ``Accept`` asks for JSON."""

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        return text_refusal(request, response)


class UIChatView(TransportView):
    """``POST ui/chat``: the Vercel AI SDK's ``DefaultChatTransport`` (``useChat``) as it
    is. Answers with the UI message stream protocol v1."""

    starts_runs = True
    serializer_class = UIChatSerializer

    @document(
        summary="Send a message the AI SDK way (UI message stream protocol v1)",
        description=(
            "The body of the AI SDK's `DefaultChatTransport`: `id` (a chat id of yours, or "
            "an id the client made up: the chat is created on first use, with the run; "
            "another user's chat id is a `404`), `messages` (the "
            "last is the new user message, or the assistant message with answers to tool "
            "approvals; the ones before it, by their ids, are the path it continues: the "
            "chat's active path appends, a shorter prefix branches after its last message, "
            "a message the chat does not have anywhere but last is a `400`), `trigger` "
            "(`submit-message`, `regenerate-message`: the last reply is replaced by a new "
            "run and kept as an alternative) and `messageId`. The answer streams UI "
            "message chunks (`data: <JSON>` frames, then `data: [DONE]`) with the header "
            "`x-vercel-ai-ui-message-stream: v1`." + REFUSALS_AS_TEXT
        ),
        extensions=TEXT_REFUSALS,
        request=UIChatSerializer,
        responses={
            (200, "text/event-stream"): UI_STREAM_RESPONSE,
            400: UI_RULES,
            404: ERROR,
            409: IDEMPOTENCY_CONFLICT,
            422: IDEMPOTENCY_REUSED,
        },
        parameters=[IDEMPOTENCY_PARAMETER],
    )
    def post(self, request):
        serializer = UIChatSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        chat = chat_for(request.user, data["id"], create=False)
        if chat is not None:
            return self._post(request, chat, data)
        # a chat made on first use commits with the run the request admits: a refused
        # request (400, 404, 409, 422, 429) leaves no empty chat behind
        with transaction.atomic():
            # the lookup above found none: made now (found, when a concurrent first
            # request made it meanwhile)
            chat, made = made_chat(request.user, data["id"])
            if chat is None:  # cannot happen for an authenticated user
                raise Http404("No such chat.")
            return self._post(request, chat, data, made=made)

    def _post(self, request, chat: Chat, data: dict, made: bool = False):
        last = data["last"]
        # a new user message's own id names the request when no header does: a retried
        # sendMessage stores no second prompt
        fallback = None
        edit = bool(data.get("messageId"))  # the SDK's edit: the message keeps its id
        if data["trigger"] == "submit-message" and last.get("role") == "user" and not edit:
            fallback = str(last.get("id") or "") or None
        body = {"trigger": data["trigger"], "last": _json_safe(last)}
        if data.get("double_texting") is not None:
            body["double_texting"] = data["double_texting"]
        idem = Idempotency.of(request, "ui-chat", chat, body, fallback=fallback)
        after = stream_position(chat) if idem is not None else None
        return once(
            idem,
            self,
            lambda: self._answer(chat, data, last, idem, made=made),
            stream="ui",
            after=after,
        )

    def _answer(
        self,
        chat: Chat,
        data: dict,
        last: dict,
        idem: Idempotency | None,
        *,
        made: bool = False,
    ):
        def finish(event) -> dict:  # a regenerated reply says its alternatives at once
            return reply_branch(chat.pk, event.run_id)

        # a chat this request made has no messages and no runs: nothing to read
        tree = Tree.empty() if made else None
        stream = UIMessageStream(chat_id=chat.pk, finish_metadata=finish)
        run: dict[str, Any] = {}
        sent = data.get("messages") if data.get("message") is None else None
        parent = None  # a new branch's parent (branches.ROOT: before the first message)
        if data["trigger"] == "regenerate-message":
            run["regenerate"] = True
            if sent and not placement_of(chat, sent, regenerate=True, tree=tree).append:
                raise ValidationError(
                    {
                        "messages": [
                            "only the reply at the end of the chat's active path can be "
                            "regenerated: switch to its branch first"
                        ]
                    }
                )
        elif last["role"] == "user":
            run["prompt"] = data["prompt"]  # checked by the serializer (the input rules)
            run["attachments"] = data["attachments"] or None
            # a reloaded chat names the user message as its client did: the client's id
            # goes in the prompt's row (stored with its run)
            run["prompt_raw"] = ui_messages.client_raw(last.get("id"))
            if sent is not None:  # the messages before it are the path it continues
                place = placement_of(chat, sent[:-1], tree=tree)
                if not place.append:
                    parent = branches.ROOT if place.parent is None else place.parent
        else:  # an assistant message: the answers to approval requests
            decisions = approvals_of(last)
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
            resumed = decide_all(chat, decisions, decided=decided)
            if resumed is None:
                if idem is not None:
                    idem.forget()
                raise Conflict("Other tool calls of the run still wait for a decision.")
            stream = UIMessageStream(
                chat_id=chat.pk,
                finish_metadata=finish,
                message_id=last.get("id") or None,
                known_calls=[(call.call_id, call.name, known) for call, known in decided],
                run_calls=ui_messages.stored_calls(resumed.pk),
            )
            run["resume"] = resumed
        inline = UIRun(chat, ui=stream, asynchronous=self.is_asgi(), **run)
        with runs.double_texting(data.get("double_texting")):
            if parent is None:
                admit(inline)
            else:
                try:
                    with branches.branching(parent):
                        admit(inline)
                except ArgumentError as exc:  # a message no prompt may follow
                    raise ValidationError({"messages": [str(exc)]}) from None
        return ui_response(inline.frames())


def _json_safe(value: Any) -> Any:
    """The client's message as JSON (what the request hash reads)."""
    return json.loads(json.dumps(value, default=str))


class UIChatStreamView(TransportView):
    """``GET ui/chat/{id}/stream``: the transport's ``reconnectToStream``."""

    serializer_class = serializers.Serializer

    @document(
        summary="Resume the run in progress (AI SDK reconnect)",
        description="The chat's run in progress from its start, as UI message chunks "
        "(`204` when no run is in progress, or without `LLMCHAT['EVENTS_URL']`). A run "
        "waiting for a decision on its tool calls is replayed from the stored messages, "
        "ending with its `tool-approval-request` chunks (with or without "
        "`EVENTS_URL`): the client shows the approval request again." + REFUSALS_AS_TEXT,
        extensions=TEXT_REFUSALS,
        responses={
            (200, "text/event-stream"): UI_STREAM_RESPONSE,
            204: OpenApiResponse(description="No run to resume."),
            404: ERROR,
        },
    )
    def get(self, request, id: str):
        chat = chat_for(request.user, id, create=False)
        if chat is None:
            raise Http404("No such chat.")
        if not can_resume(chat):
            waiting = ui_messages.waiting_reply(chat, request)
            if waiting is None:
                return no_stream()
            frames = [chunk(c) for c in ui_messages.replay_chunks(waiting)]
            return ui_response(iter([*frames, DONE]))
        return ui_response(follow_chunks(chat, asynchronous=self.is_asgi()))


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
            "`runId`, `status`, `storedMessageId`, `tokens`, `cost`; `feedback`, the "
            "requesting user's rating, on a reply they rated). The messages are the chat's "
            "active path; one with alternatives has `metadata.branch` (`index`, `count`, "
            "`siblings`: their ids, `storedMessageIds`: the messages to switch to). Ids are "
            "the ones "
            "the client saw: `run-<run id>` for a reply, the client's id of a user "
            "message it sent, else `msg-<message id>`. Summaries and system messages "
            "are left out. Pass it as `useChat({ id, messages })`; a call waiting for a "
            "decision is answered with `addToolApprovalResponse` as when streamed."
        ),
        responses={200: UIMessageSerializer(many=True), 404: ERROR},
    )
    def get(self, request, id: str):
        chat = chat_for(request.user, id, create=False)
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
        chat = chat_for(request.user, id, create=False)
        if chat is None:
            raise Http404("No such chat.")
        current = interrupt_current(chat)
        if current is None:
            raise Conflict("The chat has no run to stop, or its stop was already asked for.")
        run = Run.objects.with_totals().get(pk=current)
        return Response(RunSerializer(run, context=self.get_serializer_context()).data)
