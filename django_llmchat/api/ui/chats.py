"""The chats and tool calls ``ui/chat`` names: a chat by its id or its client's id (made
on first use), a stored call by its ``approvalId``, and the decisions of an approval
answer recorded."""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction
from django.http import Http404
from rest_framework.exceptions import ValidationError

from ... import inputs, runs
from ...conf import settings
from ...errors import ChatBusyError, InputError
from ...models import Chat, Run, ToolCall
from ..errors import Conflict, invalid
from ..permissions import chats_for

__all__ = ["call_for", "chat_for", "decide_all", "made_chat"]

logger = logging.getLogger("django_llmchat.api")


def chat_for(user, client_id: str, *, create: bool) -> Chat | None:
    """The user's chat with this id: its primary key, else the id its client gave it;
    created on first use when ``create`` (in the caller's transaction, if any: a request
    refused after it leaves no chat behind). The number of another user's chat is no id a
    client may make up: :class:`~django.http.Http404`, and nothing is made."""
    visible = chats_for(user)
    number = client_id.isascii() and client_id.isdigit()  # int() also reads "٣" as 3
    if number:
        found = visible.filter(pk=int(client_id)).first()
        if found is not None:
            return found
    found = visible.filter(client_id=client_id).first()
    if found is not None or not create:
        return found
    return made_chat(user, client_id)[0]


def made_chat(user, client_id: str) -> tuple[Chat | None, bool]:
    """The chat ``client_id`` names made for ``user`` (the caller found none of theirs by
    it), and whether this call made it (``False``: a concurrent first request did);
    in the caller's transaction, if any. The number of another user's chat is no id a
    client may make up: :class:`~django.http.Http404`, and nothing is made."""
    number = client_id.isascii() and client_id.isdigit()
    if number and Chat.objects.filter(pk=int(client_id)).exists():
        raise Http404("No such chat.")
    try:
        inputs.check_default_model(field="id")  # the chat is on the project's defaults
    except InputError as exc:
        logger.warning(
            "ui/chat cannot make chat %r: %s (provider %r, model %r)",
            client_id,
            exc.reason,
            settings.DEFAULT_PROVIDER,
            settings.DEFAULT_MODEL,
        )
        raise invalid(exc) from None
    try:
        with transaction.atomic():
            return Chat.objects.create(user=user, client_id=client_id, title=""), True
    except IntegrityError:  # a concurrent first request made it
        return Chat.objects.filter(user=user, client_id=client_id).first(), False


def call_for(chat: Chat, approval_id: str) -> ToolCall | None:
    """The stored call an ``approvalId`` names (see :class:`UIMessageStream`): the call id
    alone is the first call with it of the run waiting for decisions (else the chat's
    first call with it still unanswered), ``<call id>#<n>`` that run's n-th call with it."""
    calls = list(ToolCall.objects.filter(chat=chat, call_id=approval_id).order_by("id"))
    base, number = approval_id, 1
    if not calls:
        head, sep, tail = approval_id.rpartition("#")
        if not sep or not (tail.isascii() and tail.isdigit()) or int(tail) < 2:
            return None
        base, number = head, int(tail)
    waiting = chat.runs.filter(status=Run.AWAITING_APPROVAL).order_by("id").first()
    if waiting is not None:
        same = list(
            ToolCall.objects.filter(chat=chat, call_id=base, message__run=waiting).order_by("id")
        )
        if number <= len(same):
            return same[number - 1]
    if number > 1 or not calls:
        return None
    return ToolCall.first_waiting(calls) or calls[0]


def decide_all(
    chat: Chat,
    decisions: list[tuple[str, str, str]],
    *,
    decided: list[tuple[ToolCall, str]] | None = None,
) -> Run | None:
    """Record the decisions; the run to resume once none is left waiting. ``decided``
    receives ``(stored call, toolCallId)`` of each decision, in the calls' order."""
    resumed = None
    pairs: list[tuple[ToolCall, str]] = []
    for call_id, decision, tool_call_id in decisions:
        call = call_for(chat, call_id)
        if call is None:
            raise ValidationError({"messages": [f"the chat has no tool call {call_id!r}"]})
        pairs.append((call, tool_call_id))
        try:
            found = runs.decide(chat.pk, call, decision)
        except runs.AlreadyDecided:
            continue  # sent again: the first answer stands
        except ChatBusyError:
            raise Conflict("The chat is running; wait for it to pause.") from None
        resumed = found or resumed
    if decided is not None:
        decided.extend(sorted(pairs, key=lambda pair: pair[0].pk))
    return resumed
