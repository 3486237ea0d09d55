"""Tool calls' rows (``models/tool_call.py``): a call waits until decided or answered,
the first waiting one of calls sharing a vendor id is the one a decision is for, its
``chat`` is its message's, and its dict carries only what it has."""

from __future__ import annotations

import pytest

from django_llmchat.models import Chat, Message, ToolCall

pytestmark = pytest.mark.django_db


@pytest.fixture
def message():
    chat = Chat.objects.create()
    return Message.objects.create(chat=chat, role="assistant", content="")


def _answer(call):
    return Message.objects.create(
        chat_id=call.chat_id, role="tool", content="42", parent_tool_call=call
    )


def test_a_call_takes_its_messages_chat(message):
    call = ToolCall.objects.create(message=message, call_id="c1", name="add")
    assert call.chat_id == message.chat_id
    other = Chat.objects.create()
    given = ToolCall.objects.create(message=message, chat=other, call_id="c2", name="add")
    assert given.chat_id == other.pk  # a chat given is kept
    assert str(call) == "add(c1)"


def test_waiting_until_decided_or_answered(message):
    calls = [ToolCall.objects.create(message=message, call_id="same", name="add") for _ in range(3)]
    assert all(call.is_waiting for call in calls) and calls[0].get_result() is None
    assert ToolCall.first_waiting(calls) is calls[0]
    calls[0].approval = "approved"
    assert not calls[0].is_waiting and ToolCall.first_waiting(calls) is calls[1]
    result = _answer(calls[1])
    calls[1] = ToolCall.objects.get(pk=calls[1].pk)
    assert calls[1].get_result() == result and not calls[1].is_waiting
    assert ToolCall.first_waiting(calls) is calls[2]
    calls[2].approval = "denied"
    assert ToolCall.first_waiting(calls) is None and ToolCall.first_waiting([]) is None


def test_to_dict_and_arguments_json(message):
    call = ToolCall(message=message, call_id="c1", name="weather", arguments={"city": "Zürich"})
    assert call.to_dict() == {"id": "c1", "name": "weather", "arguments": {"city": "Zürich"}}
    assert call.arguments_json == '{"city": "Zürich"}'  # not ASCII-escaped
    call.thought_signature, call.approval = "sig", "denied"
    assert call.to_dict() == {
        "id": "c1",
        "name": "weather",
        "arguments": {"city": "Zürich"},
        "thought_signature": "sig",
        "approval": "denied",
    }
