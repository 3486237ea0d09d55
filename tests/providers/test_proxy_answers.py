"""Answers a LiteLLM proxy gives that the vendors' own APIs do not: a whole JSON body to a
streamed request, an HTTP error whose body is an SSE error event, and Anthropic-format
tool calls that end with ``end_turn``. Replayed through the HTTP transport."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from django_llmchat.errors import ProviderError, RateLimitError
from django_llmchat.events import (
    FinishReasonDone,
    TextDelta,
    TextDone,
    TokenUsageDone,
    ToolCallDone,
)
from django_llmchat.providers.anthropic import AnthropicProvider
from django_llmchat.providers.openai_chat import OpenAICompatibleProvider
from django_llmchat.providers.types import ProviderMessage, ProviderRequest, ToolSpec
from django_llmchat.values import Tokens

PROXY = "http://litellm.internal:4000"
LITELLM_HEADERS = {
    "x-litellm-call-id": "0b2c6b44-3c5e-4f5e-9a57-2f3d1c1a9e10",
    "x-litellm-model-id": "8d4e5b9e3f0f4c2a",
    "x-litellm-version": "1.74.9",
    "llm_provider-date": "Tue, 01 Dec 2026 10:02:11 GMT",
}
WEATHER = ToolSpec(
    name="weather",
    description="Gets current weather for a location",
    parameters={
        "type": "object",
        "properties": {"latitude": {"type": "string"}, "longitude": {"type": "string"}},
        "required": ["latitude", "longitude"],
    },
)

# A chat completion as the proxy sends it when the upstream deployment does not stream.
WHOLE_COMPLETION = {
    "id": "chatcmpl-BfS3x0Jm8Kq2Lw9Zr4Tn6Yv1Pa7Ue",
    "created": 1796119331,
    "model": "gpt-4o-mini-2024-07-18",
    "object": "chat.completion",
    "system_fingerprint": "fp_560af6e559",
    "choices": [
        {
            "finish_reason": "tool_calls",
            "index": 0,
            "message": {
                "content": "Let me look that up.",
                "role": "assistant",
                "tool_calls": [
                    {
                        "function": {
                            "arguments": '{"latitude":"52.5200","longitude":"13.4050"}',
                            "name": "weather",
                        },
                        "id": "call_Qe1o0Kk4N5oYpWmVZ3wXQb2r",
                        "type": "function",
                    }
                ],
                "function_call": None,
                "annotations": [],
            },
        }
    ],
    "usage": {
        "completion_tokens": 27,
        "prompt_tokens": 81,
        "total_tokens": 108,
        "completion_tokens_details": {"reasoning_tokens": 0},
        "prompt_tokens_details": {"cached_tokens": 0},
    },
    "service_tier": "default",
}

# What the proxy answers a streamed request when the upstream call fails before the first
# chunk: status 500, the error framed as an SSE event.
SSE_ERROR_BODY = (
    'data: {"error": {"message": "litellm.InternalServerError: InternalServerError: '
    "OpenAIException - Connection error.. Received Model Group=gpt-4o-mini\\nAvailable Model "
    'Group Fallbacks=None", "type": null, "param": null, "code": "500"}}\n\n'
)
SSE_RATE_LIMIT_BODY = (
    'data: {"error": {"message": "litellm.RateLimitError: RateLimitError: OpenAIException - '
    'Rate limit reached for gpt-4o-mini", "type": "throttling_error", "param": null, '
    '"code": "429"}}\n\n'
)

# Anthropic's /v1/messages format from the proxy over a non-Anthropic deployment: the tool
# call is there, the stop reason is the upstream's "stop" translated to "end_turn".
ANTHROPIC_TOOL_END_TURN = {
    "id": "msg_01HC1RZ3mQ8oW1tK4cJ9xTfd",
    "type": "message",
    "role": "assistant",
    "model": "gpt-4o-mini",
    "stop_sequence": None,
    "usage": {"input_tokens": 81, "output_tokens": 27},
    "content": [
        {
            "type": "tool_use",
            "id": "call_Qe1o0Kk4N5oYpWmVZ3wXQb2r",
            "name": "weather",
            "input": {"latitude": "52.5200", "longitude": "13.4050"},
        }
    ],
    "stop_reason": "end_turn",
}


def anthropic_sse(*events: dict) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


ANTHROPIC_TOOL_END_TURN_STREAM = anthropic_sse(
    {
        "type": "message_start",
        "message": {
            "id": "msg_01HC1RZ3mQ8oW1tK4cJ9xTfd",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "gpt-4o-mini",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 81, "output_tokens": 0},
        },
    },
    {
        "type": "content_block_start",
        "index": 0,
        "content_block": {
            "type": "tool_use",
            "id": "call_Qe1o0Kk4N5oYpWmVZ3wXQb2r",
            "name": "weather",
            "input": {},
        },
    },
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": '{"latitude": "52.5200", '},
    },
    {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": '"longitude": "13.4050"}'},
    },
    {"type": "content_block_stop", "index": 0},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": 27},
    },
    {"type": "message_stop"},
)


def answering(*responses: httpx.Response) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    sent: list[httpx.Request] = []
    pending = list(responses)

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        sent.append(request)
        return pending.pop(0)

    return httpx.MockTransport(handler), sent


def json_answer(body: dict, status: int = 200) -> httpx.Response:
    return httpx.Response(
        status,
        headers={"content-type": "application/json", **LITELLM_HEADERS},
        content=json.dumps(body).encode(),
    )


def sse_answer(body: str, status: int = 200) -> httpx.Response:
    headers = {"content-type": "text/event-stream; charset=utf-8", **LITELLM_HEADERS}
    return httpx.Response(status, headers=headers, content=body.encode())


def proxy(*responses: httpx.Response, **kw) -> tuple[OpenAICompatibleProvider, list]:
    transport, sent = answering(*responses)
    provider = OpenAICompatibleProvider(
        api_key="sk-litellm-master-key", base_url=PROXY + "/v1", transport=transport, **kw
    )
    provider.sleep = lambda delay: None
    return provider, sent


def weather_request() -> ProviderRequest:
    return ProviderRequest(
        model_id="gpt-4o-mini",
        messages=[ProviderMessage(role="user", content="Weather in Berlin? (52.52, 13.405)")],
        tools=[WEATHER],
    )


# -- a whole JSON answer to a streamed request ---------------------------------------------


def test_a_streamed_request_answered_with_a_whole_body_is_that_answer():
    provider, sent = proxy(json_answer(WHOLE_COMPLETION))
    stream = provider.stream(weather_request())

    events = list(stream)

    assert json.loads(sent[0].content)["stream"] is True
    response = stream.response
    assert response.content == "Let me look that up."
    [call] = response.tool_calls
    assert (call.call_id, call.name) == ("call_Qe1o0Kk4N5oYpWmVZ3wXQb2r", "weather")
    assert call.arguments == {"latitude": "52.5200", "longitude": "13.4050"}
    assert response.finish_reason == "tool_calls"
    assert response.tokens.input_tokens == 81 and response.tokens.output_tokens == 27
    # the events a stream of that answer ends with, once each
    assert [type(e) for e in events] == [
        TextDelta, ToolCallDone, TextDone, TokenUsageDone, FinishReasonDone
    ]  # fmt: skip
    assert events[1].arguments == '{"latitude": "52.5200", "longitude": "13.4050"}'
    assert events[-1] == FinishReasonDone("tool_calls", "tool_calls")


def test_a_whole_error_body_to_a_streamed_request_is_that_error():
    # a 200 with an error document (some gateways do that) is the error, not a broken stream
    provider, sent = proxy(
        json_answer({"error": {"message": "Invalid model name passed in model=gpt-4o-mini"}})
    )
    with pytest.raises(ProviderError, match="Invalid model name") as caught:
        list(provider.stream(weather_request()))
    assert type(caught.value) is ProviderError


def test_a_whole_body_to_an_async_stream():
    provider, sent = proxy(json_answer(WHOLE_COMPLETION))

    async def run():
        stream = provider.astream(weather_request())
        return [e async for e in stream], stream.response

    events, response = asyncio.run(run())
    assert events[-1] == FinishReasonDone("tool_calls", "tool_calls")
    assert response.tool_calls[0].name == "weather"


# -- an HTTP error with an SSE-framed body --------------------------------------------------


def test_an_sse_framed_http_error_reads_as_its_message():
    provider, sent = proxy(sse_answer(SSE_ERROR_BODY, 500), max_retries=0)

    with pytest.raises(ProviderError) as caught:
        list(provider.stream(weather_request()))

    error = caught.value
    assert error.message.startswith("litellm.InternalServerError: InternalServerError:")
    assert "data:" not in str(error) and "{" not in str(error)
    assert str(error).endswith("(HTTP 500)")
    assert (error.status, error.code, error.retryable) == (500, "500", True)
    assert error.body == SSE_ERROR_BODY  # the raw body is kept for diagnosis


def test_an_sse_framed_rate_limit_is_retried_then_answered():
    provider, sent = proxy(
        sse_answer(SSE_RATE_LIMIT_BODY, 429), json_answer(WHOLE_COMPLETION), max_retries=1
    )
    heard = []
    stream = provider.stream(weather_request(), on_retry=lambda e, n: heard.append(e))

    list(stream)

    assert len(sent) == 2 and stream.response.finish_reason == "tool_calls"
    [error] = heard
    assert isinstance(error, RateLimitError)
    assert error.message == (
        "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached for "
        "gpt-4o-mini"
    )


def test_a_non_json_error_body_stays_text():
    body = "<html><body>502 Bad Gateway</body></html>"
    provider, sent = proxy(
        httpx.Response(502, headers={"content-type": "text/html"}, content=body.encode()),
        max_retries=0,
    )
    with pytest.raises(ProviderError, match="502 Bad Gateway"):
        provider.complete(weather_request())


# -- Anthropic tool_use with stop_reason end_turn -----------------------------------------


def anthropic_proxy(response: httpx.Response) -> AnthropicProvider:
    transport, _sent = answering(response)
    return AnthropicProvider(api_key="sk-litellm-master-key", base_url=PROXY, transport=transport)


def test_anthropic_tool_use_ending_with_end_turn_is_tool_calls():
    response = anthropic_proxy(json_answer(ANTHROPIC_TOOL_END_TURN)).complete(weather_request())

    assert [c.name for c in response.tool_calls] == ["weather"]
    assert (response.finish_reason, response.raw_finish_reason) == ("tool_calls", "end_turn")
    assert response.message_finish_reason == "tool_calls"


def test_anthropic_streamed_tool_use_ending_with_end_turn_is_tool_calls():
    stream = anthropic_proxy(sse_answer(ANTHROPIC_TOOL_END_TURN_STREAM)).stream(weather_request())

    events = list(stream)

    assert events[-1] == FinishReasonDone("tool_calls", "end_turn")
    assert stream.response.finish_reason == "tool_calls"
    assert stream.response.tool_calls[0].arguments == {
        "latitude": "52.5200",
        "longitude": "13.4050",
    }
    assert stream.response.tokens == Tokens(input_tokens=81, output_tokens=27)


def test_anthropic_end_turn_without_tools_stays_stop():
    answer = {**ANTHROPIC_TOOL_END_TURN, "content": [{"type": "text", "text": "Sunny."}]}
    response = anthropic_proxy(json_answer(answer)).complete(weather_request())
    assert (response.content, response.finish_reason) == ("Sunny.", "stop")
