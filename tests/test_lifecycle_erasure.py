"""Export and erasure per user (the GDPR's access and erasure requests): the commands,
the lifecycle functions and the admin actions, with attachment files and Redis streams."""

from __future__ import annotations

import base64
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from django_llmchat.chats import lifecycle
from django_llmchat.chats.dashboard import usage_summary
from django_llmchat.models import Attachment, Chat, IdempotencyKey, Message, Run, Usage
from tests.lifecycle_helpers import files_of, make_chat, redis_events, stream_exists

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def events():
    yield from redis_events()


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob")


def storage():
    return Attachment._meta.get_field("file").storage


def configure(fake_llm, events=None, **llmchat):
    return fake_llm.configure("openai", "gpt-4.1-mini", **(events or {}), **llmchat)


def test_the_export_holds_chats_messages_tool_calls_attachments_and_usage(fake_llm, alice):
    configure(fake_llm)
    chat = make_chat(fake_llm, alice, title="Paris")
    gone = make_chat(fake_llm, alice, title="Deleted one")
    gone_id = gone.pk
    gone.delete()

    data = lifecycle.export_user(alice)

    assert data["format"] == "django-llmchat-export" and data["version"] == 1
    (entry,) = data["users"]
    assert entry["user"] == {"id": alice.pk, "username": "alice"}
    (exported,) = entry["chats"]
    assert exported["id"] == chat.pk and exported["title"] == "Paris"
    roles = [m["role"] for m in exported["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    prompt, call, result, answer = exported["messages"]
    assert prompt["content"] == "Weather in Paris?"
    (attachment,) = prompt["attachments"]
    assert attachment["filename"] == "notes.txt" and attachment["size"] == 16
    assert "data_base64" not in attachment
    (tool_call,) = call["tool_calls"].values()
    assert tool_call["name"] == "weather_lookup" and tool_call["arguments"] == {"city": "Paris"}
    assert result["content"] == "Paris: sunny" and result["tool_call_id"] == tool_call["id"]
    assert answer["content"] == "Sunny in Paris"
    # the tree's shape: each message's parent; all on the active path
    assert [m.get("parent") for m in exported["messages"]] == [
        None,
        prompt["id"],
        call["id"],
        result["id"],
    ]
    assert not any("on_path" in m for m in exported["messages"])
    assert [r["status"] for r in exported["runs"]] == ["succeeded"]
    # every usage row of the user, those of the deleted chat too, with its kept title
    assert {(u["chat_id"], u.get("chat_title")) for u in entry["usage"]} == {
        (chat.pk, None),
        (gone_id, "Deleted one"),
    }
    json.dumps(data)  # JSON as it is

    with_files = lifecycle.export_user(alice, files=True)
    (attachment,) = with_files["users"][0]["chats"][0]["messages"][0]["attachments"]
    assert base64.b64decode(attachment["data_base64"]) == b"my private notes"


@pytest.mark.redis
def test_erasure_removes_transcripts_files_streams_keys_and_anonymises_the_ledger(
    fake_llm, events, alice, bob
):
    configure(fake_llm, events)
    chats = [make_chat(fake_llm, alice, title=f"Alice {i}") for i in range(2)]
    bobs = make_chat(fake_llm, bob, title="Bob's")
    files = [name for chat in chats for name in files_of(chat)]
    assert len(files) == 2 and all(storage().exists(name) for name in files)
    assert all(stream_exists(chat.pk) for chat in chats)
    rows = list(Usage.objects.filter(user_id=alice.pk).values_list("pk", flat=True))
    today = timezone.localdate()
    before = usage_summary(today, today).totals
    alice_cost = Usage.objects.filter(pk__in=rows).cost().total

    erasure = lifecycle.erase_user(alice)

    assert (erasure.chats, erasure.files, erasure.streams) == (2, 2, 2)
    assert erasure.idempotency_keys == 2 and erasure.usage_rows == len(rows) == 4
    assert not Chat.objects.filter(user=alice).exists()
    assert not Message.objects.filter(chat_id__in=[c.pk for c in chats]).exists()
    assert not Attachment.objects.filter(message__chat__user=alice).exists()
    assert not any(storage().exists(name) for name in files)
    assert not any(stream_exists(chat.pk) for chat in chats)
    assert not IdempotencyKey.objects.filter(user=alice).exists()
    # the ledger: the amounts stay, without the user or the titles
    kept = Usage.objects.filter(pk__in=rows)
    assert set(kept.values_list("user_id", "chat_title", "error")) == {(None, "", "")}
    assert kept.cost().total == alice_cost
    after = usage_summary(today, today).totals
    assert (after["cost"], after["attempts"]) == (before["cost"], before["attempts"])
    # nothing of bob's moved
    assert Chat.objects.filter(pk=bobs.pk).exists() and stream_exists(bobs.pk)
    assert all(storage().exists(name) for name in files_of(bobs))
    assert IdempotencyKey.objects.filter(user=bob).count() == 1
    assert Usage.objects.filter(user_id=bob.pk).count() == 2
    assert get_user_model().objects.filter(pk=alice.pk).exists()  # the account is the project's


def test_erasure_is_refused_while_a_run_is_in_progress(fake_llm, alice):
    configure(fake_llm)
    chat = make_chat(fake_llm, alice)
    Run.objects.create(chat=chat, status=Run.RUNNING)
    with pytest.raises(lifecycle.ErasureRefused) as info:
        lifecycle.erase_user(alice)
    assert info.value.chat_ids == [chat.pk] and "cancel it" in str(info.value)
    with pytest.raises(CommandError, match="has a run in progress"):
        call_command("llmchat_erase_user", "alice", "--yes")
    assert Chat.objects.filter(pk=chat.pk).exists()


# -- the admin -------------------------------------------------------------------------------
@pytest.fixture
def staff(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client


def test_the_api_delete_removes_the_files_and_keeps_the_ledger(fake_llm, alice):
    from rest_framework.test import APIClient

    configure(fake_llm)
    chat = make_chat(fake_llm, alice)
    files = files_of(chat)
    api = APIClient()
    api.force_authenticate(alice)
    response = api.delete(reverse("llmchat-api:chat-detail", kwargs={"pk": chat.pk}))
    assert response.status_code == 204
    assert not any(storage().exists(name) for name in files)
    assert Usage.objects.filter(chat_id=chat.pk, user_id=alice.pk).count() == 2


@pytest.mark.parametrize(
    "fields, field, reason",
    [
        ({"provider": "nope"}, "provider", "provider 'nope' is not configured; one of:"),
        ({"model_id": "gpt-banned"}, "model_id", "model 'gpt-banned' of 'openai' is not allowed"),
    ],
)
def test_the_chat_admin_checks_provider_and_model_as_the_api(
    fake_llm, staff, fields, field, reason
):
    configure(fake_llm, ALLOWED_MODELS=["openai/gpt-4.1-mini", "anthropic/*"])
    form = {
        "title": "t",
        "provider": "openai",
        "model_id": "gpt-4.1-mini",
        "params": "{}",
        "tools": "[]",
        "context": "{}",
        "schema": "null",
        "history": "null",
        **fields,
    }
    add = reverse("admin:django_llmchat_chat_add")
    page = staff.post(add, form)
    assert page.status_code == 200 and not Chat.objects.exists()
    errors = page.context["adminform"].form.errors
    assert field in errors and reason in errors[field][0]
    # a chat made well, then changed to what the API refuses
    staff.post(add, {**form, "provider": "openai", "model_id": "gpt-4.1-mini"})
    chat = Chat.objects.get()
    change = reverse("admin:django_llmchat_chat_change", args=[chat.pk])
    page = staff.post(change, {**form, "title": "changed"})
    assert field in page.context["adminform"].form.errors
    chat.refresh_from_db()
    assert (chat.title, chat.provider, chat.model_id) == ("t", "openai", "gpt-4.1-mini")
    # another configured and allowed pair is saved
    staff.post(change, {**form, "provider": "anthropic", "model_id": "claude-sonnet-4-5"})
    chat.refresh_from_db()
    assert (chat.provider, chat.model_id) == ("anthropic", "claude-sonnet-4-5")


def test_export_anonymise_and_erase_with_encryption_at_rest(fake_llm, alice, bob):
    from cryptography.fernet import Fernet

    from django_llmchat.models import ToolCall

    configure(fake_llm, ENCRYPTION_KEYS=[Fernet.generate_key().decode()])
    chat = make_chat(fake_llm, alice)
    with connection.cursor() as cursor:
        cursor.execute("SELECT content FROM llmchat_message WHERE chat_id = %s", [chat.pk])
        assert all("Paris" not in (row[0] or "") for row in cursor.fetchall())  # ciphertext
    exported = lifecycle.export_user(alice)["users"][0]["chats"][0]["messages"]
    assert exported[0]["content"] == "Weather in Paris?"
    assert list(exported[1]["tool_calls"].values())[0]["arguments"] == {"city": "Paris"}

    lifecycle.anonymise_chats(Chat.objects.filter(pk=chat.pk))
    assert set(Message.objects.filter(chat=chat).values_list("content", flat=True)) == {""}
    assert [tc.arguments for tc in ToolCall.objects.filter(chat=chat)] == [{}]

    make_chat(fake_llm, bob)
    assert lifecycle.erase_user(bob).chats == 1
