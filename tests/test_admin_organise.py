"""Archive, pin and tags in the admin (``admin/organise.py``): the form, the actions, the
list's filters and search box."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_llmchat.models import Chat

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("tagadmin", "t@example.com", "pw")
    client.force_login(user)
    return client


# -- admin ----------------------------------------------------------------------------------
def test_admin_form_edits_archived_pinned_and_tags(admin_client, settings):
    settings.LLMCHAT = {**settings.LLMCHAT, "PROVIDERS": {"openai": {"api_key": "k"}}}
    chat = Chat.objects.create(title="edit me", model_id="gpt-4.1-mini", provider="openai")
    chat.set_tags(["old"])
    change = reverse("admin:django_llmchat_chat_change", args=[chat.pk])
    page = admin_client.get(change).content.decode()
    assert 'name="tags"' in page and 'value="old"' in page
    form = {
        "title": "edit me",
        "provider": "openai",
        "model_id": "gpt-4.1-mini",
        "params": "{}",
        "tools": "[]",
        "context": "{}",
        "schema": "null",
        "history": "null",
        "archived": "on",
        "pinned": "on",
        "tags": " work , Trip 2026,,work",
    }
    response = admin_client.post(change, form)
    assert response.status_code == 302, response.context["adminform"].form.errors
    chat.refresh_from_db()
    assert chat.archived and chat.pinned and chat.tags == ["Trip 2026", "work"]

    response = admin_client.post(change, {**form, "tags": "a\tb"})
    assert response.status_code == 200  # the form again, with the error
    assert "control characters" in response.content.decode()
    assert Chat.objects.get(pk=chat.pk).tags == ["Trip 2026", "work"]


def test_admin_actions_archive_and_pin(admin_client):
    chats = [Chat.objects.create(title=f"act {i}") for i in range(3)]
    before = {c.pk: Chat.objects.get(pk=c.pk).updated_at for c in chats}
    changelist = reverse("admin:django_llmchat_chat_changelist")
    chosen = [str(chats[0].pk), str(chats[1].pk)]
    for action, field, value in [
        ("archive_chats", "archived", True),
        ("pin_chats", "pinned", True),
        ("unarchive_chats", "archived", False),
        ("unpin_chats", "pinned", False),
    ]:
        response = admin_client.post(
            changelist, {"action": action, "_selected_action": chosen}, follow=True
        )
        assert response.status_code == 200
        assert "2 chat(s)" in response.content.decode()
        values = dict(Chat.objects.values_list("pk", field))
        assert values[chats[0].pk] is value and values[chats[1].pk] is value
        assert values[chats[2].pk] is False
    assert {c.pk: c.updated_at for c in Chat.objects.all()} == before


def test_admin_list_filters_and_search_box(admin_client, django_user_model):
    alice = django_user_model.objects.create_user("alice-tags", email="alice@example.org")
    a = Chat.objects.create(title="first", user=alice, archived=True).set_tags(["work"])
    b = Chat.objects.create(title="second", pinned=True).set_tags(["home"])
    b.add_message("user", "a question about croissants")
    changelist = reverse("admin:django_llmchat_chat_changelist")

    def titles(query):
        response = admin_client.get(changelist, query)
        assert response.status_code == 200
        html = response.content.decode()
        return {t for t in ("first", "second") if f">{t}<" in html}

    assert titles({}) == {"first", "second"}  # the admin lists archived chats too
    assert titles({"archived__exact": "1"}) == {"first"}
    assert titles({"pinned__exact": "1"}) == {"second"}
    assert titles({"tag": "work"}) == {"first"}
    page = admin_client.get(changelist).content.decode()
    assert "work (1)" in page and "home (1)" in page  # the tag filter's choices
    assert titles({"q": "croissants"}) == {"second"}  # a message's words
    assert titles({"q": "alice-t"}) == {"first"}  # the user's name, in part
    assert titles({"q": "example.org"}) == {"first"}  # the user's email
    assert titles({"q": "seco"}) == {"second"}  # the title, in part
    assert titles({"q": "   "}) == {"first", "second"}
    assert titles({"q": "!!"}) == set()  # no word: title and user only
    assert a.tags == ["work"]
