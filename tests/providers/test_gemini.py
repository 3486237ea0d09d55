"""Gemini: recorded exchanges replayed through the provider."""

from __future__ import annotations

import json
from typing import Any

import pytest

from django_llmchat.errors import (
    AuthenticationError,
    IncompleteStreamError,
    ProviderError,
    RateLimitError,
)
from django_llmchat.events import (
    FinishReasonDone,
    ReasoningDone,
    TextDelta,
    TextDone,
    TokenUsageDone,
    ToolCallDelta,
    ToolCallDone,
    WebSearchDone,
)
from django_llmchat.providers.gemini import FINISH_REASONS, GeminiProvider, gemini_schema
from django_llmchat.providers.types import (
    AttachmentData,
    ProviderMessage,
    ProviderRequest,
    ProviderResponse,
    ToolCallData,
    ToolSpec,
)
from django_llmchat.values import Citation, Thinking, Tokens

from .replay import (
    check_sequence,
    load_fixture,
    replay_transport,
    request_body,
    response_body,
    run_stream,
    sent_json,
)

BASIC = "chat_basic_chat_functionality_gemini_gemini-2_5-flash_can_have_a_basic_conversation"
STREAMING = "chat_streaming_responses_gemini_gemini-2_5-flash_supports_streaming_responses"
TOOLS = "chat_function_calling_gemini_gemini-2_5-flash_can_use_tools"
TOOLS_STREAMING = (
    "chat_function_calling_gemini_gemini-2_5-flash_can_use_tools_with_multi-turn_streaming_"
    "conversations"
)
AUTH_ERROR = "chat_error_handling_with_gemini_gemini-2_5-flash_raises_appropriate_auth_error"

MODEL = "gemini-2.5-flash"
BERLIN = "What's the weather in Berlin? (52.5200, 13.4050)"
PARIS = "What's the weather in Paris? (48.8575, 2.3514)"
STREAM_URI = (
    "https://generativelanguage.googleapis.com/v1beta/models/gemini-test:"
    "streamGenerateContent?alt=sse"
)
WEATHER = ToolSpec(
    "weather",
    "Gets current weather for a location",
    {
        "type": "object",
        "properties": {
            "latitude": {"type": "string", "description": "Latitude (e.g., 52.5200)"},
            "longitude": {"type": "string", "description": "Longitude (e.g., 13.4050)"},
        },
        "required": ["latitude", "longitude"],
        "additionalProperties": False,
    },
)


def weather_result(lat: str, lon: str) -> str:
    return f"Current weather at {lat}, {lon}: 15°C, Wind: 10 km/h"


# -- helpers -------------------------------------------------------------------------------


def make(fixture, *, max_retries=0, **kw):
    transport, sent = replay_transport(fixture, **kw)
    provider = GeminiProvider(api_key="test-key", transport=transport, max_retries=max_retries)
    provider.sleep = lambda seconds: None
    return provider, sent


