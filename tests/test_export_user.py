"""``manage.py llmchat_export_user``: a user's data as JSON."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tests.lifecycle_helpers import make_chat, redis_events

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


def configure(fake_llm, events=None, **llmchat):
    return fake_llm.configure("openai", "gpt-4.1-mini", **(events or {}), **llmchat)


def test_the_export_command_writes_json(fake_llm, alice, bob, tmp_path):
    configure(fake_llm)
    make_chat(fake_llm, alice)
    make_chat(fake_llm, bob, title="Bob's")
    out = StringIO()
    call_command("llmchat_export_user", "alice", stdout=out)
    (entry,) = json.loads(out.getvalue())["users"]
    assert entry["user"]["username"] == "alice" and len(entry["chats"]) == 1
    target = tmp_path / "bob.json"
    err = StringIO()
    call_command(
        "llmchat_export_user", str(bob.pk), "--pk", "--files", output=str(target), stderr=err
    )
    (entry,) = json.loads(target.read_text())["users"]
    assert entry["chats"][0]["title"] == "Bob's"
    assert "data_base64" in entry["chats"][0]["messages"][0]["attachments"][0]
    assert "Wrote 1 chats and 2 usage rows of bob" in err.getvalue()
    with pytest.raises(CommandError, match="No user with username 'carol'"):
        call_command("llmchat_export_user", "carol")
