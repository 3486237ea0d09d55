"""Archive, pin and tags from Python (``chat.archive()``, ``chat.set_tags()``,
``Chat.objects.tagged()``), through the lifecycle (export, anonymise, delete) and in the
admin (form, filters, actions, search box)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_llmchat.errors import ArgumentError
from django_llmchat.lifecycle import anonymise_chats, export_user, purge_chats
from django_llmchat.models import Chat, ChatTag

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("tagadmin", "t@example.com", "pw")
    client.force_login(user)
    return client


def test_archive_and_pin_save_their_column_alone(django_user_model):
    chat = Chat.objects.create(title="t")
    before = Chat.objects.get(pk=chat.pk).updated_at
    Chat.objects.filter(pk=chat.pk).update(title="changed elsewhere")
    assert chat.archive() is chat and chat.pin() is chat
    row = Chat.objects.get(pk=chat.pk)
    assert row.archived and row.pinned
    assert row.title == "changed elsewhere"  # only the columns asked for were written
    assert row.updated_at == before
    chat.unarchive().unpin()
    row.refresh_from_db()
    assert not row.archived and not row.pinned
    with pytest.raises(ArgumentError):
        Chat(title="unsaved").pin()


def test_tags_set_add_remove():
    chat = Chat.objects.create(title="t")
    assert chat.tags == []
    chat.set_tags(["work", "home", "work"])
    assert chat.tags == ["home", "work"]
    assert Chat.objects.get(pk=chat.pk).tags == ["home", "work"]
    chat.add_tags("urgent", "home")
    assert Chat.objects.get(pk=chat.pk).tags == ["home", "urgent", "work"]
    chat.remove_tags("home", "not there")
    assert Chat.objects.get(pk=chat.pk).tags == ["urgent", "work"]
    assert ChatTag.objects.filter(chat=chat).count() == 2
    chat.set_tags([])
    assert Chat.objects.get(pk=chat.pk).tags == [] and not ChatTag.objects.exists()


@pytest.mark.parametrize(
    "tags", [["a,b"], [""], [" lead"], ["x" * 65], [1], "work", ["ok", "bad\x00"]]
)
def test_bad_tags_are_an_argument_error_and_change_nothing(tags):
    chat = Chat.objects.create(title="t").set_tags(["kept"])
    with pytest.raises(ArgumentError):
        chat.set_tags(tags)
    assert Chat.objects.get(pk=chat.pk).tags == ["kept"]


def test_add_tags_counts_the_ones_the_chat_has():
    chat = Chat.objects.create(title="t").set_tags([f"t{i}" for i in range(19)])
    chat.add_tags("t0", "last")  # a tag it has is no new one
    assert len(Chat.objects.get(pk=chat.pk).tags) == 20
    with pytest.raises(ArgumentError, match="at most 20"):
        chat.add_tags("one too many")
    assert len(Chat.objects.get(pk=chat.pk).tags) == 20


def test_tagged_and_with_tags():
    a = Chat.objects.create(title="a").set_tags(["x", "y"])
    b = Chat.objects.create(title="b").set_tags(["x"])
    Chat.objects.create(title="c")
    assert set(Chat.objects.tagged("x")) == {a, b}
    assert list(Chat.objects.tagged("x", "y")) == [a]
    assert list(Chat.objects.tagged("nope")) == []
    rows = {c.title: c.tags for c in Chat.objects.with_tags()}
    assert rows == {"a": ["x", "y"], "b": ["x"], "c": []}


def test_anonymise_drops_the_tags_delete_drops_the_rows(django_user_model):
    user = django_user_model.objects.create_user("tagger-life", password="pw")
    chat = Chat.objects.create(user=user, title="t", pinned=True).set_tags(["private"])
    exported = export_user(user)["users"][0]["chats"][0]
    assert exported["tags"] == ["private"] and exported["pinned"] is True
    assert exported["archived"] is False
    anonymise_chats(Chat.objects.filter(pk=chat.pk))
    assert Chat.objects.get(pk=chat.pk).tags == []
    other = Chat.objects.create(title="o").set_tags(["gone"])
    purge_chats(Chat.objects.filter(pk=other.pk))
    assert not ChatTag.objects.exists()


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