def recorded_parts(fixture: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """The parts of every chunk of a recorded streamed answer, in order."""
    body = fixture["interactions"][index]["response"]["body"]
    chunks = [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]
    return [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]


def part_shape(part: dict[str, Any]) -> tuple:
    if "functionCall" in part:
        call = part["functionCall"]
        return ("functionCall", call["name"], call["args"], part.get("thoughtSignature"))
    if "functionResponse" in part:
        return ("functionResponse", part["functionResponse"]["name"])
    if "text" in part:
        return ("text", part["text"], bool(part.get("thought")), part.get("thoughtSignature"))
    return tuple(sorted(part))


def content_shape(body: dict[str, Any]) -> list:
    return [(c["role"], [part_shape(p) for p in c["parts"]]) for c in body["contents"]]


def assert_same_request(sent: dict[str, Any], recorded: dict[str, Any]) -> None:
    """Roles, part kinds, texts, call names, args and thought signatures as recorded;
    ``generationConfig`` and ``tools`` exactly as recorded."""
    assert content_shape(sent) == content_shape(recorded)
    assert set(sent) == set(recorded)
    assert sent["generationConfig"] == recorded["generationConfig"]
    assert sent.get("tools") == recorded.get("tools")


def follow_up(messages: list[ProviderMessage], response: ProviderResponse, results: list[str]):
    messages.append(
        ProviderMessage(
            role="assistant",
            content=response.content,
            tool_calls=response.tool_calls,
            thinking=response.thinking,
            provider="gemini",
            model_id=response.model_id,
        )
    )
    for call, result in zip(response.tool_calls, results, strict=True):
        messages.append(
            ProviderMessage(
                role="tool", content=result, tool_call_id=call.call_id, tool_name=call.name
            )
        )


def interaction(body: str, *, status: int = 200, uri: str = STREAM_URI) -> dict[str, Any]:
    content_type = "text/event-stream" if body.startswith("data:") else "application/json"
    return {
        "request": {"method": "POST", "uri": uri, "headers": {}, "body": ""},
        "response": {"status": status, "headers": {"Content-Type": [content_type]}, "body": body},
    }


def sse(*chunks: dict[str, Any]) -> str:
    return "".join(f"data: {json.dumps(chunk)}\r\n\r\n" for chunk in chunks)


def chunk(*parts: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {
        "candidates": [candidate],
        "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 3},
        "modelVersion": "gemini-test",
        "responseId": "resp-1",
        **extra,
    }


def simple_request(**kw: Any) -> ProviderRequest:
    return ProviderRequest("gemini-test", [ProviderMessage("user", "Hi")], **kw)


# -- plain chat ----------------------------------------------------------------------------


def test_basic_conversation():
    fixture = load_fixture(BASIC)
    provider, sent = make(fixture)
    response = provider.complete(ProviderRequest(MODEL, [ProviderMessage("user", "What's 2 + 2?")]))

    assert response.content == "2 + 2 = **4**"
    assert (response.finish_reason, response.raw_finish_reason) == ("stop", "STOP")
    # Thoughts are outside candidatesTokenCount: output = 8 + 23.
    assert response.tokens == Tokens(input_tokens=10, output_tokens=31, thinking_tokens=23)
    assert response.model_id == "gemini-2.5-flash"
    assert response.thinking is None
    assert response.raw["responseId"] == "Cr-FaqLbNpfYkdUP-bmpoAw"
    assert sent_json(sent[0]) == request_body(fixture["interactions"][0])
    assert str(sent[0].url) == fixture["interactions"][0]["request"]["uri"]
    assert sent[0].headers["x-goog-api-key"] == "test-key"


@pytest.mark.parametrize("chunk_size", [None, 5])
def test_streaming(chunk_size):
    fixture = load_fixture(STREAMING)
    provider, sent = make(fixture, chunk_size=chunk_size)
    events, response = run_stream(
        provider, ProviderRequest(MODEL, [ProviderMessage("user", "Count from 1 to 3")])
    )
    check_sequence(events, response)
    assert [type(e) for e in events] == [TextDelta, TokenUsageDone, FinishReasonDone, TextDone]
    assert response.content == "1, 2, 3"
    assert response.tokens == Tokens(input_tokens=8, output_tokens=27, thinking_tokens=20)
    assert response.finish_reason == "stop"
    assert sent_json(sent[0]) == request_body(fixture["interactions"][0])
    assert sent[0].url.path.endswith(":streamGenerateContent")
    assert sent[0].url.params["alt"] == "sse"


def test_auth_error():
    provider, _ = make(AUTH_ERROR)
    with pytest.raises(AuthenticationError) as info:
        provider.complete(ProviderRequest(MODEL, [ProviderMessage("user", "Hello")]))
    assert info.value.status == 400
    assert info.value.code == "API_KEY_INVALID"
    assert info.value.message == "API key not valid. Please pass a valid API key."
    assert info.value.retryable is False


# -- tools ---------------------------------------------------------------------------------


def test_tools_round_trip():
    fixture = load_fixture(TOOLS)
    recorded = response_body(fixture["interactions"][0])
    signature = recorded["candidates"][0]["content"]["parts"][0]["thoughtSignature"]
    provider, sent = make(fixture)
    messages = [ProviderMessage("user", BERLIN)]

    first = provider.complete(ProviderRequest(MODEL, list(messages), tools=[WEATHER]))
    assert first.content == ""
    assert (first.finish_reason, first.raw_finish_reason) == ("tool_calls", "STOP")
    assert first.message_finish_reason == "tool_calls"
    [call] = first.tool_calls
    assert call.name == "weather"
    assert call.arguments == {"latitude": "52.5200", "longitude": "13.4050"}
    assert call.thought_signature == signature
    assert call.call_id == "call_676FauHzM5GK7M8PxaTOqQk_1"
    assert call.item_id is None  # Gemini sent no id of its own
    assert first.tokens == Tokens(input_tokens=103, output_tokens=136, thinking_tokens=106)
    assert_same_request(sent_json(sent[0]), request_body(fixture["interactions"][0]))

    follow_up(messages, first, [weather_result("52.5200", "13.4050")])
    second = provider.complete(ProviderRequest(MODEL, list(messages), tools=[WEATHER]))
    assert second.content == "The weather in Berlin is 15°C, with wind at 10 km/h."
    assert second.finish_reason == "stop"
    assert second.tokens == Tokens(input_tokens=190, output_tokens=21)

    body = sent_json(sent[1])
    assert_same_request(body, request_body(fixture["interactions"][1]))
    model_turn, results_turn = body["contents"][1], body["contents"][2]
    assert model_turn["parts"][0]["thoughtSignature"] == signature
    assert "id" not in model_turn["parts"][0]["functionCall"]
    assert results_turn == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "name": "weather",
                    "response": {"result": weather_result("52.5200", "13.4050")},
                }
            }
        ],
    }


