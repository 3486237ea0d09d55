"""The Message API, row by row against RubyLLM's Message reference (DESIGN section 4)."""

from decimal import Decimal

import pytest

from django_llmchat.errors import ArgumentError, StructuredOutputError
from django_llmchat.models import Chat, LLMModel, Message, ToolCall, Usage
from django_llmchat.values import Citation, Cost, ServerToolCall, Thinking, Tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat():
    return Chat.objects.create(title="t", model_id="gpt-4.1-mini", provider="openai")


def reload(message):
    return Message.objects.transcript().get(pk=message.pk)


def test_roles():
    assert Message.ROLES == ("system", "user", "assistant", "tool")


def test_basic_fields(chat):
    m = chat.add_message(
        role="assistant",
        content="Paris.",
        model_id="gpt-4.1-mini",
        finish_reason="stop",
        raw={"id": "resp_1"},
    )
    m = reload(m)
    assert (m.role, m.content, m.model_id, m.finish_reason, m.raw) == (
        "assistant",
        "Paris.",
        "gpt-4.1-mini",
        "stop",
        {"id": "resp_1"},
    )


def test_add_message_rejects_bad_role(chat):
    with pytest.raises(ArgumentError, match="role must be one of"):
        chat.add_message(role="robot", content="x")


def test_thinking(chat):
    m = chat.add_message(role="assistant", content="x")
    assert m.thinking is None
    m.thinking = Thinking("step by step", "sig-1")
    m.save()
    assert reload(m).thinking == Thinking("step by step", "sig-1")


def test_citations_and_server_tool_calls_are_values(chat):
    m = chat.add_message(
        role="assistant",
        content="x",
        citations=[Citation(url="https://a.example", title="A"), {"url": "https://b.example"}],
        server_tool_calls=[ServerToolCall(name="web_search", id="srv_1", arguments={"q": "x"})],
    )
    m = reload(m)
    assert m.citations == [
        Citation(url="https://a.example", title="A"),
        Citation(url="https://b.example"),
    ]
    assert m.server_tool_calls == [
        ServerToolCall(name="web_search", id="srv_1", arguments={"q": "x"})
    ]


def _tool_exchange(chat, finish="tool_calls"):
    a = chat.add_message(
        role="assistant", content="", finish_reason=finish, model_id="gpt-4.1-mini"
    )
    tc1 = ToolCall.objects.create(
        chat=chat, message=a, call_id="call_1", name="weather", arguments={"city": "Paris"}
    )
    tc2 = ToolCall.objects.create(chat=chat, message=a, call_id="call_2", name="time", arguments={})
    r1 = chat.add_message(role="tool", content="sunny", parent_tool_call=tc1)
    r2 = chat.add_message(role="tool", content="noon", parent_tool_call=tc2)
    return a, r1, r2


def test_tool_calls_tool_call_id_and_results(chat):
    a, r1, r2 = _tool_exchange(chat)
    a = reload(a)
    assert [tc.call_id for tc in a.tool_calls.all()] == ["call_1", "call_2"]
    assert a.is_tool_call and not a.is_tool_result
    assert reload(r1).tool_call_id == "call_1"
    assert reload(r1).is_tool_result and not reload(r1).is_tool_call
    assert list(a.tool_results) == [r1, r2]
    user = chat.add_message(role="user", content="hi")
    assert list(user.tool_results) == []
    assert user.tool_call_id is None and not user.is_tool_result
    assert a.to_dict()["tool_calls"] == {
        "call_1": {"id": "call_1", "name": "weather", "arguments": {"city": "Paris"}},
        "call_2": {"id": "call_2", "name": "time", "arguments": {}},
    }
    assert reload(r1).to_dict()["tool_call_id"] == "call_1"


@pytest.mark.parametrize(
    "finish, with_calls, stopped, tool_call_stop, max_tokens, filtered",
    [
        ("stop", False, True, False, False, False),
        ("stop", True, False, True, False, False),
        ("tool_calls", True, False, True, False, False),
        ("max_tokens", False, False, False, True, False),
        ("content_filter", False, False, False, False, True),
        ("pause_turn", False, False, False, False, False),
    ],
)
def test_finish_reason_predicates(
    chat, finish, with_calls, stopped, tool_call_stop, max_tokens, filtered
):
    if with_calls:
        m, _, _ = _tool_exchange(chat, finish=finish)
    else:
        m = chat.add_message(role="assistant", content="x", finish_reason=finish)
    m = reload(m)
    assert m.is_stopped is stopped
    assert m.is_tool_call_stop is tool_call_stop
    assert m.is_max_tokens is max_tokens
    assert m.is_content_filtered is filtered


def test_cache_until_here(chat):
    m = chat.add_message(role="user", content="long document")
    assert m.is_cache_boundary is False
    assert m.cache_until_here() is m
    assert m.is_cache_boundary and reload(m).is_cache_boundary
    assert reload(m).to_dict()["cache_until_here"] is True
    assert "cache_until_here" not in chat.add_message(role="user", content="q").to_dict()


