"""OpenAI Responses API and xAI: recorded exchanges replayed through the providers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from django_llmchat.errors import (
    AuthenticationError,
    IncompleteStreamError,
    ProviderError,
    RateLimitError,
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
    WebSearchDone,
    WebSearchStatus,
)
from django_llmchat.providers.openai_responses import (
    FINISH_REASONS,
    OpenAIResponsesProvider,
    XAIProvider,
)
from django_llmchat.providers.types import (
    AttachmentData,
    ProviderMessage,
    ProviderRequest,
    ProviderResponse,
    ToolSpec,
)
from django_llmchat.values import Citation, Tokens

from .replay import (
    check_sequence,
    load_fixture,
    replay_transport,
    request_body,
    run_stream,
    sent_json,
)

BASIC = "chat_basic_chat_functionality_openai_gpt-5-nano_can_have_a_basic_conversation"
STREAMING = "chat_streaming_responses_openai_gpt-5-nano_supports_streaming_responses"
TOOLS = "chat_function_calling_openai_gpt-5-nano_can_use_tools"
TOOLS_STREAMING = (
    "chat_function_calling_openai_gpt-5-nano_can_use_tools_with_multi-turn_streaming_conversations"
)
AUTH_ERROR = "chat_error_handling_with_openai_gpt-5-nano_raises_appropriate_auth_error"
THINKING = "chat_with_extended_thinking_openai_gpt-5_4_returns_thinking_when_available"
THINKING_STREAM = (
    "chat_with_extended_thinking_openai_gpt-5_4_streams_thinking_content_when_available"
)
THINKING_TURNS = (
    "chat_with_extended_thinking_openai_gpt-5_4_preserves_thinking_signatures_between_turns_"
    "when_provided"
)
XAI_TOOLS = "chat_function_calling_xai_grok-4-1-fast-non-reasoning_can_use_tools"
XAI_TOOLS_STREAMING = (
    "chat_function_calling_xai_grok-4-1-fast-non-reasoning_can_use_tools_with_multi-turn_"
    "streaming_conversations"
)
XAI_AUTH_ERROR = (
    "chat_error_handling_with_xai_grok-4-1-fast-non-reasoning_raises_appropriate_auth_error"
)

BERLIN = "What's the weather in Berlin? (52.5200, 13.4050)"
PARIS = "What's the weather in Paris? (48.8575, 2.3514)"


def weather_result(lat: str, lon: str) -> str:
    return f"Current weather at {lat}, {lon}: 15°C, Wind: 10 km/h"


# -- helpers -------------------------------------------------------------------------------


def recorded_tool(fixture: dict[str, Any]) -> ToolSpec:
    """The weather tool exactly as the recording declared it."""
    spec = request_body(fixture["interactions"][0])["tools"][0]
    return ToolSpec(spec["name"], spec["description"], spec["parameters"])


def make(cls, fixture, *, max_retries=0, **kw):
    transport, sent = replay_transport(fixture, **kw)
    provider = cls(api_key="test-key", transport=transport, max_retries=max_retries)
    provider.sleep = lambda seconds: None
    return provider, sent


def item_shape(item: dict[str, Any]) -> tuple:
    """What must match between a built input item and the recorded one."""
    kind = item.get("type", "message")
    if kind == "message":
        content = item["content"]
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content)
        return ("message", item["role"], content)
    if kind == "reasoning":
        return ("reasoning", item.get("encrypted_content"), item.get("summary"))
    if kind == "function_call":
        return ("function_call", item["call_id"], item["name"], json.loads(item["arguments"]))
    if kind == "function_call_output":
        return ("function_call_output", item["call_id"], item["output"])
    return (kind,)


def assert_same_request(sent: dict[str, Any], recorded: dict[str, Any]) -> None:
    assert [item_shape(i) for i in sent["input"]] == [item_shape(i) for i in recorded["input"]]
    assert set(sent) == set(recorded)
    for key in ("model", "stream", "store", "include", "reasoning"):
        assert sent.get(key) == recorded.get(key)
    if "tools" in recorded:
        assert [t["name"] for t in sent["tools"]] == [t["name"] for t in recorded["tools"]]


def follow_up(
    messages: list[ProviderMessage], response: ProviderResponse, provider: str, results: list[str]
) -> None:
    """Append the assistant turn built from ``response`` and one result per tool call."""
    messages.append(
        ProviderMessage(
            role="assistant",
            content=response.content,
            tool_calls=response.tool_calls,
            thinking=response.thinking,
            reasoning_items=response.reasoning_items,
            provider=provider,
            model_id=response.model_id,
        )
    )
    for call, result in zip(response.tool_calls, results, strict=True):
        messages.append(
            ProviderMessage(
                role="tool", content=result, tool_call_id=call.call_id, tool_name=call.name
            )
        )


def sse(*events: tuple[str, dict[str, Any]]) -> str:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)


def interaction(body: str, *, status: int = 200, uri: str = "https://api.openai.com/v1/responses"):
    content_type = "text/event-stream" if body.startswith("event:") else "application/json"
    return {
        "request": {"method": "POST", "uri": uri, "headers": {}, "body": ""},
        "response": {"status": status, "headers": {"Content-Type": [content_type]}, "body": body},
    }


def completed(status: str = "completed", **extra: Any) -> dict[str, Any]:
    response = {
        "id": "resp_1",
        "model": "gpt-test",
        "status": status,
        "output": [],
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
        },
        **extra,
    }
    return {"type": f"response.{status}", "response": response}


def simple_request(**kw: Any) -> ProviderRequest:
    return ProviderRequest("gpt-test", [ProviderMessage("user", "Hi")], **kw)


# -- OpenAI: plain chat --------------------------------------------------------------------


def test_basic_conversation():
    fixture = load_fixture(BASIC)
    provider, sent = make(OpenAIResponsesProvider, fixture)
    response = provider.complete(
        ProviderRequest("gpt-5-nano", [ProviderMessage("user", "What's 2 + 2?")])
    )

    assert response.content == "4"
    assert response.finish_reason == "stop"
    assert response.raw_finish_reason == "completed"
    assert response.message_finish_reason == "stop"
    assert response.tokens == Tokens(
        input_tokens=13,
        output_tokens=157,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=128,
    )
    assert response.model_id == "gpt-5-nano-2025-08-07"
    assert response.thinking is None  # the reasoning item has no summary
    assert [i["type"] for i in response.reasoning_items] == ["reasoning"]
    assert response.reasoning_items[0]["encrypted_content"].startswith("gAAAAA")
    assert response.raw["id"].startswith("resp_")
    # The body is exactly the recorded one.
    assert sent_json(sent[0]) == request_body(fixture["interactions"][0])
    assert sent[0].url == "https://api.openai.com/v1/responses"
    assert sent[0].headers["authorization"] == "Bearer test-key"


@pytest.mark.parametrize("chunk_size", [None, 7])
def test_streaming(chunk_size):
    fixture = load_fixture(STREAMING)
    provider, sent = make(OpenAIResponsesProvider, fixture, chunk_size=chunk_size)
    events, response = run_stream(
        provider, ProviderRequest("gpt-5-nano", [ProviderMessage("user", "Count from 1 to 3")])
    )

    check_sequence(events, response)
    assert response.content == "1, 2, 3"
    assert [e.content for e in events if isinstance(e, TextDelta)] == list("1, 2, 3")
    assert isinstance(events[-1], TextDone)
    assert response.tokens == Tokens(
        input_tokens=13,
        output_tokens=284,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=256,
    )
    assert response.finish_reason == "stop"
    assert response.model_id == "gpt-5-nano-2025-08-07"
    assert len(response.reasoning_items) == 1
    assert response.raw["status"] == "completed"
    assert sent_json(sent[0]) == request_body(fixture["interactions"][0])


def test_auth_error():
    provider, _ = make(OpenAIResponsesProvider, AUTH_ERROR)
    with pytest.raises(AuthenticationError) as info:
        provider.complete(ProviderRequest("gpt-5-nano", [ProviderMessage("user", "Hello")]))
    assert info.value.status == 401
    assert info.value.code == "invalid_api_key"
    assert info.value.provider == "openai"
    assert "test-key" not in str(info.value)


# -- OpenAI: tools -------------------------------------------------------------------------


def test_tools_round_trip():
    fixture = load_fixture(TOOLS)
    provider, sent = make(OpenAIResponsesProvider, fixture)
    tool = recorded_tool(fixture)
    messages = [ProviderMessage("user", BERLIN)]

    first = provider.complete(ProviderRequest("gpt-5-nano", list(messages), tools=[tool]))
    assert first.content == ""
    assert first.finish_reason == "tool_calls"
    assert first.raw_finish_reason == "completed"
    [call] = first.tool_calls
    assert call.name == "weather"
    assert call.arguments == {"latitude": "52.5200", "longitude": "13.4050"}
    assert call.call_id == "call_R1nRm6zHHaYdJmzUTyHeErE1"
    assert call.item_id == "fc_070b6a5867d3bddf016a85bef0ac3887d29ebf55abf1b738a6"
    assert first.tokens == Tokens(
        input_tokens=87,
        output_tokens=211,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=128,
    )
    body = sent_json(sent[0])
    assert body["tools"] == [
        {
            "type": "function",
            "name": "weather",
            "description": "Gets current weather for a location",
            "parameters": tool.parameters,
        }
    ]

    follow_up(messages, first, "openai", [weather_result("52.5200", "13.4050")])
    second = provider.complete(ProviderRequest("gpt-5-nano", list(messages), tools=[tool]))
    assert second.content.startswith("Current weather in Berlin (52.5200, 13.4050): 15°C")
    assert second.finish_reason == "stop"
    assert second.tool_calls == []
    assert second.tokens == Tokens(
        input_tokens=330,
        output_tokens=259,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=192,
    )

    body = sent_json(sent[1])
    assert_same_request(body, request_body(fixture["interactions"][1]))
    # OpenAI gets its own ids back: the reasoning item verbatim, the function call's item id.
    reasoning, function_call = body["input"][1], body["input"][2]
    assert reasoning == first.reasoning_items[0]
    assert function_call["id"] == call.item_id


@pytest.mark.parametrize("chunk_size", [None, 11])
def test_tools_multi_turn_streaming(chunk_size):
    fixture = load_fixture(TOOLS_STREAMING)
    interactions = fixture["interactions"]
    provider, sent = make(OpenAIResponsesProvider, fixture, chunk_size=chunk_size)
    tool = recorded_tool(fixture)
    messages = [ProviderMessage("user", BERLIN)]

    def step():
        return run_stream(provider, ProviderRequest("gpt-5-nano", list(messages), tools=[tool]))

    events, first = step()
    check_sequence(events, first)
    assert not any(isinstance(e, (TextDelta, TextDone)) for e in events)
    [call] = first.tool_calls
    assert (call.name, call.call_id) == ("weather", "call_E9m0fralKLjUmND1MuTXjnqm")
    assert call.arguments == {"latitude": "52.5200", "longitude": "13.4050"}
    assert call.item_id == "fc_07ee8752f9940d57016a85bfae6bc487d29b9724d95753d435"
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert len(deltas) == 15 and deltas[0].name == "weather"
    assert first.finish_reason == "tool_calls"
    assert first.tokens == Tokens(
        input_tokens=87,
        output_tokens=339,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=256,
    )

    follow_up(messages, first, "openai", [weather_result("52.5200", "13.4050")])
    events, second = step()
    check_sequence(events, second)
    assert second.content == "Berlin (52.5200, 13.4050): 15°C, wind 10 km/h."
    assert second.finish_reason == "stop"
    assert second.tokens == Tokens(
        input_tokens=458,
        output_tokens=306,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=256,
    )

    follow_up(messages, second, "openai", [])
    messages.append(ProviderMessage("user", PARIS))
    events, third = step()
    check_sequence(events, third)
    [call] = third.tool_calls
    assert (call.name, call.call_id) == ("weather", "call_eX5cppckqGeLFEXcFS3pW2cE")
    assert call.arguments == {"latitude": "48.8575", "longitude": "2.3514"}
    assert third.tokens == Tokens(
        input_tokens=197,
        output_tokens=224,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=192,
    )

    follow_up(messages, third, "openai", [weather_result("48.8575", "2.3514")])
    events, fourth = step()
    check_sequence(events, fourth)
    assert fourth.content == "Paris (48.8575, 2.3514): 15°C, wind 10 km/h."
    assert fourth.tokens == Tokens(
        input_tokens=453,
        output_tokens=227,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=192,
    )

    assert len(sent) == 4
    for request, recorded in zip(sent, interactions, strict=True):
        assert_same_request(sent_json(request), request_body(recorded))
    kinds = [item_shape(i)[0] for i in sent_json(sent[3])["input"]]
    assert kinds == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "message",
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]


# -- OpenAI: reasoning ---------------------------------------------------------------------


def test_thinking_request_and_answer():
    fixture = load_fixture(THINKING)
    provider, sent = make(OpenAIResponsesProvider, fixture)
    prompt = request_body(fixture["interactions"][0])["input"][0]["content"]
    response = provider.complete(
        ProviderRequest(
            "gpt-5.4", [ProviderMessage("user", prompt)], params={"thinking": {"effort": "medium"}}
        )
    )
    body = sent_json(sent[0])
    assert body["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert body["store"] is False
    assert body["include"] == ["reasoning.encrypted_content"]
    assert response.content.startswith("Ask it:")
    assert response.tokens == Tokens(
        input_tokens=50,
        output_tokens=1229,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=1016,
    )
    assert response.thinking is None  # recorded without a summary
    assert len(response.reasoning_items) == 1


def test_thinking_stream_matches_recorded_request_without_summary():
    fixture = load_fixture(THINKING_STREAM)
    provider, sent = make(OpenAIResponsesProvider, fixture)
    prompt = request_body(fixture["interactions"][0])["input"][0]["content"]
    events, response = run_stream(
        provider,
        ProviderRequest(
            "gpt-5.4",
            [ProviderMessage("user", prompt)],
            params={"thinking": {"effort": "medium", "summary": None}},
        ),
    )
    assert sent_json(sent[0]) == request_body(fixture["interactions"][0])
    check_sequence(events, response)
    assert sum(isinstance(e, TextDelta) for e in events) == 145
    assert response.tokens == Tokens(
        input_tokens=50,
        output_tokens=667,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=516,
    )
    assert response.finish_reason == "stop"
    assert len(response.reasoning_items) == 1


def test_thinking_between_turns():
    fixture = load_fixture(THINKING_TURNS)
    provider, sent = make(OpenAIResponsesProvider, fixture)
    params = {"thinking": {"effort": "medium", "summary": None}}
    messages = [ProviderMessage("user", "What is 5 + 3?")]
    first = provider.complete(ProviderRequest("gpt-5.4", list(messages), params=params))
    assert first.content == "8"
    assert first.reasoning_items == []
    assert first.tokens == Tokens(
        input_tokens=14,
        output_tokens=5,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=0,
    )
    follow_up(messages, first, "openai", [])
    messages.append(ProviderMessage("user", "Now multiply that by 2"))
    second = provider.complete(ProviderRequest("gpt-5.4", list(messages), params=params))
    assert second.content == "16"
    assert second.tokens == Tokens(
        input_tokens=31,
        output_tokens=16,
        cache_read_tokens=0,
        cache_write_tokens=0,
        thinking_tokens=9,
    )
    for request, recorded in zip(sent, fixture["interactions"], strict=True):
        assert sent_json(request) == request_body(recorded)


def test_reasoning_summary_stream_events():
    body = sse(
        ("response.created", {"type": "response.created", "response": {"model": "gpt-test"}}),
        (
            "response.output_item.added",
            {"type": "response.output_item.added", "item": {"id": "rs_1", "type": "reasoning"}},
        ),
        *[
            (
                "response.reasoning_summary_text.delta",
                {
                    "type": "response.reasoning_summary_text.delta",
                    "item_id": "rs_1",
                    "summary_index": index,
                    "delta": delta,
                },
            )
            for index, delta in [(0, "First "), (0, "part."), (1, "Second.")]
        ],
        (
            "response.output_item.done",
            {
                "type": "response.output_item.done",
                "item": {
                    "id": "rs_1",
                    "type": "reasoning",
                    "encrypted_content": "enc",
                    "summary": [
                        {"type": "summary_text", "text": "First part."},
                        {"type": "summary_text", "text": "Second."},
                    ],
                },
            },
        ),
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Hi"}),
        ("response.completed", completed()),
    )
    provider, _ = make(OpenAIResponsesProvider, [interaction(body)])
    events, response = run_stream(provider, simple_request(params={"thinking": True}))
    check_sequence(events, response)
    [done] = [e for e in events if isinstance(e, ReasoningDone)]
    assert done.part.text == "First part.\n\nSecond."
    assert done.part.format == "openai-responses"
    assert response.thinking.text == "First part.\n\nSecond."
    assert response.reasoning_items[0]["encrypted_content"] == "enc"
    assert response.tokens == Tokens(
        input_tokens=6,
        output_tokens=5,
        cache_read_tokens=4,
        thinking_tokens=0,
    )


def test_reasoning_items_replay_only_to_their_provider():
    item = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "enc"}
    bare = {"id": "rs_2", "type": "reasoning", "summary": []}  # nothing to replay statelessly
    messages = [
        ProviderMessage("user", "Hi"),
        ProviderMessage("assistant", "Hello", reasoning_items=[item, bare], provider="openai"),
        ProviderMessage("assistant", "Again", reasoning_items=[item], provider="anthropic"),
    ]
    request = ProviderRequest("gpt-test", messages)
    body = OpenAIResponsesProvider().build_payload(request, stream=False)
    assert body["input"] == [
        {"role": "user", "content": "Hi"},
        item,
        {"role": "assistant", "content": [{"type": "output_text", "text": "Hello"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Again"}]},
    ]


# -- OpenAI: request options ---------------------------------------------------------------


def test_params_schema_and_vendor_options():
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    request = ProviderRequest(
        "gpt-test",
        [ProviderMessage("system", "Be terse."), ProviderMessage("user", "Hi")],
        params={
            "temperature": 0.2,
            "max_tokens": 300,
            "thinking": {"budget_tokens": 8000},
            "openai": {"reasoning": {"summary": "detailed"}, "prompt_cache_key": "k1"},
        },
        schema=schema,
        schema_name="answer",
    )
    body = OpenAIResponsesProvider().build_payload(request, stream=True)
    assert body["instructions"] == "Be terse."
    assert body["input"] == [{"role": "user", "content": "Hi"}]
    assert body["temperature"] == 0.2
    assert body["max_output_tokens"] == 300
    assert body["reasoning"] == {"effort": "medium", "summary": "detailed"}
    assert body["prompt_cache_key"] == "k1"
    assert body["stream"] is True
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}
    }


def test_attachments():
    message = ProviderMessage(
        "user",
        "Look",
        attachments=[
            AttachmentData("image/png", b"\x89PNG", "a.png"),
            AttachmentData("application/pdf", b"%PDF", "doc.pdf"),
            AttachmentData("text/plain", b"hello", "notes.txt"),
        ],
    )
    body = OpenAIResponsesProvider().build_payload(
        ProviderRequest("gpt-test", [message]), stream=False
    )
    assert body["input"][0]["content"] == [
        {"type": "input_text", "text": "Look"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw==", "detail": "auto"},
        {
            "type": "input_file",
            "filename": "doc.pdf",
            "file_data": "data:application/pdf;base64,JVBERg==",
        },
        {"type": "input_text", "text": "notes.txt:\nhello"},
    ]


def test_finish_reason_mapping():
    assert FINISH_REASONS["completed"] == "stop"
    assert FINISH_REASONS["max_output_tokens"] == "length"
    assert FINISH_REASONS["content_filter"] == "content_filter"
    assert FINISH_REASONS["failed"] == "error"
    assert FINISH_REASONS["cancelled"] == "other"


@pytest.mark.parametrize(
    "reason, expected, stored",
    [("max_output_tokens", "length", "max_tokens"), ("content_filter", "content_filter", None)],
)
def test_incomplete_responses(reason, expected, stored):
    data = completed("incomplete", incomplete_details={"reason": reason})["response"]
    provider, _ = make(OpenAIResponsesProvider, [interaction(json.dumps(data))])
    response = provider.complete(simple_request())
    assert (response.finish_reason, response.raw_finish_reason) == (expected, reason)
    assert response.message_finish_reason == (stored or expected)

    body = sse(
        ("response.incomplete", completed("incomplete", incomplete_details={"reason": reason}))
    )
    provider, _ = make(OpenAIResponsesProvider, [interaction(body)])
    events, response = run_stream(provider, simple_request())
    check_sequence(events, response)
    assert response.finish_reason == expected


def test_citations_and_web_search():
    text = "Django is a web framework."
    data = completed(
        output=[
            {
                "id": "ws_1",
                "type": "web_search_call",
                "status": "completed",
                "action": {"type": "search", "query": "django"},
            },
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [
                    {
                        "type": "output_text",
                        "text": text,
                        "annotations": [
                            {
                                "type": "url_citation",
                                "start_index": 0,
                                "end_index": 6,
                                "url": "https://djangoproject.com",
                                "title": "Django",
                            }
                        ],
                    }
                ],
            },
        ]
    )
    provider, _ = make(OpenAIResponsesProvider, [interaction(json.dumps(data["response"]))])
    response = provider.complete(simple_request())
    assert response.content == text
    assert response.citations == [
        Citation(
            url="https://djangoproject.com",
            title="Django",
            cited_text="Django",
            start_index=0,
            end_index=6,
        )
    ]
    [search] = response.server_tool_calls
    assert (search.name, search.id, search.arguments) == (
        "web_search",
        "ws_1",
        {"type": "search", "query": "django"},
    )

    # Streamed: status events, then the search result, then the citation from the message.
    body = sse(
        (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "item": {"id": "ws_1", "type": "web_search_call"},
            },
        ),
        ("response.web_search_call.searching", {"type": "response.web_search_call.searching"}),
        ("response.web_search_call.completed", {"type": "response.web_search_call.completed"}),
        (
            "response.output_item.done",
            {"type": "response.output_item.done", "item": data["response"]["output"][0]},
        ),
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": text}),
        (
            "response.output_item.done",
            {"type": "response.output_item.done", "item": data["response"]["output"][1]},
        ),
        ("response.completed", data),
    )
    provider, _ = make(OpenAIResponsesProvider, [interaction(body)])
    events, streamed = run_stream(provider, simple_request())
    check_sequence(events, streamed)
    assert [e.status for e in events if isinstance(e, WebSearchStatus)] == [
        "in_progress",
        "searching",
        "completed",
    ]
    [done] = [e for e in events if isinstance(e, WebSearchDone)]
    assert done.query == "django"
    assert streamed.citations == response.citations
    assert streamed.server_tool_calls == response.server_tool_calls


# -- OpenAI: broken streams ----------------------------------------------------------------


def test_truncated_stream_raises_incomplete():
    fixture = load_fixture(STREAMING)
    [recorded] = fixture["interactions"]
    cut = json.loads(json.dumps(recorded))
    body = cut["response"]["body"]
    cut["response"]["body"] = body[: body.index("event: response.completed")]
    provider, _ = make(OpenAIResponsesProvider, [cut])
    seen = []
    with pytest.raises(IncompleteStreamError):
        for event in provider.stream(
            ProviderRequest("gpt-5-nano", [ProviderMessage("user", "Count from 1 to 3")])
        ):
            seen.append(event)
    assert "".join(e.content for e in seen if isinstance(e, TextDelta)) == "1, 2, 3"
    assert not any(isinstance(e, (TextDone, TokenUsageDone, FinishReasonDone)) for e in seen)


def test_mid_stream_error_event_flat():
    body = sse(
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Hel"}),
        ("error", {"type": "error", "code": "server_error", "message": "Something broke"}),
        ("response.failed", completed("failed", error={"code": "server_error", "message": "x"})),
    )
    provider, _ = make(OpenAIResponsesProvider, [interaction(body)])
    seen = []
    with pytest.raises(ProviderError) as info:
        for event in provider.stream(simple_request()):
            seen.append(event)
    assert info.value.message == "Something broke"
    assert info.value.code == "server_error"
    assert info.value.retryable is True
    assert seen == [TextDelta("Hel")]


def test_mid_stream_error_event_nested():
    body = sse(
        (
            "error",
            {
                "type": "error",
                "error": {"type": "tokens", "code": "rate_limit_exceeded", "message": "Slow down"},
            },
        ),
    )
    provider, _ = make(OpenAIResponsesProvider, [interaction(body)])
    with pytest.raises(RateLimitError) as info:
        list(provider.stream(simple_request()))
    assert info.value.message == "Slow down"


def test_response_failed_raises():
    failed = completed("failed", error={"code": "server_error", "message": "Model crashed"})
    provider, _ = make(OpenAIResponsesProvider, [interaction(sse(("response.failed", failed)))])
    with pytest.raises(ProviderError) as info:
        list(provider.stream(simple_request()))
    assert info.value.message == "Model crashed"

    provider, _ = make(OpenAIResponsesProvider, [interaction(json.dumps(failed["response"]))])
    with pytest.raises(ProviderError):
        provider.complete(simple_request())


# -- xAI -----------------------------------------------------------------------------------


def test_xai_tools_round_trip():
    fixture = load_fixture(XAI_TOOLS)
    provider, sent = make(XAIProvider, fixture)
    tool = recorded_tool(fixture)
    messages = [ProviderMessage("user", BERLIN)]

    first = provider.complete(ProviderRequest("grok-4.3", list(messages), tools=[tool]))
    [call] = first.tool_calls
    assert call.name == "weather"
    assert call.arguments == {"latitude": "52.5200", "longitude": "13.4050"}
    assert call.call_id == "call-cf08a1a3-d6a7-4fed-b17d-bf4860ffe04c-0"
    assert first.finish_reason == "tool_calls"
    assert (
        first.thinking.text
        == 'The user asked: "What\'s the weather in Berlin? (52.5200, 13.4050)"\n'
    )
    assert first.tokens == Tokens(
        input_tokens=148, output_tokens=127, cache_read_tokens=192, thinking_tokens=105
    )
    assert sent[0].url == "https://api.x.ai/v1/responses"

    follow_up(messages, first, "xai", [weather_result("52.5200", "13.4050")])
    second = provider.complete(ProviderRequest("grok-4.3", list(messages), tools=[tool]))
    assert second.content == (
        "The current weather in Berlin (at coordinates 52.5200, 13.4050) is 15°C with wind at "
        "10 km/h."
    )
    assert second.tokens == Tokens(
        input_tokens=177, output_tokens=90, cache_read_tokens=320, thinking_tokens=58
    )
    # xAI gets no item ids back: the input is exactly the recorded one.
    body, recorded = sent_json(sent[1]), request_body(fixture["interactions"][1])
    assert body["input"] == recorded["input"]
    assert_same_request(body, recorded)


def test_xai_multi_turn_streaming():
    fixture = load_fixture(XAI_TOOLS_STREAMING)
    provider, sent = make(XAIProvider, fixture, chunk_size=13)
    tool = recorded_tool(fixture)
    messages = [ProviderMessage("user", BERLIN)]

    def step():
        return run_stream(provider, ProviderRequest("grok-4.3", list(messages), tools=[tool]))

    events, first = step()
    check_sequence(events, first)
    assert sum(isinstance(e, ReasoningDelta) for e in events) == 23
    assert (
        first.thinking.text
        == 'The user asked: "What\'s the weather in Berlin? (52.5200, 13.4050)"\n'
    )
    [call] = first.tool_calls
    assert call.call_id == "call-5386e269-cd64-432e-aa64-5c80dd4e0286-0"
    assert call.arguments == {"latitude": "52.5200", "longitude": "13.4050"}
    assert first.tokens == Tokens(
        input_tokens=20, output_tokens=105, cache_read_tokens=320, thinking_tokens=83
    )
    first_kinds = [type(e).__name__ for e in events]
    assert first_kinds.index("ReasoningDone") < first_kinds.index("ToolCallDelta")

    follow_up(messages, first, "xai", [weather_result("52.5200", "13.4050")])
    events, second = step()
    check_sequence(events, second)
    assert second.content.startswith("The current weather in Berlin")
    assert second.tokens == Tokens(
        input_tokens=155, output_tokens=91, cache_read_tokens=320, thinking_tokens=59
    )

    follow_up(messages, second, "xai", [])
    messages.append(ProviderMessage("user", PARIS))
    events, third = step()
    check_sequence(events, third)
    [call] = third.tool_calls
    assert call.call_id == "call-700ae0e6-8f3c-4b43-afda-9edc0198f909-1"
    assert call.arguments == {"latitude": "48.8575", "longitude": "2.3514"}
    assert third.tokens == Tokens(
        input_tokens=211, output_tokens=106, cache_read_tokens=384, thinking_tokens=84
    )

    follow_up(messages, third, "xai", [weather_result("48.8575", "2.3514")])
    events, fourth = step()
    check_sequence(events, fourth)
    assert fourth.content.startswith("The current weather in Paris")
    assert fourth.tokens == Tokens(
        input_tokens=155, output_tokens=109, cache_read_tokens=576, thinking_tokens=77
    )

    for request, recorded in zip(sent, fixture["interactions"], strict=True):
        body, expected = sent_json(request), request_body(recorded)
        assert body["input"] == expected["input"]
        assert_same_request(body, expected)


def test_xai_auth_error():
    provider, _ = make(XAIProvider, XAI_AUTH_ERROR)
    with pytest.raises(AuthenticationError) as info:
        provider.complete(ProviderRequest("grok-4.3", [ProviderMessage("user", "Hello")]))
    assert info.value.status == 400
    assert info.value.code == "invalid-argument"
    assert info.value.provider == "xai"


def test_xai_differences():
    request = ProviderRequest(
        "grok-4.3",
        [ProviderMessage("system", "Be terse."), ProviderMessage("user", "Hi")],
        params={"thinking": {"effort": "low"}},
    )
    body = XAIProvider().build_payload(request, stream=False)
    assert "instructions" not in body
    assert body["input"][0] == {"role": "system", "content": "Be terse."}
    assert body["reasoning"] == {"effort": "low"}
    pdf = ProviderMessage("user", "Read", attachments=[AttachmentData("application/pdf", b"%PDF")])
    with pytest.raises(UnsupportedFeatureError):
        XAIProvider().build_payload(ProviderRequest("grok-4.3", [pdf]), stream=False)


def test_two_reasoning_items_in_one_stream():
    def reasoning(item_id: str, text: str, stream_deltas: bool) -> list:
        item = {"id": item_id, "type": "reasoning", "encrypted_content": "e-" + item_id}
        events = [
            ("response.output_item.added", {"type": "response.output_item.added", "item": item})
        ]
        if stream_deltas:
            events.append(
                (
                    "response.reasoning_summary_text.delta",
                    {
                        "type": "response.reasoning_summary_text.delta",
                        "item_id": item_id,
                        "summary_index": 0,
                        "delta": text,
                    },
                )
            )
        done = {**item, "summary": [{"type": "summary_text", "text": text}]}
        events.append(
            ("response.output_item.done", {"type": "response.output_item.done", "item": done})
        )
        return events

    body = sse(
        *reasoning("rs_1", "Search first.", True),
        *reasoning("rs_2", "Now answer.", True),
        ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Done"}),
        ("response.completed", completed()),
    )
    provider, _ = make(OpenAIResponsesProvider, [interaction(body)])
    events, response = run_stream(provider, simple_request())
    check_sequence(events, response)
    assert response.thinking.text == "Search first.\n\nNow answer."
    assert [i["id"] for i in response.reasoning_items] == ["rs_1", "rs_2"]
    # The same text as a whole answer gives.
    whole = provider.parse_response(
        {
            "status": "completed",
            "output": [
                {
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": "Search first."}],
                },
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Now answer."}]},
            ],
        },
        ProviderRequest(model_id="m", messages=[]),
    )
    assert whole.thinking.text == response.thinking.text


def test_organization_and_project_headers():
    provider = OpenAIResponsesProvider(
        api_key="sk-test", options={"options": {"organization": "org-1", "project": "proj-1"}}
    )
    assert provider.headers()["OpenAI-Organization"] == "org-1"
    assert provider.headers()["OpenAI-Project"] == "proj-1"
    assert provider.headers()["Authorization"] == "Bearer sk-test"