@pytest.mark.parametrize("chunk_size", [None, 9])
def test_tools_multi_turn_streaming(chunk_size):
    fixture = load_fixture(TOOLS_STREAMING)
    provider, sent = make(fixture, chunk_size=chunk_size)
    messages = [ProviderMessage("user", BERLIN)]

    def step():
        return run_stream(provider, ProviderRequest(MODEL, list(messages), tools=[WEATHER]))

    events, first = step()
    check_sequence(events, first)
    assert [type(e) for e in events] == [
        ToolCallDelta,
        ToolCallDone,
        TokenUsageDone,
        FinishReasonDone,
    ]
    [call] = first.tool_calls
    assert call.name == "weather"
    assert call.arguments == {"latitude": "52.5200", "longitude": "13.4050"}
    assert call.thought_signature == recorded_parts(fixture, 0)[0]["thoughtSignature"]
    assert call.call_id == "call_U7-Fao_EK_-VvdIP1-aJ8Qo_1"
    assert call.item_id is None
    assert first.finish_reason == "tool_calls"
    assert first.tokens == Tokens(input_tokens=103, output_tokens=73, thinking_tokens=43)

    follow_up(messages, first, [weather_result("52.5200", "13.4050")])
    events, second = step()
    check_sequence(events, second)
    assert [e.content for e in events if isinstance(e, TextDelta)] == [
        "The weather in Berlin",
        " is 15°C with a wind of 10 km/h.",
    ]
    assert second.finish_reason == "stop"
    assert second.tokens == Tokens(input_tokens=233, output_tokens=21)  # the last snapshot

    follow_up(messages, second, [])
    messages.append(ProviderMessage("user", PARIS))
    events, third = step()
    check_sequence(events, third)
    [call] = third.tool_calls
    assert call.arguments == {"latitude": "48.8575", "longitude": "2.3514"}
    assert call.thought_signature is None  # none recorded on this one
    assert call.call_id == "call_VL-Fat-IOq69nsEPzqjkmQw_1"
    assert third.tokens == Tokens(input_tokens=238, output_tokens=29)

    follow_up(messages, third, [weather_result("48.8575", "2.3514")])
    events, fourth = step()
    check_sequence(events, fourth)
    assert fourth.content == "The weather in Paris is 15°C with a wind of 10 km/h."
    assert fourth.tokens == Tokens(input_tokens=323, output_tokens=95, thinking_tokens=74)
    # The signature on the text part is kept as the reply's thinking signature.
    signature = recorded_parts(fixture, 3)[0]["thoughtSignature"]
    assert fourth.thinking == Thinking("", signature)

    assert len(sent) == 4
    for request, recorded in zip(sent, fixture["interactions"], strict=True):
        assert_same_request(sent_json(request), request_body(recorded))


# -- thinking ------------------------------------------------------------------------------


