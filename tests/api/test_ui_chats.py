"""The chats and calls ``ui/chat`` names: ``chat_for`` (a primary key in ASCII digits,
else the client's id; made on first use) and ``call_for`` (an ``approvalId`` to the
stored call)."""

import pytest

from django_llmchat.api.ui.chats import call_for, chat_for
from django_llmchat.models import Chat, Message, Run, ToolCall

pytestmark = pytest.mark.django_db


def test_chat_for_finds_by_pk_or_client_id_and_makes_on_first_use(owner, chat, settings):
    settings.LLMCHAT = {"PROVIDERS": {"openai": {"api_key": "k"}}}
    assert chat_for(owner, str(chat.pk), create=False) == chat
    assert chat_for(owner, "\u0661", create=False) is None  # not ASCII digits
    assert chat_for(owner, "client-1", create=False) is None
    made = chat_for(owner, "client-1", create=True)
    assert made.client_id == "client-1" and made.user == owner
    assert chat_for(owner, "client-1", create=True) == made
    assert Chat.objects.filter(client_id="client-1").count() == 1


def test_call_for_maps_approval_ids_to_the_waiting_runs_calls(chat):
    run = Run.objects.create(chat=chat, status=Run.AWAITING_APPROVAL)
    message = Message.objects.create(chat=chat, role="assistant", run=run)
    first = ToolCall.objects.create(chat=chat, message=message, call_id="c", name="a")
    second = ToolCall.objects.create(chat=chat, message=message, call_id="c", name="b")
    assert call_for(chat, "c") == first
    assert call_for(chat, "c#2") == second
    assert call_for(chat, "c#3") is None
    assert call_for(chat, "c#1") is None  # the first is named by the call id alone
    assert call_for(chat, "nope") is None
