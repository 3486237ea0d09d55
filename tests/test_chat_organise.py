"""Archive, pin and tags from Python (``chat.archive()``, ``chat.set_tags()``,
``Chat.objects.tagged()``), through the lifecycle (export, anonymise, delete) and in the
admin (form, filters, actions, search box)."""

from __future__ import annotations

import pytest

from django_llmchat.errors import ArgumentError
from django_llmchat.models import Chat, ChatTag

pytestmark = pytest.mark.django_db


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