def test_thinking_stream_and_replay():
    body = sse(
        chunk({"text": "Let me think", "thought": True}),
        chunk({"text": " harder.", "thought": True}),
        chunk({"text": "Answer", "thoughtSignature": "sig-1"}),
        chunk(
            {"text": "."},
            finish="STOP",
            usageMetadata={
                "promptTokenCount": 20,
                "cachedContentTokenCount": 8,
                "candidatesTokenCount": 2,
                "thoughtsTokenCount": 30,
            },
        ),
    )
    provider, sent = make([interaction(body)])
    events, response = run_stream(
        provider, simple_request(params={"thinking": {"budget_tokens": 2048}})
    )
    check_sequence(events, response)
    kinds = [type(e).__name__ for e in events]
    assert kinds[:4] == ["ReasoningDelta", "ReasoningDelta", "ReasoningDone", "TextDelta"]
    [done] = [e for e in events if isinstance(e, ReasoningDone)]
    assert (done.part.text, done.part.format) == ("Let me think harder.", "gemini")
    assert response.thinking == Thinking("Let me think harder.", "sig-1")
    assert response.content == "Answer."
    assert response.tokens == Tokens(
        input_tokens=12, output_tokens=32, cache_read_tokens=8, thinking_tokens=30
    )
    config = sent_json(sent[0])["generationConfig"]
    assert config["thinkingConfig"] == {"thinkingBudget": 2048, "includeThoughts": True}

    # Replayed as a thought part with its signature, only to Gemini's own messages.
    messages = [
        ProviderMessage("user", "Hi"),
        ProviderMessage("assistant", "Answer.", thinking=response.thinking, provider="gemini"),
        ProviderMessage(
            "assistant", "Other.", thinking=Thinking("x", "other-sig"), provider="anthropic"
        ),
    ]
    payload = GeminiProvider().build_payload(ProviderRequest("gemini-test", messages), stream=True)
    assert payload["contents"][1]["parts"] == [
        {"text": "Let me think harder.", "thought": True, "thoughtSignature": "sig-1"},
        {"text": "Answer."},
    ]
    assert payload["contents"][2]["parts"] == [{"text": "Other."}]


def test_text_signature_replays_on_the_text():
    messages = [
        ProviderMessage("user", "Hi"),
        ProviderMessage("assistant", "Hello", thinking=Thinking("", "sig"), provider="gemini"),
    ]
    payload = GeminiProvider().build_payload(ProviderRequest("gemini-test", messages), stream=False)
    assert payload["contents"][1]["parts"] == [{"text": "Hello", "thoughtSignature": "sig"}]


@pytest.mark.parametrize(
    "model, spec, expected",
    [
        ("gemini-2.5-flash", {"effort": "low"}, {"thinkingBudget": 1024, "includeThoughts": True}),
        ("gemini-3-pro-preview", "high", {"thinkingLevel": "high", "includeThoughts": True}),
        ("gemini-2.5-flash", {"budget_tokens": 0}, {"thinkingBudget": 0, "includeThoughts": False}),
        ("gemini-2.5-flash", True, {"includeThoughts": True}),
    ],
)
def test_thinking_config(model, spec, expected):
    request = ProviderRequest(model, [ProviderMessage("user", "Hi")], params={"thinking": spec})
    payload = GeminiProvider().build_payload(request, stream=False)
    assert payload["generationConfig"]["thinkingConfig"] == expected


# -- request options -----------------------------------------------------------------------