def test_parsed(chat):
    m = chat.add_message(role="assistant", content='{"name": "Alice", "age": 30}')
    assert m.parsed == {"name": "Alice", "age": 30}
    assert m.parsed is m.parsed  # memoized
    assert chat.add_message(role="assistant", content="").parsed is None
    bad = chat.add_message(role="assistant", content="not json")
    with pytest.raises(StructuredOutputError, match="not valid JSON"):
        _ = bad.parsed


def test_tokens_hand_built_vs_usage_rows(chat):
    m = chat.add_message(role="assistant", content="x", tokens=Tokens(10, 5))
    assert reload(m).tokens == Tokens(10, 5)
    Usage.objects.create(chat=chat, message=m, status="failed", input_tokens=7)
    Usage.objects.create(
        chat=chat,
        message=m,
        status="succeeded",
        input_tokens=100,
        output_tokens=50,
        cache_read_tokens=20,
        thinking_tokens=10,
    )
    t = reload(m).tokens
    assert t == Tokens(107, 50, 20, None, 10)
    assert t.total_tokens == 177


def test_cost_precedence(chat):
    LLMModel.objects.create(
        provider="openai",
        model_id="gpt-4.1-mini",
        name="GPT-4.1 mini",
        pricing={"input_mtok": "0.4", "output_mtok": "1.6"},
    )
    # 1. priced from model_info when nothing was recorded or supplied
    m = chat.add_message(
        role="assistant", content="x", model_id="gpt-4.1-mini", tokens=Tokens(1_000_000, 1_000_000)
    )
    assert reload(m).cost().total == Decimal("2.0")
    # 2. a supplied cost wins over pricing
    m.supplied_cost = Decimal("0.5")
    m.save()
    assert reload(m).cost() == Cost(total=Decimal("0.5"))
    assert reload(m).to_dict()["cost"] == {"total": "0.5000000000"}
    # 3. recorded attempt costs win over both
    Usage.objects.create(
        chat=chat,
        message=m,
        status="failed",
        total_cost=Decimal("0.01"),
        input_cost=Decimal("0.01"),
        input_tokens=10,
    )
    Usage.objects.create(
        chat=chat,
        message=m,
        status="succeeded",
        total_cost=Decimal("0.02"),
        input_cost=Decimal("0.015"),
        output_cost=Decimal("0.005"),
        input_tokens=10,
        output_tokens=5,
    )
    c = reload(m).cost()
    assert c.total == Decimal("0.03") and c.input == Decimal("0.025")
    # 4. an explicit model reprices the tokens
    other = LLMModel.objects.create(
        provider="x",
        model_id="cheap",
        name="Cheap",
        pricing={"input_mtok": "1", "output_mtok": "1"},
    )
    assert reload(m).cost(model=other).total == Decimal("25") / Decimal(1_000_000)


def test_cost_unknown_is_none(chat):
    m = chat.add_message(
        role="assistant", content="x", model_id="no-such-model-xyz", tokens=Tokens(10, 5)
    )
    assert reload(m).cost().total is None
    assert chat.add_message(role="user", content="q").cost() == Cost()


def test_cost_without_usage_rows_reads_them_once(chat, django_assert_num_queries):
    m = chat.add_message(role="assistant", content="x", model_id="", tokens=Tokens(10, 5))
    stored = Message.objects.get(pk=m.pk)
    with django_assert_num_queries(1):  # its usage rows (none): the token columns price it
        assert stored.cost() == Cost()


def test_model_info(chat):
    row = LLMModel.objects.create(provider="openai", model_id="gpt-4.1-mini", name="mini")
    m = chat.add_message(role="assistant", content="x", model_id="gpt-4.1-mini", provider="openai")
    assert m.model_info == row
    assert chat.add_message(role="user", content="x").model_info is None
    assert chat.add_message(role="assistant", content="x", model_id="unknown-x").model_info is None


def test_to_dict_shape(chat):
    m = chat.add_message(role="user", content="Hello")
    assert m.to_dict() == {"role": "user", "content": "Hello"}
    a = chat.add_message(
        role="assistant",
        content="",
        model_id="gpt-4.1-mini",
        finish_reason="stop",
        thinking_text="hmm",
        thinking_signature="s",
        tokens=Tokens(3, 4),
        citations=[Citation(url="https://x.example")],
    )
    d = reload(a).to_dict()
    assert d == {
        "role": "assistant",
        "content": "",
        "model": "gpt-4.1-mini",
        "thinking": "hmm",
        "thinking_signature": "s",
        "citations": [{"url": "https://x.example"}],
        "finish_reason": "stop",
        "input_tokens": 3,
        "output_tokens": 4,
    }
    assert "cost" not in d  # only a supplied cost is rendered


