"""A chat's tag rows (``models/tag.py``): anonymising drops them, deleting the chat deletes
them."""

from __future__ import annotations

import pytest

from django_llmchat.chats.lifecycle import anonymise_chats, export_user, purge_chats
from django_llmchat.models import Chat, ChatTag

pytestmark = pytest.mark.django_db


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
