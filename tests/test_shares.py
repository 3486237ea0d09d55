"""Share links (django_llmchat.chats.shares): the snapshot and what it leaves out, the hashed
token, revoking, and every way data goes (chat deletion, retention, erasure) taking the
shares along; encrypted at rest."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_llmchat.chats import shares
from django_llmchat.chats.lifecycle import anonymise_chats, erase_user, purge_chats
from django_llmchat.chats.retention import apply_retention
from django_llmchat.errors import ArgumentError
from django_llmchat.models import Chat, ChatShare, ToolCall

pytestmark = pytest.mark.django_db

K1 = Fernet.generate_key().decode()
K2 = Fernet.generate_key().decode()


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


def test_a_share_is_a_snapshot_without_instructions_reasoning_or_tool_data(chat):
    share, token = shares.share_chat(chat)
    data = shares.find_share(token).to_dict()
    assert data["title"] == "Trip" and data["include"] == [] and "shared_at" in data
    assert [(m["role"], m["content"]) for m in data["messages"]] == [
        ("user", "Weather in **Oslo**?"),
        ("assistant", ""),
        ("assistant", "It is *cold*."),
    ]
    assert data["messages"][0]["attachments"] == [
        {"filename": "notes.txt", "mime_type": "text/plain", "size": 3}
    ]
    assert data["messages"][1]["tool_calls"] == [{"name": "weather"}]
    text = str(data)
    for hidden in ("secret system prompt", "look it up", "Cold it is", "k-42", "cold, 2 C"):
        assert hidden not in text
    assert share.message_count == 3


def test_include_adds_reasoning_and_tools(chat):
    _, token = shares.share_chat(chat, ["tools", "thinking", "tools"])
    data = shares.find_share(token).to_dict()
    assert data["include"] == ["thinking", "tools"]
    step, result, answer = data["messages"][1:]
    assert step["thinking"] == "I should look it up."
    assert step["tool_calls"] == [
        {"id": "c1", "name": "weather", "arguments": {"city": "Oslo", "key": "k-42"}}
    ]
    assert (result["role"], result["content"], result["tool_call_id"]) == (
        "tool",
        "cold, 2 C",
        "c1",
    )
    assert answer["thinking"] == "Cold it is." and answer["model"] == "gpt-4.1-mini"
    assert "secret system prompt" not in str(data)


@pytest.mark.parametrize("include", [["everything"], "tools", [1]])
def test_an_unknown_include_is_refused(chat, include):
    with pytest.raises(ArgumentError, match="include"):
        shares.share_chat(chat, include)
    assert not ChatShare.objects.exists()


def test_revoking_ends_every_link_of_the_chat(chat, user):
    _, first = shares.share_chat(chat)
    _, second = shares.share_chat(chat)
    other = Chat.objects.create(user=user)
    other.add_message("user", "hi")
    _, kept = shares.share_chat(other)
    assert shares.revoke_shares(chat) == 2
    assert shares.find_share(first) is None and shares.find_share(second) is None
    assert shares.find_share(kept) is not None


def test_deleting_anonymising_and_erasing_remove_the_shares(
    chat, user, django_user_model, django_capture_on_commit_callbacks
):
    _, token = shares.share_chat(chat)
    anonymise_chats(Chat.objects.filter(pk=chat.pk))
    assert shares.find_share(token) is None

    again = Chat.objects.create(user=user)
    again.add_message("user", "hi")
    _, token = shares.share_chat(again)
    purge_chats(Chat.objects.filter(pk=again.pk))
    assert shares.find_share(token) is None

    third = Chat.objects.create(user=user)
    third.add_message("user", "hi")
    _, token = shares.share_chat(third)
    with django_capture_on_commit_callbacks(execute=True):
        erase_user(user)
    assert shares.find_share(token) is None and not ChatShare.objects.exists()


@pytest.mark.parametrize("action", ["delete", "anonymise"])
def test_the_retention_removes_the_shares(user, action):
    chat = Chat.objects.create(user=user)
    chat.add_message("user", "old words")
    _, token = shares.share_chat(chat)
    Chat.objects.filter(pk=chat.pk).update(updated_at=timezone.now() - timedelta(days=40))
    with override_settings(LLMCHAT={"RETENTION": {"days": 30, "action": action}}):
        apply_retention()
    assert shares.find_share(token) is None


def test_the_snapshot_is_encrypted_at_rest_and_rotated(user):
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K1]}):
        chat = Chat.objects.create(user=user, title="Private")
        chat.add_message("user", "my words")
        share, token = shares.share_chat(chat)
        with connection.cursor() as cursor:
            cursor.execute("SELECT snapshot FROM llmchat_chat_share WHERE id = %s", [share.pk])
            stored = str(cursor.fetchone()[0])
        assert "llmchat-fernet:" in stored and "my words" not in stored
        assert shares.find_share(token).to_dict()["messages"][0]["content"] == "my words"
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K2, K1]}):
        call_command("llmchat_rotate_keys", stdout=open("/dev/null", "w"))  # noqa: SIM115
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K2]}):  # K1 retired
        assert shares.find_share(token).to_dict()["messages"][0]["content"] == "my words"
