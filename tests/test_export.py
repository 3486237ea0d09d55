"""The fine-tuning export (django_llmchat.chats.export, manage.py llmchat_export_finetune, the
chat admin's action): each line is one example in OpenAI's chat fine-tuning format."""

from __future__ import annotations

import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.urls import reverse

from django_llmchat.chats.export import (
    finetune_example,
    finetune_lines,
    transcripts_json,
)
from django_llmchat.models import Chat, Message
from django_llmchat.models import ToolCall as StoredToolCall
from django_llmchat.testing import FakeProviderServer, Reply, ToolCall
from django_llmchat.tools import tool

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


@tool
def forecast(city: str) -> str:
    """Gets tomorrow's weather for a city"""
    return f"rain in {city}"


@tool(requires_approval=True)
def book_flight(city: str) -> str:
    """Books a flight to a city"""
    return f"booked {city}"


@pytest.fixture
def server():
    server = FakeProviderServer().start()
    with override_settings(LLMCHAT=server.llmchat_settings("openai", "gpt-4.1-mini")):
        yield server
    server.stop()


def test_a_run_with_tool_calls_and_a_denied_call_exports_in_the_format(server, django_user_model):
    ann = django_user_model.objects.create_user("ann")
    chat = Chat.objects.create(user=ann, provider="openai", model_id="gpt-4.1-mini")
    chat.with_instructions("You plan trips.").with_tools(forecast, book_flight)
    server.script(
        Reply(
            tool_calls=[
                ToolCall("forecast", {"city": "Oslo"}, call_id="call_f"),
                ToolCall("book_flight", {"city": "Oslo"}, call_id="call_b"),
            ]
        ),
        Reply("Rain in Oslo; I did not book the flight."),
    )
    list(chat.stream("Weather in Oslo, and book me a flight"))
    assert chat.deny("call_b").content == "Rain in Oslo; I did not book the flight."
    server.script(Reply("Take an umbrella."))
    chat.ask("Anything else?").rate(-1, comment="obvious", user=ann)

    lines = list(finetune_lines(Chat.objects.filter(pk=chat.pk)))
    assert len(lines) == 1
    example = check_line(lines[0])
    roles = [m["role"] for m in example["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant"] + [
        "user",
        "assistant",
    ]
    system, _, calls, forecast_result, denied, answer, _, disliked = example["messages"]
    assert system == {"role": "system", "content": "You plan trips."}
    assert [c["function"] for c in calls["tool_calls"]] == [
        {"name": "forecast", "arguments": '{"city":"Oslo"}'},
        {"name": "book_flight", "arguments": '{"city":"Oslo"}'},
    ]
    assert "content" not in calls  # a call-only reply: no empty content
    assert forecast_result == {"role": "tool", "tool_call_id": "call_f", "content": "rain in Oslo"}
    assert denied["tool_call_id"] == "call_b"
    assert json.loads(denied["content"])["error"]["type"] == "denied"
    assert "weight" not in answer and "weight" not in calls
    assert disliked == {"role": "assistant", "content": "Take an umbrella.", "weight": 0}
    tools = {t["function"]["name"]: t["function"] for t in example["tools"]}
    assert tools["forecast"]["description"] == "Gets tomorrow's weather for a city"
    assert tools["book_flight"]["parameters"]["required"] == ["city"]


def _chat(user=None, title="", turns=(("Hi", "Hello!"),)):
    chat = Chat.objects.create(user=user, title=title, provider="openai", model_id="m")
    replies = []
    for prompt, answer in turns:
        chat.add_message(role="user", content=prompt)
        replies.append(chat.add_message(role="assistant", content=answer))
    return chat, replies


def test_a_thumbs_down_gives_its_whole_turn_weight_zero():
    chat, _ = _chat(turns=(("Book it", "Done."),))
    chat.add_message(role="user", content="And the hotel?")
    calling = Message.objects.create(chat=chat, role="assistant", content="Checking.")
    call = StoredToolCall.objects.create(message=calling, call_id="c1", name="look", arguments={})
    Message.objects.create(chat=chat, role="tool", content="ok", parent_tool_call=call)
    final = chat.add_message(role="assistant", content="Booked.")
    final.rate(-1)
    example = check_line(next(finetune_lines([chat])))
    weights = [m.get("weight") for m in example["messages"] if m["role"] == "assistant"]
    assert weights == [None, 0, 0]  # the earlier turn's reply is still learnt


def test_what_the_example_leaves_out():
    chat, _ = _chat(turns=(("Q1", "A1"),))
    # an unanswered prompt at the end, a call still waiting, a summary: not in the example
    waiting = chat.add_message(role="assistant", content="")
    StoredToolCall.objects.create(message=waiting, call_id="w", name="pay", arguments={})
    chat.add_message(role="user", content="Still there?")
    example = check_line(next(finetune_lines([chat])))
    assert [m["content"] for m in example["messages"]] == ["Q1", "A1"]
    empty, _ = _chat(turns=())
    empty.add_message(role="user", content="No reply yet")
    assert list(finetune_lines([empty])) == []
    assert finetune_example([]) is None


def test_raw_arguments_that_never_parsed_go_back_as_they_came():
    chat, _ = _chat(turns=(("Q", "A"),))
    calling = chat.add_message(role="assistant", content="")
    call = StoredToolCall.objects.create(
        message=calling, call_id="r", name="look", arguments={"_raw": '{"city": "Os'}
    )
    Message.objects.create(chat=chat, role="tool", content="bad json", parent_tool_call=call)
    chat.add_message(role="assistant", content="Sorry.")
    example = json.loads(next(finetune_lines([chat])))
    calls = [m for m in example["messages"] if m.get("tool_calls")]
    assert calls[0]["tool_calls"][0]["function"]["arguments"] == '{"city": "Os'


def test_the_admin_action_downloads_the_selected_chats(admin_client):
    first, _ = _chat(title="first")
    _chat(title="second")
    response = admin_client.post(
        reverse("admin:django_llmchat_chat_changelist"),
        {"action": "export_finetune", "_selected_action": [first.pk]},
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/jsonl")
    assert "llmchat-finetune.jsonl" in response["Content-Disposition"]
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert [check_line(line)["messages"][0]["content"] for line in lines] == ["Hi"]


def test_plain_json_keeps_the_tree_the_tool_round_and_the_cost(server, django_user_model):
    """The plain JSON export of a chat with a tool round, a regenerated reply and a rating:
    the active path with each message's id and parent, the call and its result, the
    reply's cost from its usage row, and the totals over every branch."""
    ann = django_user_model.objects.create_user("ann")
    chat = Chat.objects.create(user=ann, provider="openai", model_id="gpt-4.1-mini")
    chat.with_tools(forecast)
    server.script(
        Reply(tool_calls=[ToolCall("forecast", {"city": "Oslo"}, call_id="call_f")]),
        Reply("Rain.", usage={"input_tokens": 10, "output_tokens": 2}),
        Reply("Rain, says the forecast.", usage={"input_tokens": 10, "output_tokens": 5}),
    )
    chat.ask("Weather in Oslo?")
    reply = chat.regenerate()
    reply.rate(1, user=ann)

    [data] = json.loads("".join(transcripts_json(Chat.objects.filter(pk=chat.pk))))
    messages = data["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["content"] == "Rain, says the forecast."
    assert messages[1]["parent"] == messages[0]["id"] and messages[0]["parent"] is None
    assert messages[1]["feedback"] == [1] and Decimal(messages[1]["cost"]) == reply.cost().total
    # the first branch (its tool round) is kept: switch to it and export it
    first = Message.objects.get(chat=chat, content="Rain.")
    chat.switch_to(first)
    [data] = json.loads("".join(transcripts_json([Chat.objects.get(pk=chat.pk)])))
    roles = [m["role"] for m in data["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    _, calls, result, answer = data["messages"]
    assert calls["tool_calls"]["call_f"]["arguments"] == {"city": "Oslo"}
    assert result["tool_call_id"] == "call_f" and result["parent"] == calls["id"]
    assert answer["parent"] == result["id"] and answer["content"] == "Rain."
    # totals count every branch
    assert data["tokens"] == chat.tokens.to_dict() and data["user"] == ann.pk
    assert data["tokens"]["output_tokens"] > 2 + 5  # the tool round's attempt too
    assert Decimal(data["cost"]) == chat.cost().total > 0


def test_plain_json_from_the_command_and_the_admin(admin_client, tmp_path):
    first, _ = _chat(title="first")
    second, _ = _chat(title="second", turns=(("Yo", "Hey"),))
    out = StringIO()
    call_command("llmchat_export_finetune", "--format", "json", "--chat", str(first.pk), stdout=out)
    assert [c["title"] for c in json.loads(out.getvalue())] == ["first"]
    target = tmp_path / "all.json"
    err = StringIO()
    call_command("llmchat_export_finetune", "--format", "json", "-o", str(target), stderr=err)
    assert [c["title"] for c in json.loads(target.read_text())] == ["first", "second"]
    assert "Wrote 2 chat(s)" in err.getvalue()
    assert json.loads("".join(transcripts_json(Chat.objects.none()))) == []
    response = admin_client.post(
        reverse("admin:django_llmchat_chat_changelist"),
        {"action": "export_transcripts", "_selected_action": [second.pk]},
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/json")
    assert "llmchat-transcripts.json" in response["Content-Disposition"]
    [data] = json.loads(b"".join(response.streaming_content))
    assert [m["content"] for m in data["messages"]] == ["Yo", "Hey"]


@pytest.mark.parametrize("cursors_disabled", [False, True])
def test_an_export_of_more_than_a_chunk_outside_a_transaction_keeps_its_cursor(
    transactional_db, monkeypatch, cursors_disabled
):
    """Read 100 chats at a time with autocommit on, a second connection taking a server
    session between two chunks: behind PgBouncer in transaction mode (CI's pgbouncer
    cell) a server-side cursor opened outside a transaction is then lost ("cursor does
    not exist"). The export reads in one transaction, or with ordinary queries where the
    database's DISABLE_SERVER_SIDE_CURSORS is set."""
    import psycopg
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("server-side cursors are PostgreSQL's")
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", cursors_disabled)
    Chat.objects.bulk_create([Chat(title=f"export {i}") for i in range(130)])
    assert not connection.in_atomic_block
    seen = []

    def path(chat):
        # a chunked read here is either inside a transaction or not server-side at all
        seen.append((chat.title, connection.in_atomic_block))
        return []

    other = psycopg.connect(**connection.get_connection_params())
    try:
        pieces = transcripts_json(Chat.objects.order_by("pk"), path=path)
        head = [next(pieces), next(pieces)]  # "[" and the first chat: a chunk read
        assert '"export 0"' in head[1]
        # another client in a transaction: a pooler hands it the idle server session
        other.execute("SELECT 1")
        exported = json.loads("".join(head) + "".join(pieces))
    finally:
        other.close()
    assert [chat["title"] for chat in exported] == [f"export {i}" for i in range(130)]
    assert [title for title, _ in seen] == [f"export {i}" for i in range(130)]
    assert {in_transaction for _, in_transaction in seen} == {not cursors_disabled}
    assert not connection.in_atomic_block