def test_request_options_and_schema():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    request = ProviderRequest(
        "models/gemini-test",
        [
            ProviderMessage("system", "Be terse."),
            ProviderMessage(
                "user", "Look", attachments=[AttachmentData("image/png", b"\x89PNG", "a.png")]
            ),
        ],
        params={
            "temperature": 0.3,
            "max_tokens": 200,
            "gemini": {
                "generationConfig": {"topK": 20},
                "tools": [{"google_search": {}}],
                "safetySettings": [
                    {"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}
                ],
            },
        },
        tools=[WEATHER],
        schema=schema,
    )
    provider = GeminiProvider()
    payload = provider.build_payload(request, stream=False)
    assert provider.endpoint(request, stream=False) == "/v1beta/models/gemini-test:generateContent"
    assert payload["systemInstruction"] == {"parts": [{"text": "Be terse."}]}
    assert payload["contents"] == [
        {
            "role": "user",
            "parts": [
                {"text": "Look"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw=="}},
            ],
        }
    ]
    assert payload["generationConfig"] == {
        "temperature": 0.3,
        "maxOutputTokens": 200,
        "responseMimeType": "application/json",
        "responseJsonSchema": schema,
        "topK": 20,
    }
    assert payload["tools"][0]["functionDeclarations"][0]["name"] == "weather"
    assert payload["tools"][1] == {"google_search": {}}
    assert payload["safetySettings"][0]["threshold"] == "BLOCK_NONE"


def test_gemini_schema_conversion():
    schema = {
        "type": "object",
        "$defs": {"Unit": {"type": "string", "enum": ["c", "f"]}},
        "properties": {
            "unit": {"$ref": "#/$defs/Unit"},
            "days": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "tags": {"type": "array", "items": {"type": ["string", "null"]}},
        },
        "required": ["unit"],
        "additionalProperties": False,
    }
    assert gemini_schema(schema) == {
        "type": "OBJECT",
        "required": ["unit"],
        "properties": {
            "unit": {"type": "STRING", "enum": ["c", "f"]},
            "days": {"type": "INTEGER", "nullable": True, "default": None},
            "tags": {"type": "ARRAY", "items": {"type": "STRING", "nullable": True}},
        },
    }


def test_tool_results_grouped_and_gemini_ids_sent_back():
    calls = [
        ToolCallData("abc", "weather", {"latitude": "1"}, "sig", item_id="abc"),
        ToolCallData("call_r_2", "clock", {}, None, item_id=None),
    ]
    messages = [
        ProviderMessage("user", "Hi"),
        ProviderMessage("assistant", "", tool_calls=calls, provider="gemini"),
        ProviderMessage("tool", '{"temp": 15}', tool_call_id="abc", tool_name="weather"),
        ProviderMessage("tool", "boom", tool_call_id="call_r_2", is_error=True),
    ]
    payload = GeminiProvider().build_payload(ProviderRequest("gemini-test", messages), stream=False)
    assert payload["contents"][1] == {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "weather", "args": {"latitude": "1"}, "id": "abc"},
                "thoughtSignature": "sig",
            },
            {"functionCall": {"name": "clock", "args": {}}},
        ],
    }
    assert payload["contents"][2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "weather", "response": {"temp": 15}, "id": "abc"}},
            {"functionResponse": {"name": "clock", "response": {"error": "boom"}}},
        ],
    }


def test_gemini_call_ids_kept():
    body = sse(
        chunk(
            {"functionCall": {"id": "fc-9", "name": "weather", "args": {"latitude": "1"}}},
            {"functionCall": {"name": "clock", "args": {}}, "thoughtSignature": "s2"},
            finish="STOP",
        )
    )
    provider, _ = make([interaction(body)])
    events, response = run_stream(provider, simple_request())
    check_sequence(events, response)
    first, second = response.tool_calls
    assert (first.call_id, first.item_id, first.thought_signature) == ("fc-9", "fc-9", None)
    assert (second.call_id, second.item_id, second.thought_signature) == (
        "call_resp-1_2",
        None,
        "s2",
    )
    assert response.finish_reason == "tool_calls"


# -- finish reasons, grounding -------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected, stored",
    [
        ("MAX_TOKENS", "length", "max_tokens"),
        ("SAFETY", "content_filter", "content_filter"),
        ("RECITATION", "content_filter", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "malformed_output", "MALFORMED_FUNCTION_CALL"),
        ("OTHER", "other", "OTHER"),
        ("SOMETHING_NEW", "other", "SOMETHING_NEW"),
    ],
)
def test_finish_reasons(raw, expected, stored):
    assert FINISH_REASONS.get(raw, "other") == expected
    body = sse(chunk({"text": "Hi"}, finish=raw))
    provider, _ = make([interaction(body)])
    events, response = run_stream(provider, simple_request())
    check_sequence(events, response)
    assert (response.finish_reason, response.raw_finish_reason) == (expected, raw)
    assert response.message_finish_reason == stored


def test_prompt_blocked():
    blocked = {
        "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7},
    }
    provider, _ = make([interaction(sse(blocked))])
    events, response = run_stream(provider, simple_request())
    check_sequence(events, response)
    assert (response.finish_reason, response.raw_finish_reason) == (
        "content_filter",
        "PROHIBITED_CONTENT",
    )
    assert response.tokens == Tokens(input_tokens=7)

    uri = "https://generativelanguage.googleapis.com/v1beta/models/gemini-test:generateContent"
    provider, _ = make([interaction(json.dumps(blocked), uri=uri)])
    response = provider.complete(simple_request())
    assert (response.content, response.finish_reason) == ("", "content_filter")
    assert response.raw_finish_reason == "PROHIBITED_CONTENT"


