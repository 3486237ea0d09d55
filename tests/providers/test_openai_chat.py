"""Chat Completions vendors: every recorded exchange replayed, plus what recordings lack."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from django_llmchat.errors import (
    AuthenticationError,
    ConfigurationError,
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
    ToolCallDone,
)
from django_llmchat.providers.openai_chat import (
    FINISH_REASONS,
    DeepSeekProvider,
    MistralProvider,
    OllamaProvider,
    OpenAIChatProvider,
    OpenAICompatibleProvider,
    OpenRouterProvider,
    PerplexityProvider,
    usage_tokens,
)
from django_llmchat.providers.types import (
    AttachmentData,
    ProviderMessage,
    ProviderRequest,
    ToolCallData,
    ToolSpec,
)
from django_llmchat.values import Tokens

from .replay import fixture_names, load_fixture, replay_transport, request_body, sent_json

KEY = "test-key-not-real"
ANY_REQUEST = ProviderRequest(model_id="m", messages=[])

# fixture vendor token -> how to build the provider that made the recording
VENDORS: dict[str, Any] = {
    "ollama_qwen3": lambda t: OllamaProvider(transport=t),
    "ollama_cloud": lambda t: OllamaProvider(
        api_key=KEY, base_url="https://ollama.com/v1", transport=t
    ),
    "openrouter": lambda t: OpenRouterProvider(api_key=KEY, transport=t),
    "deepseek": lambda t: DeepSeekProvider(api_key=KEY, transport=t),
    "mistral": lambda t: MistralProvider(api_key=KEY, transport=t),
    "gpustack": lambda t: OpenAICompatibleProvider(
        api_key=KEY, base_url="http://gpustack.internal/v1", transport=t
    ),
    "perplexity": lambda t: PerplexityProvider(api_key=KEY, transport=t),
}


def _vendor(name: str) -> str:
    """Which entry of VENDORS made a recording (``ollama_cloud`` before ``ollama``)."""
    for token in ("ollama_cloud", "openrouter", "deepseek", "mistral", "gpustack", "perplexity"):
        if f"_{token}_" in name:
            return token
    if "_ollama_qwen3_" in name:
        return "ollama_qwen3"
    raise LookupError(name)


FIXTURES = [
    name
    for name in fixture_names()
    if any(f"_{v}_" in name for v in ("ollama", "openrouter", "deepseek", "mistral", "gpustack"))
    or "_perplexity_" in name
]
CONVERSATIONS = [n for n in FIXTURES if "error_handling" not in n]
ERRORS = [n for n in FIXTURES if "error_handling" in n]


def test_every_chat_completions_recording_is_covered():
    assert len(CONVERSATIONS) == 12
    assert len(ERRORS) == 5
    assert {_vendor(n) for n in FIXTURES} == set(VENDORS)


# -- building requests from a recording ---------------------------------------------------


def _messages(recorded: list[dict[str, Any]]) -> list[ProviderMessage]:
    out = []
    for m in recorded:
        calls = [
            ToolCallData(
                call_id=c["id"],
                name=c["function"]["name"],
                arguments=json.loads(c["function"]["arguments"]),
            )
            for c in m.get("tool_calls") or ()
        ]
        out.append(
            ProviderMessage(
                role=m["role"],
                content=m.get("content") or "",
                tool_calls=calls,
                tool_call_id=m.get("tool_call_id"),
            )
        )
    return out


def _request(body: dict[str, Any]) -> ProviderRequest:
    tools = [
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"].get("description", ""),
            parameters=t["function"]["parameters"],
        )
        for t in body.get("tools") or ()
    ]
    return ProviderRequest(
        model_id=body["model"], messages=_messages(body["messages"]), tools=tools
    )


def _shape(messages: list[dict[str, Any]]) -> list[tuple]:
    """What must match the recording: roles, tool calls (id, name, arguments), tool_call_id,
    and the text of user/tool turns."""
    out = []
    for m in messages:
        calls = tuple(
            (c["id"], c["type"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in m.get("tool_calls") or ()
        )
        text = m.get("content") if m["role"] in ("user", "tool") else None
        out.append((m["role"], calls, m.get("tool_call_id"), text))
    return out


# -- what the recording says the answer was -----------------------------------------------


def _expected(interaction: dict[str, Any]) -> dict[str, Any]:
    """The answer read straight from the recorded body, independently of the parser."""
    body = interaction["response"]["body"]
    if json.loads(interaction["request"]["body"]).get("stream"):
        text, reasoning, calls, finish, usage = [], [], {}, None, None
        for line in body.splitlines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                text.append(delta.get("content") or "")
                reasoning.append(delta.get("reasoning") or delta.get("reasoning_content") or "")
                for frag in delta.get("tool_calls") or ():
                    call = calls.setdefault(frag["index"], {"id": None, "name": "", "args": ""})
                    call["id"] = call["id"] or frag.get("id")
                    call["name"] = call["name"] or frag["function"].get("name") or ""
                    call["args"] += frag["function"].get("arguments") or ""
                finish = finish or choice.get("finish_reason")
        tool_calls = [(c["id"], c["name"], json.loads(c["args"])) for c in calls.values()]
        return {
            "text": "".join(text),
            "reasoning": "".join(reasoning),
            "tool_calls": tool_calls,
            "finish": finish,
            "usage": usage,
        }
    data = json.loads(body)
    message = data["choices"][0]["message"]
    return {
        "text": message.get("content") or "",
        "reasoning": message.get("reasoning") or message.get("reasoning_content") or "",
        "tool_calls": [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in message.get("tool_calls") or ()
        ],
        "finish": data["choices"][0]["finish_reason"],
        "usage": data.get("usage"),
    }


@pytest.mark.parametrize("name", CONVERSATIONS)
@pytest.mark.parametrize("chunk_size", [None, 17])
def test_replay_recorded_conversation(name, chunk_size):
    fixture = load_fixture(name)
    transport, sent = replay_transport(fixture, chunk_size=chunk_size)
    provider = VENDORS[_vendor(name)](transport)
    provider.sleep = lambda s: pytest.fail("no retry expected")

    for i, interaction in enumerate(fixture["interactions"]):
        recorded = request_body(interaction)
        request = _request(recorded)
        expected = _expected(interaction)
        if recorded.get("stream"):
            stream = provider.stream(request)
            events = list(stream)
            response = stream.response
            _check_stream_events(events, expected)
        else:
            response = provider.complete(request)

        # the request we built has the recorded shape
        body = sent_json(sent[i])
        assert body["model"] == recorded["model"]
        assert body["stream"] == recorded["stream"]
        assert _shape(body["messages"]) == _shape(recorded["messages"])
        assert [t["function"]["name"] for t in body.get("tools", [])] == [
            t["function"]["name"] for t in recorded.get("tools", [])
        ]
        assert ("stream_options" in body) == ("stream_options" in recorded)
        if not interaction["request"]["uri"].startswith("<"):
            assert str(sent[i].url) == interaction["request"]["uri"]
        assert sent[i].headers["user-agent"].startswith("django-llmchat/")
        if provider.api_key:
            assert sent[i].headers["authorization"] == f"Bearer {KEY}"
        else:
            assert "authorization" not in sent[i].headers

        # the answer matches the recording
        assert response.content == expected["text"]
        assert [(c.call_id, c.name, c.arguments) for c in response.tool_calls] == expected[
            "tool_calls"
        ]
        if expected["reasoning"]:
            assert response.thinking is not None
            assert response.thinking.text == expected["reasoning"]
        else:
            assert response.thinking is None
        assert response.raw_finish_reason == expected["finish"]
        assert response.finish_reason == FINISH_REASONS[expected["finish"]]
        usage = expected["usage"]
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        assert response.tokens.input_tokens == usage["prompt_tokens"] - (cached or 0)
        assert response.tokens.output_tokens == usage["completion_tokens"]
        assert response.tokens.cache_read_tokens == cached
    assert len(sent) == len(fixture["interactions"])


def _check_stream_events(events, expected):
    kinds = [type(e) for e in events]
    assert kinds.count(TokenUsageDone) == 1
    assert kinds.count(FinishReasonDone) == 1
    text = "".join(e.content for e in events if isinstance(e, TextDelta))
    assert text == expected["text"]
    if text:
        assert kinds.count(TextDone) == 1
        assert events[-1] == TextDone(text)
    else:
        assert TextDone not in kinds
    reasoning = "".join(e.content for e in events if isinstance(e, ReasoningDelta))
    assert reasoning == expected["reasoning"]
    if reasoning:
        (done,) = [e for e in events if isinstance(e, ReasoningDone)]
        assert done.part.text == reasoning
        assert done.part.type == "text" and done.part.format is None
        first_answer = next(
            i for i, e in enumerate(events) if isinstance(e, TextDelta | ToolCallDelta)
        )
        assert kinds.index(ReasoningDone) < first_answer
    dones = [e for e in events if isinstance(e, ToolCallDone)]
    assert [(d.call_id, d.name, json.loads(d.arguments)) for d in dones] == expected["tool_calls"]
    for done in dones:
        deltas = [e for e in events if isinstance(e, ToolCallDelta) and e.item_id == done.item_id]
        assert deltas[0].name == done.name
        assert all(d.name is None for d in deltas[1:])
        assert "".join(d.arguments_delta for d in deltas) == done.arguments
    (finish,) = [e for e in events if isinstance(e, FinishReasonDone)]
    assert finish.raw_finish_reason == expected["finish"]


# exact figures from the recordings, so a usage regression cannot hide behind _expected()
EXACT = {
    ("chat_basic_chat_functionality_ollama_qwen3_can_have_a_basic_conversation", 0): (
        Tokens(input_tokens=18, output_tokens=295),
        "stop",
    ),
    ("chat_function_calling_gpustack_qwen3_can_use_tools", 0): (
        Tokens(input_tokens=203, output_tokens=137, cache_read_tokens=66, thinking_tokens=99),
        "tool_calls",
    ),
    ("chat_function_calling_gpustack_qwen3_can_use_tools", 1): (
        Tokens(input_tokens=44, output_tokens=148, cache_read_tokens=268, thinking_tokens=107),
        "stop",
    ),
    (
        "chat_function_calling_mistral_mistral-small-latest_can_use_tools_with_multi-turn"
        "_streaming_conversations",
        0,
    ): (Tokens(input_tokens=31, output_tokens=28, cache_read_tokens=128), "tool_calls"),
    (
        "chat_function_calling_deepseek_deepseek-chat_can_use_tools_with_multi-turn"
        "_streaming_conversations",
        1,
    ): (None, "stop"),
    ("chat_streaming_responses_ollama_qwen3_supports_streaming_responses", 0): (
        Tokens(input_tokens=17, output_tokens=289),
        "stop",
    ),
    (
        "chat_function_calling_openrouter_claude-haiku-4-5_can_use_tools_with_multi-turn"
        "_streaming_conversations",
        0,
    ): (
        Tokens(input_tokens=633, output_tokens=75, cache_read_tokens=0, thinking_tokens=0),
        "tool_calls",
    ),
}


@pytest.mark.parametrize("key", list(EXACT), ids=lambda k: f"{k[0][:50]}-{k[1]}")
def test_exact_recorded_usage(key):
    name, index = key
    tokens, finish = EXACT[key]
    fixture = load_fixture(name)
    interactions = fixture["interactions"][: index + 1]
    transport, _ = replay_transport(interactions)
    provider = VENDORS[_vendor(name)](transport)
    response = None
    for interaction in interactions:
        request = _request(request_body(interaction))
        if request_body(interaction).get("stream"):
            stream = provider.stream(request)
            list(stream)
            response = stream.response
        else:
            response = provider.complete(request)
    assert response.finish_reason == finish
    if tokens is None:  # DeepSeek: cached tokens inside prompt_tokens
        usage = _expected(interactions[-1])["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_cache_hit_tokens"]
        tokens = Tokens(
            input_tokens=usage["prompt_tokens"] - usage["prompt_cache_hit_tokens"],
            output_tokens=usage["completion_tokens"],
            cache_read_tokens=usage["prompt_cache_hit_tokens"],
        )
    assert response.tokens == tokens


AUTH_MESSAGES = {
    "deepseek": "Authentication Fails, Your api key: ****-key is invalid",
    "mistral": "Invalid API Key",
    "ollama_cloud": "Unauthorized",
    "openrouter": "Missing Authentication header",
    "perplexity": "Invalid API key provided. Ensure your API key is correct and active.",
}


@pytest.mark.parametrize("name", ERRORS)
def test_replay_recorded_auth_error(name):
    fixture = load_fixture(name)
    transport, sent = replay_transport(fixture)
    vendor = _vendor(name)
    provider = VENDORS[vendor](transport)
    provider.sleep = lambda s: pytest.fail("401 is not retried")
    recorded = request_body(fixture["interactions"][0])
    with pytest.raises(AuthenticationError) as info:
        provider.complete(_request(recorded))
    err = info.value
    assert err.message == AUTH_MESSAGES[vendor]
    assert err.status == 401
    assert err.provider == provider.name
    assert err.retryable is False
    assert str(err) == f"{provider.name}: {AUTH_MESSAGES[vendor]} (HTTP 401)"
    assert err.body == fixture["interactions"][0]["response"]["body"]
    assert len(sent) == 1
    assert sent_json(sent[0])["messages"] == recorded["messages"]


@pytest.mark.parametrize("name", ERRORS)
def test_recorded_auth_error_on_a_stream(name):
    fixture = load_fixture(name)
    transport, _ = replay_transport(fixture)
    provider = VENDORS[_vendor(name)](transport)
    with pytest.raises(AuthenticationError) as info:
        list(provider.stream(_request(request_body(fixture["interactions"][0]))))
    assert info.value.message == AUTH_MESSAGES[_vendor(name)]


def test_async_replay_of_a_streamed_conversation():
    name = (
        "chat_function_calling_ollama_cloud_gpt-oss_120b_can_use_tools_with_multi-turn"
        "_streaming_conversations"
    )
    fixture = load_fixture(name)
    transport, sent = replay_transport(fixture, chunk_size=64)
    provider = VENDORS["ollama_cloud"](transport)

    async def run():
        out = []
        for interaction in fixture["interactions"]:
            stream = provider.astream(_request(request_body(interaction)))
            events = [e async for e in stream]
            out.append((events, stream.response))
        return out

    results = asyncio.run(run())
    assert len(sent) == 4
    for (events, response), interaction in zip(results, fixture["interactions"], strict=True):
        expected = _expected(interaction)
        _check_stream_events(events, expected)
        assert response.content == expected["text"]


def test_async_complete_replays_non_streaming_recording():
    fixture = load_fixture("chat_function_calling_mistral_mistral-small-latest_can_use_tools")
    transport, _ = replay_transport(fixture)
    provider = VENDORS["mistral"](transport)
    response = asyncio.run(provider.acomplete(_request(request_body(fixture["interactions"][0]))))
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("weather", {"latitude": "52.5200", "longitude": "13.4050"})
    ]
    assert response.finish_reason == "tool_calls"


# -- synthetic streams: what no recording shows ------------------------------------------


def _sse(*chunks: Any, done: bool = True) -> str:
    lines = [f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks]
    if done:
        lines.append("data: [DONE]\n\n")
    return "".join(lines)


def _serve(body: str, status: int = 200, headers: dict[str, list[str]] | None = None):
    return replay_transport(
        [
            {
                "request": {"method": "POST", "uri": "<BASE>/chat/completions", "body": ""},
                "response": {
                    "status": status,
                    "headers": headers or {"Content-Type": ["text/event-stream"]},
                    "body": body,
                },
            }
        ]
    )


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any):
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": choices,
        **extra,
    }


REQUEST = ProviderRequest(model_id="m", messages=[ProviderMessage("user", "hi")])


def _stream(provider_cls, body: str, **kw: Any):
    transport, _ = _serve(body)
    provider = provider_cls(api_key=KEY, transport=transport, max_retries=0, **kw)
    stream = provider.stream(REQUEST)
    return list(stream), stream.response


def test_parallel_tool_call_fragments_are_joined_by_index():
    body = _sse(
        _chunk({"role": "assistant", "content": None}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                                "function": {"name": "weather", "arguments": ""}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        _chunk({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                "function": {"name": "time", "arguments": '{"tz"'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        _chunk({"tool_calls": [{"index": 1, "function": {"arguments": ':"UTC"}'}}]}),
        _chunk({}, "tool_calls", obfuscation="xyz"),
        _chunk(None, usage={"prompt_tokens": 10, "completion_tokens": 5,
                            "completion_tokens_details": {"reasoning_tokens": 2},
                            "prompt_tokens_details": {"cached_tokens": 4}}),
    )  # fmt: skip
    events, response = _stream(OpenAIChatProvider, body)
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(d.item_id, d.name, d.arguments_delta) for d in deltas] == [
        ("call_a", "weather", ""),
        ("call_a", None, '{"city":'),
        ("call_b", "time", '{"tz"'),
        ("call_a", None, '"Paris"}'),
        ("call_b", None, ':"UTC"}'),
    ]
    dones = [e for e in events if isinstance(e, ToolCallDone)]
    assert [(d.item_id, d.call_id, d.name, d.arguments) for d in dones] == [
        ("call_a", "call_a", "weather", '{"city":"Paris"}'),
        ("call_b", "call_b", "time", '{"tz":"UTC"}'),
    ]
    assert [type(e) for e in events[-2:]] == [TokenUsageDone, FinishReasonDone]
    assert events[-2].token_usage == Tokens(
        input_tokens=6, output_tokens=5, cache_read_tokens=4, thinking_tokens=2
    )
    assert events[-1] == FinishReasonDone("tool_calls", "tool_calls")
    assert [c.arguments for c in response.tool_calls] == [{"city": "Paris"}, {"tz": "UTC"}]
    assert response.content == ""
    assert not any(isinstance(e, TextDone) for e in events)


def test_tool_calls_reusing_one_index_stay_separate():
    # Some servers send every whole call with index 0.
    call = {"type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = _sse(
        _chunk({"tool_calls": [{"index": 0, "id": "c1", **call}]}),
        _chunk({"tool_calls": [{"index": 0, "id": "c2", **call}]}),
        _chunk({}, "tool_calls"),
    )
    _, response = _stream(OllamaProvider, body)
    assert [c.call_id for c in response.tool_calls] == ["c1", "c2"]


def test_reasoning_then_text_and_finish_once():
    body = _sse(
        _chunk({"role": "assistant", "content": "", "reasoning_content": "Let me "}),
        _chunk({"content": "", "reasoning_content": "think."}),
        _chunk({"content": "Four."}),
        _chunk({"content": ""}, "stop", usage={"prompt_tokens": 3, "completion_tokens": 4}),
        _chunk({"content": ""}, "stop", usage={"prompt_tokens": 3, "completion_tokens": 4}),
    )
    events, response = _stream(DeepSeekProvider, body)
    assert events == [
        ReasoningDelta("Let me "),
        ReasoningDelta("think."),
        ReasoningDone(part=events[2].part),
        TextDelta("Four."),
        TokenUsageDone(Tokens(input_tokens=3, output_tokens=4)),
        FinishReasonDone("stop", "stop"),
        TextDone("Four."),
    ]
    assert events[2].part.text == "Let me think." and events[2].part.format is None
    assert response.thinking.text == "Let me think."
    assert response.message_finish_reason == "stop"


def test_refusal_reads_as_content_filter():
    body = _sse(_chunk({"refusal": "I can't help with that."}), _chunk({}, "stop"))
    events, response = _stream(OpenAIChatProvider, body)
    assert response.content == "I can't help with that."
    assert response.finish_reason == "content_filter"
    assert response.raw_finish_reason == "stop"


@pytest.mark.parametrize(
    "raw, normalized, stored",
    [
        ("stop", "stop", "stop"),
        ("length", "length", "max_tokens"),
        ("tool_calls", "tool_calls", "tool_calls"),
        ("content_filter", "content_filter", "content_filter"),
        ("function_call", "tool_calls", "tool_calls"),
        ("something_new", "other", "something_new"),
    ],
)
def test_finish_reason_mapping(raw, normalized, stored):
    events, response = _stream(OpenAIChatProvider, _sse(_chunk({"content": "x"}, raw)))
    assert events[-2] == FinishReasonDone(normalized, raw)
    assert response.message_finish_reason == stored


def test_error_event_mid_stream_raises_provider_error():
    body = _sse(
        _chunk({"content": "Hel"}),
        {"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}},
        done=False,
    )
    transport, sent = _serve(body)
    provider = OpenRouterProvider(api_key=KEY, transport=transport)
    provider.sleep = lambda s: pytest.fail("no retry once an event was delivered")
    seen = []
    with pytest.raises(RateLimitError) as info:
        for event in provider.stream(REQUEST):
            seen.append(event)
    assert seen == [TextDelta("Hel")]
    assert info.value.message == "Rate limit reached"
    assert info.value.status is None
    assert len(sent) == 1


def test_numeric_error_code_mid_stream_is_classified():
    body = _sse({"error": {"message": "Upstream failed", "code": 502}}, done=False)
    ok = _sse(_chunk({"content": "ok"}, "stop"))
    transport, sent = replay_transport(
        [
            {
                "request": {"method": "POST", "uri": "<B>/chat/completions", "body": ""},
                "response": {"status": 200, "headers": {}, "body": text},
            }
            for text in (body, ok)
        ]
    )
    provider = OpenRouterProvider(api_key=KEY, transport=transport, max_retries=1)
    provider.sleep = lambda s: None
    stream = provider.stream(REQUEST)
    list(stream)
    assert stream.response.content == "ok"
    assert len(sent) == 2


def test_stream_without_done_is_incomplete():
    body = _sse(_chunk({"content": "Hello"}), _chunk({}, "stop"), done=False)
    with pytest.raises(IncompleteStreamError) as info:
        _stream(OpenAIChatProvider, body)
    assert info.value.provider == "openai"


def test_perplexity_stream_may_end_at_its_finish_reason():
    body = _sse(
        _chunk({"content": "Paris."}, search_results=[{"title": "Paris", "url": "https://p.example"}]),
        _chunk({"content": ""}, "stop", usage={"prompt_tokens": 2, "completion_tokens": 3}),
        done=False,
    )  # fmt: skip
    events, response = _stream(PerplexityProvider, body)
    assert response.content == "Paris."
    assert [c.url for c in response.citations] == ["https://p.example"]
    assert response.tokens == Tokens(input_tokens=2, output_tokens=3)
    assert sum(isinstance(e, FinishReasonDone) for e in events) == 1


def test_perplexity_stream_without_finish_is_still_incomplete():
    with pytest.raises(IncompleteStreamError):
        _stream(PerplexityProvider, _sse(_chunk({"content": "Par"}), done=False))


def test_unknown_fields_and_comments_are_ignored():
    body = ": keep-alive\n\n" + _sse(
        _chunk({"content": "a", "new_field": 1}, obfuscation="q"),
        _chunk({"content": "b"}, "stop"),
    )
    _, response = _stream(OpenRouterProvider, body)
    assert response.content == "ab"


def test_mistral_content_parts_carry_thinking():
    body = _sse(
        _chunk({"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Hmm."}]}]}),
        _chunk({"content": [{"type": "text", "text": "Yes."}]}),
        _chunk({}, "stop"),
    )
    events, response = _stream(MistralProvider, body)
    assert response.thinking.text == "Hmm."
    assert response.content == "Yes."


# -- requests ----------------------------------------------------------------------------


def _payload(provider, request: ProviderRequest, stream: bool = False) -> dict[str, Any]:
    return provider.build_payload(request, stream=stream)


def test_payload_system_first_attachments_tools_schema_params():
    request = ProviderRequest(
        model_id="gpt-4.1-mini",
        messages=[
            ProviderMessage("user", "Look", attachments=[
                AttachmentData("image/png", b"\x89PNG", "a.png"),
                AttachmentData("application/pdf", b"%PDF-1.4", "doc.pdf"),
                AttachmentData("text/plain", b"notes", "n.txt"),
            ]),
            ProviderMessage("system", "Be brief."),
            ProviderMessage("assistant", "", tool_calls=[ToolCallData("c1", "f", {"x": "é"})]),
            ProviderMessage("tool", "42", tool_call_id="c1", tool_name="f"),
            ProviderMessage("system", "Use metric units."),
        ],
        tools=[ToolSpec("f", "Does f", {"type": "object",
                                         "properties": {"x": {"type": "string"}}})],
        params={"temperature": 0.2, "max_tokens": 100, "thinking": {"effort": "low"},
                "openai": {"service_tier": "flex"}, "anthropic": {"ignored": True}},
        schema={"type": "object", "properties": {"a": {"type": "integer"}}},
        schema_name="answer",
    )  # fmt: skip
    body = _payload(OpenAIChatProvider(api_key=KEY), request, stream=True)
    assert body["messages"][0] == {"role": "system", "content": "Be brief.\n\nUse metric units."}
    user = body["messages"][1]
    assert user["content"][0] == {"type": "text", "text": "Look"}
    assert user["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw=="},
    }
    assert user["content"][2] == {
        "type": "file",
        "file": {"filename": "doc.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQ="},
    }
    assert user["content"][3] == {"type": "text", "text": "n.txt:\nnotes"}
    assert body["messages"][2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x":"é"}'}}
        ],
    }
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "42"}
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "f",
                "description": "Does f",
                "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
            },
        }
    ]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": request.schema, "strict": True},
    }
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.2
    assert body["max_completion_tokens"] == 100 and "max_tokens" not in body
    assert body["reasoning_effort"] == "low"
    assert body["service_tier"] == "flex"
    assert "ignored" not in body


def test_vendor_payload_tweaks():
    request = ProviderRequest(
        model_id="m",
        messages=[ProviderMessage("user", "hi")],
        params={"max_tokens": 50, "thinking": {"budget_tokens": 2000}},
    )
    assert _payload(OllamaProvider(), request)["max_tokens"] == 50
    assert _payload(OllamaProvider(), request)["reasoning_effort"] == "low"
    assert _payload(OpenRouterProvider(api_key=KEY), request)["reasoning"] == {"max_tokens": 2000}
    plain = ProviderRequest(model_id="m", messages=[ProviderMessage("user", "hi")])
    assert "stream_options" not in _payload(MistralProvider(api_key=KEY), plain, stream=True)
    assert _payload(DeepSeekProvider(api_key=KEY), plain, stream=False)["stream"] is False
    with pytest.raises(UnsupportedFeatureError, match="mistral does not support thinking"):
        _payload(MistralProvider(api_key=KEY), request)


@pytest.mark.parametrize(
    "provider, request_kw, feature",
    [
        (DeepSeekProvider, {"schema": {"type": "object"}}, "structured output"),
        (PerplexityProvider, {"tools": [ToolSpec("f")]}, "tools"),
        (DeepSeekProvider, {"messages": [ProviderMessage("user", "x", attachments=[
            AttachmentData("image/png", b"1")])]}, "image input"),
        (MistralProvider, {"messages": [ProviderMessage("user", "x", attachments=[
            AttachmentData("application/pdf", b"1")])]}, "PDF input"),
        (OpenAIChatProvider, {"messages": [ProviderMessage("user", "x", attachments=[
            AttachmentData("audio/wav", b"1")])]}, "audio/wav attachments"),
    ],
)  # fmt: skip
def test_unsupported_features_raise(provider, request_kw, feature):
    kw = {"model_id": "m", "messages": [ProviderMessage("user", "hi")], **request_kw}
    with pytest.raises(UnsupportedFeatureError) as info:
        _payload(provider(api_key=KEY), ProviderRequest(**kw))
    assert info.value.feature == feature


def test_non_streaming_answer_with_refusal_citations_and_object_arguments():
    provider = PerplexityProvider(api_key=KEY)
    response = provider.parse_response(
        {
            "model": "sonar",
            "citations": ["https://a.example", "https://b.example"],
            "choices": [
                {
                    "message": {"role": "assistant", "content": "Answer [1]."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7},
        },
        ANY_REQUEST,
    )
    assert [c.url for c in response.citations] == ["https://a.example", "https://b.example"]
    assert response.model_id == "sonar"
    ollama = OllamaProvider().parse_response(
        {
            "choices": [
                {
                    "message": {
                        "content": None,
                        "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}],
                    },
                    "finish_reason": "stop",
                }
            ]
        },
        ANY_REQUEST,
    )
    assert ollama.tool_calls[0].arguments == {"a": 1}
    assert ollama.tool_calls[0].call_id.startswith("call_")
    assert ollama.finish_reason == "tool_calls"
    assert ollama.tokens == Tokens()
    with pytest.raises(ProviderError, match="overloaded"):
        OpenRouterProvider(api_key=KEY).parse_response(
            {"error": {"message": "overloaded"}}, ANY_REQUEST
        )


def test_usage_tokens_variants():
    assert usage_tokens(None) == Tokens()
    assert usage_tokens(
        {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 30, "cache_write_tokens": 10},
            "completion_tokens_details": {"reasoning_tokens": 8},
        }
    ) == Tokens(
        input_tokens=60,
        output_tokens=20,
        cache_read_tokens=30,
        cache_write_tokens=10,
        thinking_tokens=8,
    )
    assert usage_tokens(
        {"prompt_tokens": 50, "completion_tokens": 5, "prompt_cache_hit_tokens": 40}
    ) == Tokens(input_tokens=10, output_tokens=5, cache_read_tokens=40)


def test_openai_compatible_needs_a_base_url():
    with pytest.raises(ConfigurationError, match=r'LLMCHAT\["PROVIDERS"\]\["openai_compatible"\]'):
        OpenAICompatibleProvider()
    assert OpenAICompatibleProvider(base_url="http://vllm:8000/v1/").base_url == (
        "http://vllm:8000/v1"
    )


def test_vendor_classes_declare_themselves():
    for cls, url in [
        (OpenAIChatProvider, "https://api.openai.com/v1"),
        (OllamaProvider, "http://localhost:11434/v1"),
        (OpenRouterProvider, "https://openrouter.ai/api/v1"),
        (DeepSeekProvider, "https://api.deepseek.com"),
        (MistralProvider, "https://api.mistral.ai/v1"),
        (PerplexityProvider, "https://api.perplexity.ai"),
    ]:
        assert cls.default_base_url == url
        assert cls.name and cls.label
    assert OllamaProvider.requires_api_key is False
    assert OpenAICompatibleProvider.requires_api_key is False
    assert PerplexityProvider.capabilities.tools is False
