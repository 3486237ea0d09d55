"""``manage.py llmchat_export_finetune``: its filters, and the file it writes."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_llmchat.chats.export import (
    filter_chats,
)
from tests.test_export import _chat, check_line

pytestmark = pytest.mark.django_db


def test_filters_and_the_command(django_user_model, tmp_path):
    ann = django_user_model.objects.create_user("ann")
    bob = django_user_model.objects.create_user("bob")
    liked, (reply,) = _chat(ann, "liked")
    reply.rate(1, user=ann)
    _chat(ann, "plain")
    theirs, _ = _chat(bob, "bob's")
    assert [c.title for c in filter_chats(users=[ann])] == ["liked", "plain"]
    assert [c.title for c in filter_chats(rating=1)] == ["liked"]
    assert list(filter_chats(rating=-1)) == []
    assert [c.title for c in filter_chats(chat_ids=[theirs.pk])] == ["bob's"]

    out = StringIO()
    call_command("llmchat_export_finetune", "--user", "ann", "--rating", "1", stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and check_line(lines[0])["messages"][-1]["content"] == "Hello!"

    target = tmp_path / "train.jsonl"
    err = StringIO()
    call_command("llmchat_export_finetune", "--chat", str(theirs.pk), "-o", str(target), stderr=err)
    assert [check_line(line) for line in target.read_text().splitlines()]
    assert "Wrote 1 conversation to" in err.getvalue()
    with pytest.raises(CommandError, match="No user"):
        call_command("llmchat_export_finetune", "--user", "nobody")
