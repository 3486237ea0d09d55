"""The admin's export and erasure actions (``admin/lifecycle.py``): on the chats and the users,
after a confirmation, the ledger kept, a chat with a run in progress kept."""

from __future__ import annotations

import json

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.urls import reverse

from django_llmchat.admin import erase_llmchat_data, export_llmchat_data
from django_llmchat.models import Attachment, Chat, Run, Usage
from tests.lifecycle_helpers import files_of, make_chat, redis_events

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


# -- the admin -------------------------------------------------------------------------------
@pytest.fixture
def staff(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client


def test_the_chat_admin_exports_the_users_of_the_selected_chats(fake_llm, alice, bob, staff):
    configure(fake_llm)
    chat = make_chat(fake_llm, alice)
    make_chat(fake_llm, bob)
    response = staff.post(
        reverse("admin:django_llmchat_chat_changelist"),
        {"action": "export_users_data", "_selected_action": [chat.pk]},
    )
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert 'filename="llmchat-export-alice.json"' in response["Content-Disposition"]
    (entry,) = json.loads(response.content)["users"]
    assert entry["user"]["username"] == "alice" and len(entry["chats"]) == 1


def test_the_chat_admin_erases_after_a_confirmation(fake_llm, alice, bob, staff):
    configure(fake_llm)
    chat = make_chat(fake_llm, alice)
    make_chat(fake_llm, bob)
    files = files_of(chat)
    changelist = reverse("admin:django_llmchat_chat_changelist")
    selected = {"action": "erase_users_data", "_selected_action": [chat.pk]}
    page = staff.post(changelist, selected)
    assert page.status_code == 200
    assert "alice: 1 chat, 4 messages, 2 usage rows to anonymise" in page.text
    assert "Their usage rows stay for the accounts, anonymised" in page.text
    assert Chat.objects.filter(pk=chat.pk).exists()
    done = staff.post(changelist, {**selected, "post": "yes"}, follow=True)
    assert "Erased 1 chats of alice; 2 usage rows anonymised." in done.text
    assert not Chat.objects.filter(user=alice).exists() and Chat.objects.filter(user=bob).exists()
    assert not any(storage().exists(name) for name in files)


def test_the_user_admin_takes_the_actions(fake_llm, alice, staff, monkeypatch):
    configure(fake_llm)
    make_chat(fake_llm, alice)
    user_admin = admin.site._registry[get_user_model()]
    monkeypatch.setattr(
        user_admin, "actions", [*user_admin.actions, export_llmchat_data, erase_llmchat_data]
    )
    changelist = reverse("admin:auth_user_changelist")
    exported = staff.post(
        changelist, {"action": "export_llmchat_data", "_selected_action": [alice.pk]}
    )
    assert json.loads(exported.content)["users"][0]["user"]["username"] == "alice"
    selected = {"action": "erase_llmchat_data", "_selected_action": [alice.pk]}
    assert "alice: 1 chat" in staff.post(changelist, selected).text
    staff.post(changelist, {**selected, "post": "yes"})
    assert not Chat.objects.filter(user=alice).exists()
    assert get_user_model().objects.filter(pk=alice.pk).exists()


def test_the_chat_delete_pages_say_the_ledger_stays(fake_llm, alice, staff):
    configure(fake_llm)
    chat = make_chat(fake_llm, alice)
    files = files_of(chat)
    page = staff.get(reverse("admin:django_llmchat_chat_delete", args=[chat.pk]))
    assert page.status_code == 200
    assert "The usage rows of this chat stay" in page.text
    assert "This chat has 2 usage rows" in page.text
    selected = staff.post(
        reverse("admin:django_llmchat_chat_changelist"),
        {"action": "delete_selected", "_selected_action": [chat.pk]},
    )
    assert "The usage rows of these chats stay" in selected.text
    staff.post(reverse("admin:django_llmchat_chat_delete", args=[chat.pk]), {"post": "yes"})
    assert not Chat.objects.filter(pk=chat.pk).exists()
    assert Usage.objects.filter(chat_id=chat.pk).count() == 2
    assert not any(storage().exists(name) for name in files)


def test_the_admin_keeps_a_chat_with_a_run_in_progress(fake_llm, alice, staff):
    """Its delete page is refused, and so is a bulk delete that selects it; the idle
    chats delete as usual (each under its lock, so no run starts meanwhile)."""

    configure(fake_llm)
    busy, idle = make_chat(fake_llm, alice), make_chat(fake_llm, alice)
    Run.objects.create(chat=busy, status=Run.AWAITING_APPROVAL)
    page = staff.get(reverse("admin:django_llmchat_chat_delete", args=[busy.pk]))
    assert page.status_code == 403
    changelist = reverse("admin:django_llmchat_chat_changelist")
    selected = {"action": "delete_selected", "_selected_action": [busy.pk, idle.pk]}
    assert staff.post(changelist, {**selected, "post": "yes"}).status_code == 403
    assert Chat.objects.filter(pk__in=[busy.pk, idle.pk]).count() == 2
    only_idle = {"action": "delete_selected", "_selected_action": [idle.pk], "post": "yes"}
    staff.post(changelist, only_idle)
    assert list(Chat.objects.filter(pk__in=[busy.pk, idle.pk]).values_list("pk", flat=True)) == [
        busy.pk
    ]
