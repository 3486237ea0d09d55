"""The path checker users' tests (and the model-based test) call after each step: it
passes on the paths the package keeps and names what is wrong on broken ones."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat.models import Chat, Message
from django_llmchat.testing.invariants import assert_one_path, path_problems

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat():
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    chat.with_instructions("Be brief.")
    return chat


def add(chat, role, content, parent=None, on_path=True):
    message = Message(chat=chat, role=role, content=content, on_path=on_path)
    if parent is not None or not on_path:
        message.parent_id = getattr(parent, "pk", parent)
        message.placed = True
    message.save()
    return message


def test_a_chain_passes_in_one_query(chat):
    a = add(chat, "user", "A")
    reply = add(chat, "assistant", "a")
    add(chat, "user", "B", parent=a, on_path=False)  # another branch, off the path
    chat.add_message(role="system", content="summary", summary_until=reply)
    with CaptureQueriesContext(connection) as ctx:
        assert path_problems(chat) == []
    assert len(ctx) == 1
    assert_one_path(chat.pk)
    assert_one_path(Chat.objects.create(provider="openai", model_id="gpt-4.1-mini"))


def test_two_branches_on_the_path_are_named(chat):
    a = add(chat, "user", "A")
    b = add(chat, "assistant", "a")
    other = add(chat, "user", "C", parent=a)  # a second child of A on the path
    with pytest.raises(AssertionError, match=f"message {a.pk} has 2 children on the path"):
        assert_one_path(chat)
    assert any(f"message {other.pk} follows message {b.pk}" in p for p in path_problems(chat))


def test_an_ancestor_off_the_path_is_named(chat):
    a = add(chat, "user", "A")
    b = add(chat, "assistant", "a")
    Message.objects.filter(pk=a.pk).update(on_path=False)
    assert path_problems(chat) == [
        "the path has 0 messages without a parent: []",
        f"message {b.pk} is on the path, its parent {a.pk} is not",
    ]


def test_two_roots_and_a_stray_summary_are_named(chat):
    a = add(chat, "user", "A")
    add(chat, "user", "B", parent=None)  # placed: a second root on the path
    Message.objects.filter(chat=chat, content="B").update(parent=None)
    summary = chat.add_message(role="system", content="summary", summary_until=a)
    Message.objects.filter(pk=a.pk).update(on_path=False)
    problems = path_problems(chat)
    assert f"summary {summary.pk} is on the path while message {a.pk} it covers is off" in (
        problems
    )
    Message.objects.filter(pk=a.pk).update(on_path=True)
    assert path_problems(chat)[0].startswith("the path has 2 messages without a parent")
