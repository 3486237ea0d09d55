"""``manage.py llmchat_erase_user``: asks first, may delete the account, wants --yes without a
terminal."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from django_llmchat.models import Chat, Usage
from tests.lifecycle_helpers import make_chat, redis_events

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def events():
    yield from redis_events()


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice")


def configure(fake_llm, events=None, **llmchat):
    return fake_llm.configure("openai", "gpt-4.1-mini", **(events or {}), **llmchat)


def test_the_erase_command_asks_first_and_may_delete_the_account(fake_llm, alice, monkeypatch):
    configure(fake_llm)
    make_chat(fake_llm, alice)
    monkeypatch.setattr("builtins.input", lambda prompt: "no")
    with pytest.raises(CommandError, match="Nothing was erased"):
        call_command("llmchat_erase_user", "alice")
    assert Chat.objects.filter(user=alice).exists()
    asked = []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "yes")
    out = StringIO()
    call_command("llmchat_erase_user", "alice", "--delete-user", stdout=out)
    assert "Erase 1 chat of alice and anonymise 2 usage rows and delete the account" in asked[0]
    assert "Erased 1 chat of alice (1 attachment files" in out.getvalue()
    assert "the account is deleted" in out.getvalue()
    assert not get_user_model().objects.filter(pk=alice.pk).exists()
    assert Usage.objects.count() == 2 and not Usage.objects.exclude(user_id=None).exists()


@pytest.mark.parametrize("stdin", ["closed", "empty"])
def test_the_erase_command_with_no_terminal_asks_for_yes(fake_llm, alice, monkeypatch, stdin):
    import os
    import sys

    configure(fake_llm)
    make_chat(fake_llm, alice)
    # what cron, CI or `... < /dev/null` give it: input() meets end of file
    source = open(os.devnull) if stdin == "closed" else StringIO("")
    monkeypatch.setattr(sys, "stdin", source)
    try:
        with pytest.raises(CommandError) as info:
            call_command("llmchat_erase_user", "alice", stdout=StringIO())
    finally:
        source.close()
    assert "Nothing was erased" in str(info.value) and "Pass --yes" in str(info.value)
    assert not isinstance(info.value.__cause__, EOFError) and info.value.__suppress_context__
    assert Chat.objects.filter(user=alice).exists()
    assert Usage.objects.filter(user_id=alice.pk).count() == 2
