"""Event values: constructors, attributes and to_dict() shapes of the stream-events reference."""

import json

import pytest

from django_llmchat.events import (
    FinishReasonDone,
    GuardrailModification,
    GuardrailTripwire,
    Interrupt,
    ReasoningDelta,
    ReasoningDone,
    ReasoningPart,
    SkillActivation,
    StreamEvent,
    TextDelta,
    TextDone,
    TokenUsageDone,
    ToolCallDelta,
    ToolCallDone,
    WebSearchDone,
    WebSearchStatus,
    event_from_dict,
    to_sse,
)
from django_llmchat.values import Tokens

CASES = [
    (TextDelta("Hello "), {"role": "assistant", "content": "Hello "}),
    (
        TextDone("Hello, how can I help you?"),
        {"role": "assistant", "content": "Hello, how can I help you?"},
    ),
    (
        ToolCallDelta(item_id="item_123", name="weather_tool", arguments_delta='{"city":'),
        {
            "role": "assistant",
            "item_id": "item_123",
            "name": "weather_tool",
            "arguments_delta": '{"city":',
        },
    ),
    (
        ToolCallDone(
            item_id="item_123",
            call_id="call_456",
            name="weather_tool",
            arguments='{"city":"Tokyo"}',
        ),
        {
            "role": "assistant",
            "item_id": "item_123",
            "call_id": "call_456",
            "name": "weather_tool",
            "arguments": '{"city":"Tokyo"}',
        },
    ),
    (
        ReasoningDelta("Let me think about "),
        {"role": "assistant", "content": "Let me think about "},
    ),
    (
        ReasoningDone(ReasoningPart(type="text", text="step by step", format="mock-v1")),
        {
            "role": "assistant",
            "part": {"type": "text", "text": "step by step", "format": "mock-v1"},
        },
    ),
    (
        WebSearchStatus("searching", query="Ruby language"),
        {"role": "assistant", "status": "searching", "query": "Ruby language"},
    ),
    (
        WebSearchStatus("open_page", url="https://example.com"),
        {"role": "assistant", "status": "open_page", "url": "https://example.com"},
    ),
    (
        WebSearchDone(
            "Ruby language", sources=[{"title": "Ruby Programming", "url": "https://ruby-lang.org"}]
        ),
        {
            "role": "assistant",
            "query": "Ruby language",
            "sources": [{"title": "Ruby Programming", "url": "https://ruby-lang.org"}],
        },
    ),
    (
        GuardrailTripwire(guardrail_id="pii", reason="contains an email", phase="before"),
        {
            "role": "assistant",
            "guardrail_id": "pii",
            "reason": "contains an email",
            "phase": "before",
        },
    ),
    (
        GuardrailModification(guardrail_id="redact", phase="after", message_indices=[0, 2]),
        {
            "role": "assistant",
            "guardrail_id": "redact",
            "phase": "after",
            "message_indices": [0, 2],
        },
    ),
    (SkillActivation("code-review"), {"role": "system", "name": "code-review"}),
    (
        Interrupt(reason="needs approval"),
        {"role": "system", "interrupt": True, "reason": "needs approval"},
    ),
    (Interrupt(reason="max_steps"), {"role": "system", "interrupt": True, "reason": "max_steps"}),
    (Interrupt(), {"role": "system", "interrupt": True, "reason": None}),
    (
        TokenUsageDone(token_usage=Tokens(input_tokens=100, output_tokens=50)),
        {"role": "assistant", "token_usage": {"input_tokens": 100, "output_tokens": 50}},
    ),
    (
        FinishReasonDone(finish_reason="length", raw_finish_reason="max_tokens"),
        {"role": "assistant", "finish_reason": "length", "raw_finish_reason": "max_tokens"},
    ),
]


@pytest.mark.parametrize("event, expected", CASES, ids=lambda v: type(v).__name__)
def test_to_dict_shapes_and_roundtrip(event, expected):
    assert isinstance(event, StreamEvent)
    assert event.to_dict() == expected
    assert event.role == expected["role"]
    assert event_from_dict(event.type, json.loads(json.dumps(event.to_dict()))) == event


def test_attributes():
    e = ToolCallDone(item_id="i", call_id="c", name="n", arguments="{}")
    assert (e.item_id, e.call_id, e.name, e.arguments) == ("i", "c", "n", "{}")
    assert WebSearchStatus("searching").url is None
    assert TokenUsageDone(token_usage=Tokens(100, 50)).token_usage.total_tokens == 150
    r = ReasoningDone(ReasoningPart(type="text", text="abc"))
    assert r.part.text == "abc" and r.part.format is None
    assert FinishReasonDone(finish_reason="stop").raw_finish_reason is None


def test_sse_frame():
    frame = to_sse(TextDelta("Hi\nthere"), id="1700-0")
    assert frame == (
        'event: text_delta\ndata: {"role":"assistant","content":"Hi\\nthere"}\nid: 1700-0\n\n'
    )
    assert TextDelta("x").to_sse().startswith("event: text_delta\ndata: ")
    assert FinishReasonDone().type == "finish_reason_done"
    assert TokenUsageDone().type == "token_usage_done"


def test_unknown_event_type():
    with pytest.raises(ValueError, match="unknown event type"):
        event_from_dict("nope", {})