def test_grounding_citations():
    grounding = {
        "webSearchQueries": ["django release"],
        "groundingChunks": [{"web": {"uri": "https://djangoproject.com", "title": "Django"}}],
        "groundingSupports": [
            {
                "segment": {"startIndex": 0, "endIndex": 6, "text": "Django"},
                "groundingChunkIndices": [0],
            }
        ],
    }
    answer = chunk({"text": "Django 6 is out."}, finish="STOP")
    answer["candidates"][0]["groundingMetadata"] = grounding
    provider, _ = make([interaction(sse(answer))])
    events, response = run_stream(provider, simple_request())
    check_sequence(events, response)
    expected = [
        Citation(
            url="https://djangoproject.com",
            title="Django",
            cited_text="Django",
            start_index=0,
            end_index=6,
        )
    ]
    assert response.citations == expected
    [search] = [e for e in events if isinstance(e, WebSearchDone)]
    assert search.query == "django release"
    assert search.sources == [{"title": "Django", "url": "https://djangoproject.com"}]
    assert response.server_tool_calls[0].name == "google_search"

    uri = "https://generativelanguage.googleapis.com/v1beta/models/gemini-test:generateContent"
    provider, _ = make([interaction(json.dumps(answer), uri=uri)])
    assert provider.complete(simple_request()).citations == expected


# -- broken streams and errors -------------------------------------------------------------


def test_truncated_stream_raises_incomplete():
    fixture = load_fixture(TOOLS_STREAMING)
    recorded = json.loads(json.dumps(fixture["interactions"][1]))
    body = recorded["response"]["body"]
    recorded["response"]["body"] = body[: body.index('"finishReason"')].rsplit("data:", 1)[0]
    provider, _ = make([recorded])
    messages = [ProviderMessage("user", BERLIN)]
    seen = []
    with pytest.raises(IncompleteStreamError):
        for event in provider.stream(ProviderRequest(MODEL, messages, tools=[WEATHER])):
            seen.append(event)
    assert seen == [TextDelta("The weather in Berlin")]


def test_usage_after_finish_chunk_is_kept():
    body = sse(
        chunk({"text": "Hi"}, finish="STOP"),
        {"usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 5}},
    )
    provider, _ = make([interaction(body)])
    events, response = run_stream(provider, simple_request())
    check_sequence(events, response)
    assert response.tokens == Tokens(input_tokens=12, output_tokens=5)


def test_error_after_200_raises():
    error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    provider, _ = make([interaction(sse(chunk({"text": "Hel"}), error))])
    seen = []
    with pytest.raises(ProviderError) as info:
        for event in provider.stream(simple_request()):
            seen.append(event)
    assert info.value.message == "The model is overloaded."
    assert info.value.code == "UNAVAILABLE"
    assert info.value.retryable is True
    assert seen == [TextDelta("Hel")]


RATE_LIMITED = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "48s"},
        ],
    }
}


def test_rate_limit_retry_delay_from_body():
    uri = "https://generativelanguage.googleapis.com/v1beta/models/gemini-test:generateContent"
    provider, _ = make([interaction(json.dumps(RATE_LIMITED), status=429, uri=uri)])
    with pytest.raises(RateLimitError) as info:
        provider.complete(simple_request())
    assert info.value.retry_after == 48.0
    assert info.value.code == "RESOURCE_EXHAUSTED"

    # The base's retry honours it.
    fixture = load_fixture(BASIC)
    provider, sent = make(
        [interaction(json.dumps(RATE_LIMITED), status=429, uri=uri), *fixture["interactions"]],
        max_retries=1,
        check_path=False,
    )
    waits: list[float] = []
    provider.sleep = waits.append
    response = provider.complete(ProviderRequest(MODEL, [ProviderMessage("user", "What's 2 + 2?")]))
    assert response.content == "2 + 2 = **4**"
    assert waits == [48.0]
    assert len(sent) == 2

    # Mid-stream, the same body is a RateLimitError too.
    provider, _ = make([interaction(sse(RATE_LIMITED))])
    with pytest.raises(RateLimitError) as info:
        list(provider.stream(simple_request()))
    assert info.value.retry_after == 48.0
