"""AnthropicProvider: recorded exchanges replayed, plus the request/answer features the
recordings do not cover (caching, schema, citations, server tools, stream errors)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from django_llmchat.errors import (
    AuthenticationError,
    ContextLengthExceededError,
    IncompleteStreamError,
    OverloadedError,
    ProviderError,
    UnsupportedFeatureError,
)
from django_llmchat.events import (
    FinishReasonDone,
    ReasoningDelta,
    ReasoningDone,
    TextDelta,
    TextDone,
    TokenUsageDone,
    ToolCallDelta,
    ToolCallDone,
    WebSearchDone,
    WebSearchStatus,
)
from django_llmchat.providers.anthropic import FINISH_REASONS, AnthropicProvider
from django_llmchat.providers.types import (
    AttachmentData,
    ProviderMessage,
    ProviderRequest,
    ToolCallData,
    ToolSpec,
)
from django_llmchat.values import Thinking, Tokens

from .replay import fixture_names, load_fixture, replay_transport, request_body, sent_json

MODEL = "claude-haiku-4-5-20251001"
BASIC = "chat_basic_chat_functionality_anthropic_claude-haiku-4-5_can_have_a_basic_conversation"
AUTH = "chat_error_handling_with_anthropic_claude-haiku-4-5_raises_appropriate_auth_error"
TOOLS = "chat_function_calling_anthropic_claude-haiku-4-5_can_use_tools"
STREAM_TOOLS = (
    "chat_function_calling_anthropic_claude-haiku-4-5_can_use_tools_with_multi-turn_streaming"
    "_conversations"
)
STREAMING = "chat_streaming_responses_anthropic_claude-haiku-4-5_supports_streaming_responses"
THINKING_PREFIX = "chat_with_extended_thinking_anthropic_claude-haiku-4-5_"
THINKING_PRESERVES = THINKING_PREFIX + "preserves_thinking_signatures_between_turns_when_provided"
THINKING_RETURNS = THINKING_PREFIX + "returns_thinking_when_available"
THINKING_STREAMS = THINKING_PREFIX + "streams_thinking_content_when_available"
REPLAYED = {
    BASIC, AUTH, TOOLS, STREAM_TOOLS, STREAMING,
    THINKING_PRESERVES, THINKING_RETURNS, THINKING_STREAMS,
}  # fmt: skip

BERLIN = "What's the weather in Berlin? (52.5200, 13.4050)"
PARIS = "What's the weather in Paris? (48.8575, 2.3514)"
BERLIN_RESULT = "Current weather at 52.5200, 13.4050: 15°C, Wind: 10 km/h"
PARIS_RESULT = "Current weather at 48.8575, 2.3514: 15°C, Wind: 10 km/h"
MAGIC_MIRROR = (
    "If a magic mirror shows your future self, but only if you ask a question it cannot "
    "answer truthfully, what question do you ask to see your future, and what would the "
    "mirror reveal about the answer it gives?"
)
WEATHER = ToolSpec(
    name="weather",
    description="Gets current weather for a location",
    parameters={
        "type": "object",
        "properties": {
            "latitude": {"type": "string", "description": "Latitude (e.g., 52.5200)"},
            "longitude": {"type": "string", "description": "Longitude (e.g., 13.4050)"},
        },
        "required": ["latitude", "longitude"],
        "additionalProperties": False,
        "strict": True,
    },
)
RECORDED_PARAMS = {"max_tokens": 64000}
THINKING_PARAMS = {"max_tokens": 64000, "thinking": {"budget_tokens": 1024}}


# -- helpers -------------------------------------------------------------------------------
def provider_for(interactions: Any, **kw: Any) -> tuple[AnthropicProvider, list]:
    transport, sent = replay_transport(interactions, **kw)
    return AnthropicProvider(api_key="sk-ant-test", transport=transport), sent


def user(text: str, **kw: Any) -> ProviderMessage:
    return ProviderMessage(role="user", content=text, **kw)


def assistant(text: str = "", **kw: Any) -> ProviderMessage:
    return ProviderMessage(role="assistant", content=text, provider="anthropic", **kw)


def tool_result(call_id: str, text: str, **kw: Any) -> ProviderMessage:
    return ProviderMessage(
        role="tool", content=text, tool_call_id=call_id, tool_name="weather", **kw
    )


def request(messages: list[ProviderMessage], **kw: Any) -> ProviderRequest:
    kw.setdefault("params", RECORDED_PARAMS)
    return ProviderRequest(model_id=MODEL, messages=messages, **kw)


def recorded(fixture: dict, index: int) -> dict[str, Any]:
    """The recorded answer of one interaction, parsed (a whole JSON body)."""
    return json.loads(fixture["interactions"][index]["response"]["body"])


def run_stream(provider: AnthropicProvider, req: ProviderRequest):
    stream = provider.stream(req)
    events = list(stream)
    return events, stream.response


def of(events: list, kind: type) -> list:
    return [e for e in events if type(e) is kind]


def check_stream_contract(events: list, response) -> None:
    """The event ordering rules every stream must keep."""
    text = "".join(e.content for e in of(events, TextDelta))
    assert text == response.content
    done = of(events, TextDone)
    if text:
        assert len(done) == 1 and done[0].content == text
        assert events.index(done[0]) > max(i for i, e in enumerate(events) if type(e) is TextDelta)
    else:
        assert done == []
    assert len(of(events, TokenUsageDone)) == 1
    assert len(of(events, FinishReasonDone)) == 1
    assert len(of(events, ToolCallDone)) == len(response.tool_calls)


def sse(*events: tuple[str, dict[str, Any]]) -> str:
    """An Anthropic-style stream body: an ``event:`` line before each ``data:`` line."""
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)


def synthetic(body: str | dict, status: int = 200) -> list[dict[str, Any]]:
    stream = isinstance(body, str)
    content_type = "text/event-stream" if stream else "application/json"
    return [
        {
            "request": {"method": "POST", "uri": "https://api.anthropic.com/v1/messages"},
            "response": {
                "status": status,
                "headers": {"Content-Type": [content_type]},
                "body": body if stream else json.dumps(body),
            },
        }
    ]


def message_start(**usage: int) -> tuple[str, dict]:
    usage = {"input_tokens": 10, "output_tokens": 1, **usage}
    return (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": [],
                "stop_reason": None,
                "usage": usage,
            },
        },
    )


def block_start(index: int, block: dict) -> tuple[str, dict]:
    return ("content_block_start", {"type": "content_block_start", "index": index,
                                    "content_block": block})  # fmt: skip


def block_delta(index: int, delta: dict) -> tuple[str, dict]:
    return ("content_block_delta", {"type": "content_block_delta", "index": index,
                                    "delta": delta})  # fmt: skip


def block_stop(index: int) -> tuple[str, dict]:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def message_end(stop_reason: str, **usage: int) -> list[tuple[str, dict]]:
    return [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason},
                "usage": {"output_tokens": 5, **usage},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def text_stream(text: str = "Hi") -> list[tuple[str, dict]]:
    return [
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": text}),
        block_stop(0),
        *message_end("end_turn"),
    ]


# -- every recorded Anthropic exchange is replayed here --------------------------------------
def test_every_anthropic_recording_is_replayed():
    assert set(fixture_names("*anthropic*")) == REPLAYED


def test_basic_conversation():
    fixture = load_fixture(BASIC)
    provider, sent = provider_for(fixture)

    response = provider.complete(request([user("What's 2 + 2?")]))

    assert sent_json(sent[0]) == request_body(fixture["interactions"][0])
    assert sent[0].url == "https://api.anthropic.com/v1/messages"
    assert sent[0].headers["x-api-key"] == "sk-ant-test"
    assert sent[0].headers["anthropic-version"] == "2023-06-01"
    assert response.content == "2 + 2 = 4"
    assert response.finish_reason == "stop"
    assert response.raw_finish_reason == "end_turn"
    assert response.message_finish_reason == "stop"
    assert response.tokens == Tokens(
        input_tokens=16, output_tokens=13, cache_read_tokens=0, cache_write_tokens=0
    )
    assert response.model_id == MODEL
    assert response.raw == recorded(fixture, 0)
    assert response.tool_calls == [] and response.thinking is None


def test_auth_error():
    provider, sent = provider_for(AUTH)

    with pytest.raises(AuthenticationError) as info:
        provider.complete(request([user("Hello")]))

    err = info.value
    assert err.status == 401
    assert err.code == "authentication_error"
    assert err.message == "invalid x-api-key"
    assert err.retryable is False
    assert "sk-ant-test" not in str(err)
    assert sent_json(sent[0]) == request_body(load_fixture(AUTH)["interactions"][0])


def test_tools_round_trip():
    fixture = load_fixture(TOOLS)
    provider, sent = provider_for(fixture)
    messages = [user(BERLIN)]

    first = provider.complete(request(messages, tools=[WEATHER]))

    assert sent_json(sent[0]) == request_body(fixture["interactions"][0])
    assert first.content == ""
    assert [(c.call_id, c.name, c.arguments) for c in first.tool_calls] == [
        (
            "toolu_01Ay5KzhmQYMK53svGLaAxfc",
            "weather",
            {"latitude": "52.5200", "longitude": "13.4050"},
        )
    ]
    assert (first.finish_reason, first.raw_finish_reason) == ("tool_calls", "tool_use")
    assert first.message_finish_reason == "tool_calls"
    assert first.tokens == Tokens(633, 75, 0, 0)

    messages += [
        assistant(tool_calls=first.tool_calls),
        tool_result(first.tool_calls[0].call_id, BERLIN_RESULT),
    ]
    second = provider.complete(request(messages, tools=[WEATHER]))

    body = sent_json(sent[1])
    assert body == request_body(fixture["interactions"][1])
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"][0]["type"] == "tool_use"
    assert body["messages"][2]["content"][0]["tool_use_id"] == "toolu_01Ay5KzhmQYMK53svGLaAxfc"
    assert second.content.startswith("The weather in Berlin is currently:")
    assert second.finish_reason == "stop"
    assert second.tokens == Tokens(748, 55, 0, 0)


def test_streaming_response():
    fixture = load_fixture(STREAMING)
    provider, sent = provider_for(fixture)

    events, response = run_stream(provider, request([user("Count from 1 to 3")]))

    assert sent_json(sent[0]) == request_body(fixture["interactions"][0])
    check_stream_contract(events, response)
    assert [type(e) for e in events] == [TextDelta, TokenUsageDone, FinishReasonDone, TextDone]
    assert response.content == "1\n2\n3"
    assert events[1].token_usage == Tokens(15, 9, 0, 0)
    assert events[2] == FinishReasonDone(finish_reason="stop", raw_finish_reason="end_turn")
    assert response.tokens == Tokens(15, 9, 0, 0)
    assert response.model_id == MODEL
    assert response.raw["id"] == "msg_011CeCGmCzjcUtmtEmMdEiM2"
    assert response.raw["stop_reason"] == "end_turn"
    assert response.raw["content"] == [{"type": "text", "text": "1\n2\n3"}]
    assert response.raw["usage"]["output_tokens"] == 9


@pytest.mark.parametrize("chunk_size", [None, 7])
def test_multi_turn_streaming_tools(chunk_size):
    fixture = load_fixture(STREAM_TOOLS)
    provider, sent = provider_for(fixture, chunk_size=chunk_size)
    results = {
        "toolu_01MKSN7NHsBVKr7Jvw5pqCQq": BERLIN_RESULT,
        "toolu_01WyBDTrFVoidP92YhrB1xZ2": PARIS_RESULT,
    }
    expected = [
        ("toolu_01MKSN7NHsBVKr7Jvw5pqCQq", {"latitude": "52.5200", "longitude": "13.4050"},
         Tokens(633, 75, 0, 0)),
        (None, "The weather in Berlin is currently:", Tokens(748, 49, 0, 0)),
        ("toolu_01WyBDTrFVoidP92YhrB1xZ2", {"latitude": "48.8575", "longitude": "2.3514"},
         Tokens(819, 75, 0, 0)),
        (None, "The weather in Paris is currently:", Tokens(934, 53, 0, 0)),
    ]  # fmt: skip
    messages = [user(BERLIN)]
    for step, (call_id, what, tokens) in enumerate(expected):
        events, response = run_stream(provider, request(messages, tools=[WEATHER]))

        assert sent_json(sent[step]) == request_body(fixture["interactions"][step])
        check_stream_contract(events, response)
        assert response.tokens == tokens
        assert of(events, TokenUsageDone)[0].token_usage == tokens
        if call_id:
            assert response.content == ""
            assert of(events, TextDone) == []
            deltas = of(events, ToolCallDelta)
            assert deltas[0].name == "weather" and deltas[0].item_id == call_id
            assert all(d.name is None for d in deltas[1:])
            (done,) = of(events, ToolCallDone)
            assert (done.item_id, done.call_id, done.name) == (call_id, call_id, "weather")
            assert json.loads(done.arguments) == what
            assert "".join(d.arguments_delta for d in deltas) == done.arguments
            assert [(c.call_id, c.name, c.arguments) for c in response.tool_calls] == [
                (call_id, "weather", what)
            ]
            assert of(events, FinishReasonDone)[0].finish_reason == "tool_calls"
            assert response.raw["content"][0]["input"] == what
            messages += [
                assistant(tool_calls=response.tool_calls),
                tool_result(call_id, results[call_id]),
            ]
        else:
            assert response.content.startswith(what)
            assert response.tool_calls == []
            assert of(events, FinishReasonDone)[0].finish_reason == "stop"
            messages.append(assistant(response.content))
            if step == 1:
                messages.append(user(PARIS))

    last = sent_json(sent[3])
    assert [m["role"] for m in last["messages"]] == [
        "user", "assistant", "user", "assistant", "user", "assistant", "user"
    ]  # fmt: skip
    assert [[b["type"] for b in m["content"]] for m in last["messages"]] == [
        ["text"], ["tool_use"], ["tool_result"], ["text"], ["text"], ["tool_use"], ["tool_result"]
    ]  # fmt: skip
    assert last["messages"][6]["content"][0]["tool_use_id"] == "toolu_01WyBDTrFVoidP92YhrB1xZ2"


def test_thinking_returned():
    fixture = load_fixture(THINKING_RETURNS)
    provider, sent = provider_for(fixture)

    response = provider.complete(request([user(MAGIC_MIRROR)], params=THINKING_PARAMS))

    assert sent_json(sent[0]) == request_body(fixture["interactions"][0])
    blocks = recorded(fixture, 0)["content"]
    assert response.thinking == Thinking(blocks[0]["thinking"], blocks[0]["signature"])
    assert response.thinking.text.startswith("This is a clever puzzle")
    assert response.content == blocks[1]["text"]
    assert response.finish_reason == "stop"
    usage = recorded(fixture, 0)["usage"]
    assert response.tokens == Tokens(
        input_tokens=usage["input_tokens"],
        output_tokens=usage["output_tokens"],
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=usage["output_tokens_details"]["thinking_tokens"],
    )


def test_thinking_streamed():
    fixture = load_fixture(THINKING_STREAMS)
    provider, sent = provider_for(fixture)

    events, response = run_stream(provider, request([user(MAGIC_MIRROR)], params=THINKING_PARAMS))

    assert sent_json(sent[0]) == request_body(fixture["interactions"][0])
    check_stream_contract(events, response)
    reasoning = "".join(e.content for e in of(events, ReasoningDelta))
    (done,) = of(events, ReasoningDone)
    first_text = next(i for i, e in enumerate(events) if type(e) is TextDelta)
    assert events.index(done) < first_text
    assert max(i for i, e in enumerate(events) if type(e) is ReasoningDelta) < events.index(done)
    assert done.part.type == "text" and done.part.format == "anthropic"
    assert done.part.text == reasoning
    assert reasoning.startswith("This is a clever paradox question.")
    assert done.part.signature.startswith("ErsNCpMBCBAYAipAxGRlBgKF")
    assert response.thinking == Thinking(reasoning, done.part.signature)
    assert response.content.startswith("I'd ask: **")
    assert response.tokens == Tokens(80, 638, 0, 0, thinking_tokens=353)
    assert response.raw["content"][0]["type"] == "thinking"
    assert response.raw["content"][0]["signature"] == done.part.signature


def test_thinking_signature_replayed_next_turn():
    fixture = load_fixture(THINKING_PRESERVES)
    provider, sent = provider_for(fixture)
    messages = [user("What is 5 + 3?")]

    first = provider.complete(request(messages, params=THINKING_PARAMS))
    assert first.thinking.text == "This is a simple arithmetic question. 5 + 3 = 8."
    assert first.thinking.signature == recorded(fixture, 0)["content"][0]["signature"]
    assert first.tokens == Tokens(45, 39, 0, 0, thinking_tokens=23)

    messages += [
        assistant(first.content, thinking=first.thinking, model_id=first.model_id),
        user("Now multiply that by 2"),
    ]
    second = provider.complete(request(messages, params=THINKING_PARAMS))

    body = sent_json(sent[1])
    assert body == request_body(fixture["interactions"][1])
    replayed = body["messages"][1]["content"]
    assert [b["type"] for b in replayed] == ["thinking", "text"]
    assert replayed[0]["signature"] == first.thinking.signature
    assert second.content == "8 × 2 = **16**"
    assert second.thinking.text.startswith("The user wants me to multiply 8 by 2.")
    assert second.tokens == Tokens(68, 44, 0, 0, thinking_tokens=29)


def test_async_stream_and_complete():
    fixture = load_fixture(STREAM_TOOLS)
    provider, sent = provider_for(fixture["interactions"][:1])
    schema_answer = {
        "model": MODEL,
        "content": [{"type": "tool_use", "id": "t", "name": "response", "input": {"a": 1}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 2},
    }
    schema_provider, _ = provider_for(synthetic(schema_answer))

    async def run():
        stream = provider.astream(request([user(BERLIN)], tools=[WEATHER]))
        events = [event async for event in stream]
        schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
        structured = await schema_provider.acomplete(request([user("a?")], schema=schema))
        return events, stream.response, structured

    events, response, structured = asyncio.run(run())

    check_stream_contract(events, response)
    assert sent_json(sent[0]) == request_body(fixture["interactions"][0])
    assert [c.arguments for c in response.tool_calls] == [
        {"latitude": "52.5200", "longitude": "13.4050"}
    ]
    assert json.loads(structured.content) == {"a": 1}
    assert structured.finish_reason == "stop"


# -- stream edge cases -----------------------------------------------------------------------
def test_truncated_stream_raises_incomplete():
    body = load_fixture(STREAMING)["interactions"][0]["response"]["body"]
    cut = body.index("event: message_stop")
    interactions = load_fixture(STREAMING)["interactions"]
    interactions[0]["response"]["body"] = body[:cut]
    provider, _ = provider_for(interactions)

    events = []
    with pytest.raises(IncompleteStreamError) as info:
        for event in provider.stream(request([user("Count from 1 to 3")])):
            events.append(event)

    assert info.value.retryable is True
    assert [e.content for e in of(events, TextDelta)] == ["1\n2\n3"]
    assert of(events, TextDone) == [] and of(events, FinishReasonDone) == []


def test_empty_stream_raises_incomplete():
    provider, _ = provider_for(synthetic(""))
    provider.max_retries = 0
    with pytest.raises(IncompleteStreamError):
        list(provider.stream(request([user("Hi")])))


def test_midstream_overloaded_error():
    body = sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Hel"}),
        (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        ),
    )
    provider, _ = provider_for(synthetic(body))

    events = []
    with pytest.raises(OverloadedError) as info:
        for event in provider.stream(request([user("Hi")])):
            events.append(event)

    assert info.value.retryable is True
    assert info.value.status is None
    assert info.value.code == "overloaded_error"
    assert events == [TextDelta("Hel")]


def test_ping_anywhere_and_padded_json():
    events = text_stream("Hello")
    body = 'event: ping\ndata: {"type": "ping"}\n\n' + sse(*events[:3])
    body += 'event: ping\ndata: {"type": "ping"}    \n\n' + sse(*events[3:])
    body = body.replace('"Hello"}', '"Hello"}      ')
    provider, _ = provider_for(synthetic(body))

    out, response = run_stream(provider, request([user("Hi")]))

    assert [type(e) for e in out] == [TextDelta, TokenUsageDone, FinishReasonDone, TextDone]
    assert response.content == "Hello"


def test_usage_takes_latest_non_null_values():
    body = sse(
        message_start(input_tokens=50, output_tokens=1, cache_read_input_tokens=7,
                      cache_creation_input_tokens=3),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "ok"}),
        block_stop(0),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "max_tokens"},
                           "usage": {"input_tokens": None, "output_tokens": 12,
                                     "cache_read_input_tokens": 9}}),
        ("message_stop", {"type": "message_stop"}),
    )  # fmt: skip
    provider, _ = provider_for(synthetic(body))

    events, response = run_stream(provider, request([user("Hi")]))

    expected = Tokens(input_tokens=50, output_tokens=12, cache_read_tokens=9, cache_write_tokens=3)
    assert of(events, TokenUsageDone) == [TokenUsageDone(token_usage=expected)]
    assert of(events, FinishReasonDone) == [FinishReasonDone("length", "max_tokens")]
    assert response.message_finish_reason == "max_tokens"


def test_tool_call_without_deltas_has_empty_arguments():
    body = sse(
        message_start(),
        block_start(0, {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}),
        block_stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}}),
        block_delta(1, {"type": "input_json_delta", "partial_json": ""}),
        block_stop(1),
        *message_end("tool_use"),
    )
    provider, _ = provider_for(synthetic(body))

    events, response = run_stream(provider, request([user("Time?")]))

    check_stream_contract(events, response)
    assert of(events, ToolCallDone) == [
        ToolCallDone(item_id="toolu_1", call_id="toolu_1", name="now", arguments="{}"),
        ToolCallDone(item_id="toolu_2", call_id="toolu_2", name="now", arguments="{}"),
    ]
    assert [c.arguments for c in response.tool_calls] == [{}, {}]
    assert response.finish_reason == "tool_calls"


def test_redacted_thinking_streamed_and_replayed():
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    body = sse(
        message_start(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "Hmm."}),
        block_delta(0, {"type": "signature_delta", "signature": "sig-1"}),
        block_stop(0),
        block_start(1, redacted),
        block_stop(1),
        block_start(2, {"type": "text", "text": ""}),
        block_delta(2, {"type": "text_delta", "text": "Done"}),
        block_stop(2),
        *message_end("end_turn"),
    )
    provider, _ = provider_for(synthetic(body))

    events, response = run_stream(provider, request([user("Think")]))

    assert response.reasoning_items == [redacted]
    assert response.thinking == Thinking("Hmm.", "sig-1")
    assert [b["type"] for b in response.raw["content"]] == ["thinking", "redacted_thinking", "text"]
    replay = assistant(
        response.content,
        thinking=response.thinking,
        reasoning_items=response.reasoning_items,
        tool_calls=[ToolCallData("toolu_9", "calc", {"x": 1})],
    )
    body = provider.build_payload(request([user("Think"), replay]), stream=False)
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Hmm.", "signature": "sig-1"},
        redacted,
        {"type": "text", "text": "Done"},
        {"type": "tool_use", "id": "toolu_9", "name": "calc", "input": {"x": 1}},
    ]


def test_redacted_thinking_non_streaming():
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    data = {
        "id": "msg_1",
        "model": MODEL,
        "content": [redacted, {"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    response = AnthropicProvider(api_key="k").parse_response(data, request([]))
    assert response.reasoning_items == [redacted]
    assert response.thinking is None
    assert response.content == "ok"


def test_thinking_from_another_provider_is_not_replayed():
    other = ProviderMessage(
        role="assistant", content="4", thinking=Thinking("...", "sig"), provider="openai"
    )
    body = AnthropicProvider().build_payload(request([user("2+2?"), other]), stream=False)
    assert body["messages"][1]["content"] == [{"type": "text", "text": "4"}]


# -- finish reasons --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw, event, stored",
    [
        ("end_turn", "stop", "stop"),
        ("stop_sequence", "stop", "stop"),
        ("max_tokens", "length", "max_tokens"),
        ("tool_use", "tool_calls", "tool_calls"),
        ("refusal", "content_filter", "content_filter"),
        ("model_context_window_exceeded", "context_window", "model_context_window_exceeded"),
        ("pause_turn", "other", "pause_turn"),
        ("something_new", "other", "something_new"),
    ],
)
def test_finish_reasons(raw, event, stored):
    data = {"model": MODEL, "content": [], "stop_reason": raw, "usage": {}}
    response = AnthropicProvider().parse_response(data, request([]))
    assert (response.finish_reason, response.raw_finish_reason) == (event, raw)
    assert response.message_finish_reason == stored

    provider, _ = provider_for(synthetic(sse(message_start(), *message_end(raw))))
    events, streamed = run_stream(provider, request([user("Hi")]))
    assert of(events, FinishReasonDone) == [FinishReasonDone(event, raw)]
    assert streamed.message_finish_reason == stored


def test_finish_reason_table_uses_event_vocabulary():
    from django_llmchat.providers.types import EVENT_FINISH_REASONS

    assert set(FINISH_REASONS.values()) <= set(EVENT_FINISH_REASONS)


# -- requests --------------------------------------------------------------------------------
def test_system_messages_hoisted():
    messages = [
        ProviderMessage(role="system", content="You are terse."),
        user("Hi"),
        ProviderMessage(role="system", content="Answer in French."),
    ]
    body = AnthropicProvider().build_payload(request(messages), stream=True)
    assert body["system"] == [
        {"type": "text", "text": "You are terse."},
        {"type": "text", "text": "Answer in French."},
    ]
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert body["stream"] is True


def test_consecutive_roles_merged_and_tool_results_grouped():
    calls = [ToolCallData("toolu_a", "weather", {"latitude": "1"}),
             ToolCallData("toolu_b", "weather", {"latitude": "2"})]  # fmt: skip
    messages = [
        user("First"),
        user("Second"),
        assistant("Checking both.", tool_calls=calls),
        tool_result("toolu_a", "sunny"),
        tool_result("toolu_b", "boom", is_error=True),
        user("Thanks"),
    ]
    body = AnthropicProvider().build_payload(request(messages), stream=False)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "First"},
        {"type": "text", "text": "Second"},
    ]
    assert [b["type"] for b in body["messages"][1]["content"]] == ["text", "tool_use", "tool_use"]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_a",
         "content": [{"type": "text", "text": "sunny"}]},
        {"type": "tool_result", "tool_use_id": "toolu_b",
         "content": [{"type": "text", "text": "boom"}], "is_error": True},
        {"type": "text", "text": "Thanks"},
    ]  # fmt: skip


def test_cache_boundary_marks_last_block():
    messages = [
        ProviderMessage(role="system", content="Long instructions", cache_boundary=True),
        user("Doc", attachments=[AttachmentData("image/png", b"\x89PNG")], cache_boundary=True),
        assistant("Seen."),
        user("Question"),
    ]
    body = AnthropicProvider().build_payload(request(messages), stream=False)
    assert body["system"] == [
        {"type": "text", "text": "Long instructions", "cache_control": {"type": "ephemeral"}}
    ]
    first = body["messages"][0]["content"]
    assert [b["type"] for b in first] == ["image", "text"]
    assert "cache_control" not in first[0]
    assert first[1]["cache_control"] == {"type": "ephemeral"}
    for message in body["messages"][1:]:
        assert all("cache_control" not in b for b in message["content"])


def test_cache_boundary_keeps_last_four_breakpoints():
    messages = []
    for i in range(6):
        messages += [user(f"q{i}", cache_boundary=True), assistant(f"a{i}")]
    provider = AnthropicProvider(options={"cache_ttl": "1h"})
    body = provider.build_payload(request(messages), stream=False)
    marked = [b["text"] for m in body["messages"] for b in m["content"] if "cache_control" in b]
    assert marked == ["q2", "q3", "q4", "q5"]
    assert body["messages"][-2]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_cache_boundary_on_merged_tool_results():
    messages = [
        user("go"),
        assistant(tool_calls=[ToolCallData("t1", "f"), ToolCallData("t2", "f")]),
        tool_result("t1", "one", cache_boundary=True),
        tool_result("t2", "two"),
    ]
    body = AnthropicProvider().build_payload(request(messages), stream=False)
    results = body["messages"][2]["content"]
    assert results[0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in results[1]


def test_attachments():
    messages = [
        user(
            "Describe these",
            attachments=[
                AttachmentData("image/jpeg", b"jpeg-bytes", "photo.jpg"),
                AttachmentData("application/pdf", b"%PDF-1.4", "report.pdf"),
                AttachmentData("text/plain", b"plain words", "notes.txt"),
            ],
        )
    ]
    provider = AnthropicProvider(options={"citations": True})
    content = provider.build_payload(request(messages), stream=False)["messages"][0]["content"]
    assert content[0] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/jpeg", "data": "anBlZy1ieXRlcw=="},
    }
    assert content[1] == {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="},
        "title": "report.pdf",
        "citations": {"enabled": True},
    }
    assert content[2]["source"] == {
        "type": "text",
        "media_type": "text/plain",
        "data": "plain words",
    }
    assert content[3] == {"type": "text", "text": "Describe these"}


def test_unsupported_attachment_type():
    messages = [user("?", attachments=[AttachmentData("audio/mpeg", b"...")])]
    with pytest.raises(UnsupportedFeatureError):
        AnthropicProvider().build_payload(request(messages), stream=False)


def test_params():
    params = {
        "temperature": 0.2,
        "top_p": 0.9,
        "stop": "END",
        "anthropic": {"metadata": {"user_id": "u1"}, "service_tier": "auto"},
    }
    body = AnthropicProvider().build_payload(request([user("Hi")], params=params), stream=False)
    assert body["temperature"] == 0.2
    assert body["top_p"] == 0.9
    assert body["stop_sequences"] == ["END"]
    assert body["metadata"] == {"user_id": "u1"}
    assert body["service_tier"] == "auto"
    assert "anthropic" not in body


def test_server_tools_join_function_tools():
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    params = {"anthropic": {"tools": [search]}}
    req = request([user("News?")], tools=[WEATHER], params=params)
    body = AnthropicProvider().build_payload(req, stream=False)
    assert [t["name"] for t in body["tools"]] == ["weather", "web_search"]
    assert body["tools"][1] == search
    assert params == {"anthropic": {"tools": [search]}}  # the request is left alone


def test_max_tokens_defaults():
    def max_tokens(model_id="claude-sonnet-4-5", params=None, **options):
        req = ProviderRequest(model_id=model_id, messages=[user("Hi")], params=params or {})
        provider = AnthropicProvider(options=options)
        return provider.build_payload(req, stream=False)["max_tokens"]

    assert max_tokens() == 8192
    assert max_tokens(max_tokens=2000) == 2000
    assert max_tokens(params={"max_tokens": 300}, max_tokens=2000) == 300
    assert max_tokens("claude-3-haiku-20240307") == 4096
    # the thinking budget must stay below max_tokens
    assert max_tokens(params={"thinking": {"budget_tokens": 10000}}) == 10000 + 8192
    assert max_tokens(params={"thinking": {"budget_tokens": 1024}}) == 8192


def test_thinking_params():
    def thinking(value):
        req = request([user("Hi")], params={"thinking": value})
        return AnthropicProvider().build_payload(req, stream=False).get("thinking")

    assert thinking({"budget_tokens": 2048}) == {"type": "enabled", "budget_tokens": 2048}
    assert thinking({"effort": "high"}) == {"type": "enabled", "budget_tokens": 24576}
    assert thinking(None) is None
    with pytest.raises(UnsupportedFeatureError):
        thinking({"effort": "extreme"})


def test_beta_header_and_base_url():
    transport, sent = replay_transport(synthetic(sse(*text_stream())), check_path=False)
    provider = AnthropicProvider(
        api_key="k",
        base_url="http://localhost:9000/",
        options={"beta": ["a-2025", "b-2025"]},
        transport=transport,
    )
    list(provider.stream(request([user("Hi")])))
    assert str(sent[0].url) == "http://localhost:9000/v1/messages"
    assert sent[0].headers["anthropic-beta"] == "a-2025,b-2025"


def test_invalid_json_event_is_a_provider_error():
    body = sse(*text_stream()[:2]) + "event: content_block_delta\ndata: {not json\n\n"
    provider, _ = provider_for(synthetic(body))
    provider.max_retries = 0
    with pytest.raises(ProviderError, match="not valid JSON"):
        list(provider.stream(request([user("Hi")])))


# -- structured output ----------------------------------------------------------------------
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def test_schema_uses_forced_tool():
    req = request([user("A person")], schema=PERSON, schema_name="person")
    body = AnthropicProvider().build_payload(req, stream=False)
    assert body["tools"] == [
        {"name": "person", "description": body["tools"][0]["description"], "input_schema": PERSON}
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "person"}

    with_tools = request([user("A person")], schema=PERSON, tools=[WEATHER])
    body = AnthropicProvider().build_payload(with_tools, stream=False)
    assert [t["name"] for t in body["tools"]] == ["weather", "response"]
    assert body["tool_choice"] == {"type": "any"}

    thinking = request([user("A person")], schema=PERSON, params=THINKING_PARAMS)
    body = AnthropicProvider().build_payload(thinking, stream=False)
    assert body["tool_choice"] == {"type": "auto"}


def test_schema_rejects_non_object_root():
    req = request([user("Numbers")], schema={"type": "array", "items": {"type": "integer"}})
    with pytest.raises(UnsupportedFeatureError):
        AnthropicProvider().build_payload(req, stream=False)


def test_schema_reply_is_json_content():
    answer = {
        "id": "msg_1",
        "model": MODEL,
        "content": [
            {"type": "tool_use", "id": "toolu_s", "name": "person",
             "input": {"name": "Ada", "age": 36}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 20, "output_tokens": 10},
    }  # fmt: skip
    provider, sent = provider_for(synthetic(answer))
    req = request([user("A person")], schema=PERSON, schema_name="person")

    response = provider.complete(req)

    assert sent_json(sent[0])["tool_choice"] == {"type": "tool", "name": "person"}
    assert json.loads(response.content) == {"name": "Ada", "age": 36}
    assert response.tool_calls == []
    assert (response.finish_reason, response.raw_finish_reason) == ("stop", "tool_use")
    # the same answer read with the request at hand
    assert provider.parse_response(answer, req).content == response.content


def test_schema_reply_streamed_as_text():
    body = sse(
        message_start(),
        block_start(0, {"type": "tool_use", "id": "toolu_s", "name": "response", "input": {}}),
        block_delta(0, {"type": "input_json_delta", "partial_json": '{"name": "Ada",'}),
        block_delta(0, {"type": "input_json_delta", "partial_json": ' "age": 36}'}),
        block_stop(0),
        *message_end("tool_use"),
    )
    provider, _ = provider_for(synthetic(body))

    events, response = run_stream(provider, request([user("A person")], schema=PERSON))

    check_stream_contract(events, response)
    assert of(events, ToolCallDelta) == [] and of(events, ToolCallDone) == []
    assert json.loads(response.content) == {"name": "Ada", "age": 36}
    assert of(events, FinishReasonDone) == [FinishReasonDone("stop", "tool_use")]


# -- citations and server tools ----------------------------------------------------------------
SEARCH_RESULTS = [
    {"type": "web_search_result", "url": "https://example.com/paris", "title": "Paris",
     "encrypted_content": "Eq...", "page_age": "April 30, 2025"},
    {"type": "web_search_result", "url": "https://example.org/fr", "title": "France",
     "encrypted_content": "Er..."},
]  # fmt: skip
WEB_CITATION = {
    "type": "web_search_result_location",
    "url": "https://example.com/paris",
    "title": "Paris",
    "encrypted_index": "Eo...",
    "cited_text": "Paris is the capital of France.",
}
DOC_CITATION = {
    "type": "char_location",
    "cited_text": "The grass is green.",
    "document_index": 0,
    "document_title": "Facts",
    "start_char_index": 0,
    "end_char_index": 19,
}


SOURCES = [
    {"title": "Paris", "url": "https://example.com/paris", "page_age": "April 30, 2025"},
    {"title": "France", "url": "https://example.org/fr"},
]


def check_search_answer(response) -> None:
    assert response.content == "Searching. The capital is Paris. Grass is green."
    (call,) = response.server_tool_calls
    assert call.name == "web_search" and call.id == "srvtoolu_1"
    assert call.arguments == {"query": "capital of France"}
    assert call.status == "completed"
    assert call.result == SOURCES
    web, doc = response.citations
    assert (web.url, web.title, web.cited_text) == (
        "https://example.com/paris", "Paris", "Paris is the capital of France."
    )  # fmt: skip
    assert response.content[web.start_index : web.end_index] == "The capital is Paris."
    assert web.metadata == {"type": "web_search_result_location"}
    assert (doc.title, doc.cited_text, doc.source) == ("Facts", "The grass is green.", "document:0")
    assert doc.metadata["start_char_index"] == 0 and doc.metadata["end_char_index"] == 19
    assert response.content[doc.start_index : doc.end_index] == " Grass is green."


def test_citations_and_server_tools():
    data = {
        "id": "msg_1",
        "model": MODEL,
        "content": [
            {"type": "text", "text": "Searching. "},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
             "input": {"query": "capital of France"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
             "content": SEARCH_RESULTS},
            {"type": "text", "text": "The capital is Paris.", "citations": [WEB_CITATION]},
            {"type": "text", "text": " Grass is green.", "citations": [DOC_CITATION]},
        ],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 100, "output_tokens": 20,
                  "server_tool_use": {"web_search_requests": 1}},
    }  # fmt: skip
    response = AnthropicProvider().parse_response(data, request([]))
    check_search_answer(response)
    assert response.tokens == Tokens(input_tokens=100, output_tokens=20)


def test_citations_and_server_tools_streamed():
    body = sse(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Searching. "}),
        block_stop(0),
        block_start(1, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                        "input": {}}),
        block_delta(1, {"type": "input_json_delta", "partial_json": '{"query": "capital'}),
        block_delta(1, {"type": "input_json_delta", "partial_json": ' of France"}'}),
        block_stop(1),
        block_start(2, {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                        "content": SEARCH_RESULTS}),
        block_stop(2),
        block_start(3, {"type": "text", "text": "", "citations": []}),
        block_delta(3, {"type": "citations_delta", "citation": WEB_CITATION}),
        block_delta(3, {"type": "text_delta", "text": "The capital is Paris."}),
        block_stop(3),
        block_start(4, {"type": "text", "text": ""}),
        block_delta(4, {"type": "citations_delta", "citation": DOC_CITATION}),
        block_delta(4, {"type": "text_delta", "text": " Grass is green."}),
        block_stop(4),
        *message_end("end_turn"),
    )  # fmt: skip
    provider, _ = provider_for(synthetic(body))

    events, response = run_stream(provider, request([user("Capital of France?")]))

    check_stream_contract(events, response)
    assert of(events, ToolCallDelta) == [] and of(events, ToolCallDone) == []
    status, done = of(events, WebSearchStatus), of(events, WebSearchDone)
    assert status == [WebSearchStatus("searching", query="capital of France")]
    assert done == [WebSearchDone("capital of France", sources=SOURCES)]
    cited = events.index(TextDelta("The capital is Paris."))
    assert events.index(status[0]) < events.index(done[0]) < cited
    check_search_answer(response)
    assert [b["type"] for b in response.raw["content"]] == [
        "text", "server_tool_use", "web_search_tool_result", "text", "text"
    ]  # fmt: skip
    assert response.raw["content"][3]["citations"] == [WEB_CITATION]


def test_failed_web_search():
    data = {
        "model": MODEL,
        "content": [
            {"type": "server_tool_use", "id": "srv_2", "name": "web_search",
             "input": {"query": "x"}},
            {"type": "web_search_tool_result", "tool_use_id": "srv_2",
             "content": {"type": "web_search_tool_result_error",
                         "error_code": "max_uses_exceeded"}},
        ],
        "stop_reason": "end_turn",
        "usage": {},
    }  # fmt: skip
    (call,) = AnthropicProvider().parse_response(data, request([])).server_tool_calls
    assert call.status == "failed"
    assert call.result == {"error_code": "max_uses_exceeded"}


# -- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 208310 tokens > 200000 maximum",
        "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000",
    ],
)
def test_context_length_error(message):
    payload = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    provider, _ = provider_for(synthetic(payload, status=400))
    with pytest.raises(ContextLengthExceededError) as info:
        provider.complete(request([user("Hi")]))
    assert info.value.status == 400
    assert info.value.retryable is False


def test_tool_named_response_after_a_schema_request_is_a_tool_call():
    # Building a schema request must leave nothing behind that changes how a later answer
    # of another request is read: a real tool named "response" stays a tool call.
    tool_answer = {
        "model": MODEL,
        "content": [{"type": "tool_use", "id": "toolu_r", "name": "response", "input": {"q": "x"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 5, "output_tokens": 3},
    }
    provider, sent = provider_for(synthetic(tool_answer))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    provider.build_payload(request([user("a?")], schema=schema), stream=False)
    response_tool = ToolSpec(
        name="response", description="Send a response", parameters={"type": "object"}
    )

    response = provider.complete(request([user("send it")], tools=[response_tool]))

    assert "tool_choice" not in sent_json(sent[0])
    assert response.content == ""
    assert [(c.call_id, c.name, c.arguments) for c in response.tool_calls] == [
        ("toolu_r", "response", {"q": "x"})
    ]
    assert response.finish_reason == "tool_calls"


def test_parse_response_reads_only_its_arguments():
    tool_answer = {
        "model": MODEL,
        "content": [{"type": "tool_use", "id": "toolu_r", "name": "response", "input": {}}],
        "stop_reason": "tool_use",
    }
    provider = AnthropicProvider()
    schema_request = request([user("a?")], schema={"type": "object"})
    provider.build_payload(schema_request, stream=False)  # the schema request is sent first

    later = provider.parse_response(tool_answer, request([user("send it")]))

    assert [c.name for c in later.tool_calls] == ["response"]
    assert later.content == ""
    assert provider.parse_response(tool_answer, schema_request).content == "{}"
