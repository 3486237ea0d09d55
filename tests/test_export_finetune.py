"""``manage.py llmchat_export_finetune``: its filters, and the file it writes."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_llmchat.chats.export import (
    filter_chats,
)
from django_llmchat.models import Chat

pytestmark = pytest.mark.django_db


ROLES = {"system", "user", "assistant", "tool"}


def check_line(line: str) -> dict:
    """``line`` parses and follows OpenAI's chat fine-tuning format: known keys, roles, a
    system message first if any, every tool call answered by the tool messages right after
    it (and only then), arguments as JSON strings, weight 0/1 on assistant messages only,
    an assistant message last."""
    example = json.loads(line)
    assert "\n" not in line
    assert set(example) <= {"messages", "tools", "parallel_tool_calls"}
    messages = example["messages"]
    assert messages and messages[-1]["role"] == "assistant"
    waiting: list[str] = []  # call ids the next tool messages answer, in order
    for index, m in enumerate(messages):
        assert m["role"] in ROLES
        if m["role"] == "system":
            assert index == 0 and isinstance(m["content"], str)
        if waiting:
            assert m["role"] == "tool", f"call(s) {waiting} left unanswered"
        if m["role"] == "tool":
            assert set(m) == {"role", "tool_call_id", "content"}
            assert waiting and m["tool_call_id"] == waiting.pop(0)
            assert isinstance(m["content"], str)
            continue
        if "weight" in m:
            assert m["role"] == "assistant" and m["weight"] in (0, 1)
        if m["role"] == "assistant":
            assert set(m) <= {"role", "content", "tool_calls", "weight"}
            assert "content" in m or "tool_calls" in m
            for call in m.get("tool_calls", ()):
                assert set(call) == {"id", "type", "function"} and call["type"] == "function"
                assert set(call["function"]) == {"name", "arguments"}
                assert isinstance(call["function"]["arguments"], str)
                json.loads(call["function"]["arguments"])
                waiting.append(call["id"])
            assert len(set(waiting)) == len(waiting)
        else:
            assert set(m) == {"role", "content"} and isinstance(m["content"], str)
    assert not waiting
    for definition in example.get("tools", ()):
        assert definition["type"] == "function"
        assert {"name", "parameters"} <= set(definition["function"])
    return example


def _chat(user=None, title="", turns=(("Hi", "Hello!"),)):
    chat = Chat.objects.create(user=user, title=title, provider="openai", model_id="m")
    replies = []
    for prompt, answer in turns:
        chat.add_message(role="user", content=prompt)
        replies.append(chat.add_message(role="assistant", content=answer))
    return chat, replies


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