def test_to_dict_keys_are_the_seed_to_h_keys(chat):
    """RubyLLM's ``to_h`` names the model ``model`` and carries ``raw_content`` /
    ``raw_reasoning`` when the message keeps the provider's own content / reasoning."""
    reasoning = [{"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA"}]
    blocks = [{"type": "text", "text": "Paris.", "cache_control": {"type": "ephemeral"}}]
    m = chat.add_message(
        role="assistant",
        content="Paris.",
        model_id="gpt-4.1-mini",
        raw={"content": blocks, "reasoning_items": reasoning, "response": {"id": "r"}},
    )
    d = reload(m).to_dict()
    assert d["model"] == "gpt-4.1-mini" and "model_id" not in d
    assert d["raw_content"] == blocks and d["raw_reasoning"] == reasoning
    # absent when the message keeps neither (or no raw at all)
    plain = reload(chat.add_message(role="assistant", content="x", raw={"response": {}}))
    assert not {"raw_content", "raw_reasoning", "model"} & set(plain.to_dict())
    assert set(chat.add_message(role="user", content="x").to_dict()) == {"role", "content"}


def test_to_dict_raw_reasoning_of_a_real_reply(fake_llm):
    """A Responses API reply with encrypted reasoning: the reasoning items stored with the
    reply are ``raw_reasoning``."""
    from django_llmchat.testing import Reply

    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    fake_llm.script(Reply("42", thinking="Let me think.", thinking_signature="enc-1"))
    reply = chat.ask("Meaning of life?")
    d = reload(reply).to_dict()
    assert d["model"] == "gpt-4.1-mini" and d["content"] == "42"
    [item] = d["raw_reasoning"]
    assert item["type"] == "reasoning" and item["encrypted_content"] == "enc-1"
    assert "raw_content" not in d


def test_tool_call_takes_its_chat_from_its_message(chat):
    """Seed 000 builds tool calls from the message alone: ``ToolCall.objects.create(message=m,
    ...)`` and ``m.tool_calls.create(...)``."""
    m = Message.objects.create(chat=chat, role="assistant", content="", finish_reason="tool_calls")
    first = ToolCall.objects.create(message=m, call_id="call_1", name="weather")
    second = m.tool_calls.create(call_id="call_2", name="time", arguments={"tz": "UTC"})
    assert first.chat_id == second.chat_id == chat.pk
    assert ToolCall.objects.filter(chat=chat).count() == 2
    assert list(reload(m).to_dict()["tool_calls"]) == ["call_1", "call_2"]
    assert reload(m).is_tool_call
    # both calls reach the provider history of the chat
    chat.add_message(role="tool", content="sunny", parent_tool_call=first)
    chat.add_message(role="tool", content="12:00", parent_tool_call=second)
    assert [r.tool_call_id for r in reload(m).tool_results] == ["call_1", "call_2"]
    # a chat given explicitly is kept
    other = Chat.objects.create()
    third = ToolCall.objects.create(message=m, chat=other, call_id="call_3", name="x")
    assert third.chat_id == other.pk


def test_tool_call_without_a_message_still_fails_loudly(chat):
    from django.db import IntegrityError, transaction

    with pytest.raises((IntegrityError, ValueError)), transaction.atomic():
        ToolCall.objects.create(call_id="call_1", name="weather")


def test_message_create_accepts_the_supplied_cost(chat):
    """Seed 000's ``cost:``: ``Message.objects.create(..., cost=Decimal("0.5"))`` is the
    message's supplied cost."""
    m = Message.objects.create(chat=chat, role="assistant", content="hi", cost=Decimal("0.5"))
    assert m.supplied_cost == Decimal("0.5")
    assert reload(m).cost() == Cost(total=Decimal("0.5"))
    assert reload(m).to_dict()["cost"] == {"total": "0.5000000000"}
    # numbers, text and Cost values too; None is no supplied cost
    assert Message(chat=chat, cost=0.25).supplied_cost == Decimal("0.25")
    assert Message(chat=chat, cost="1.5").supplied_cost == Decimal("1.5")
    assert Message(chat=chat, cost=Cost(total=Decimal("2"))).supplied_cost == Decimal("2")
    assert Message(chat=chat, cost=None).supplied_cost is None
    assert "cost" not in Message.objects.create(chat=chat, cost=None).to_dict()
    with pytest.raises(TypeError, match="cost must be"):
        Message(chat=chat, cost=[1])
    # recorded attempt costs still win over the supplied one
    Usage.objects.create(
        chat=chat, message=m, provider="openai", model_id="m", total_cost=Decimal("0.01")
    )
    assert reload(m).cost().total == Decimal("0.01")


def test_attachments(chat):
    m = chat.add_message(role="user", content="see", attachments=[("a.txt", b"abc")])
    att = reload(m).attachments.get()
    assert (att.filename, att.mime_type, att.size) == ("a.txt", "text/plain", 3)
    assert att.read() == b"abc"
    assert reload(m).to_dict()["attachments"][0]["filename"] == "a.txt"
