"""Share links' rows (``models/share.py``): the token stored hashed, the snapshot as it was."""

from __future__ import annotations

import pytest
from django.db import connection

from django_llmchat.chats import shares
from django_llmchat.models import Chat, ToolCall
from django_llmchat.models.share import token_hash

pytestmark = pytest.mark.django_db


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("sharer", password="pw")


@pytest.fixture
def chat(user):
    chat = Chat.objects.create(user=user, title="Trip", model_id="gpt-4.1-mini", provider="openai")
    chat.with_instructions("The secret system prompt.")
    chat.add_message("user", "Weather in **Oslo**?", attachments=[("notes.txt", b"abc")])
    step = chat.add_message(
        "assistant", "", finish_reason="tool_calls", thinking_text="I should look it up."
    )
    call = ToolCall.objects.create(
        message=step, call_id="c1", name="weather", arguments={"city": "Oslo", "key": "k-42"}
    )
    chat.add_message("tool", "cold, 2 C", parent_tool_call=call)
    chat.add_message(
        "assistant", "It is *cold*.", model_id="gpt-4.1-mini", thinking_text="Cold it is."
    )
    return chat


def test_the_snapshot_stays_as_it_was(chat):
    _, token = shares.share_chat(chat)
    chat.add_message("user", "And tomorrow?")
    chat.messages.filter(content="It is *cold*.").update(content="edited")
    contents = [m["content"] for m in shares.find_share(token).to_dict()["messages"]]
    assert contents[-1] == "It is *cold*." and "And tomorrow?" not in contents
    # a new share is a new snapshot, the earlier link keeps its own
    _, newer = shares.share_chat(chat)
    assert shares.find_share(newer).to_dict()["messages"][-1]["content"] == "And tomorrow?"
    assert shares.find_share(token) is not None


def test_the_token_is_stored_hashed(chat):
    share, token = shares.share_chat(chat)
    assert len(token) >= 43 and share.token_hash == token_hash(token) != token
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM llmchat_chat_share")
        assert token not in str(cursor.fetchall())
    assert shares.find_share(share.token_hash) is None  # the hash opens nothing
    assert shares.find_share(token[:-1]) is None
    assert shares.find_share("") is None and shares.find_share("x" * 500) is None
