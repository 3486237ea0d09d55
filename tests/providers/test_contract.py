"""One contract for every provider class, run over real HTTP against the loopback fake
server (:mod:`django_llmchat.testing`): the same scripted replies must come back as the
same normalized :class:`ProviderResponse` and the same stream events, whatever the wire
format in between.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass

import pytest

from django_llmchat.errors import (
    IncompleteStreamError,
    OverloadedError,
    ProviderError,
    ProviderTimeoutError,
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
    ToolCallDone,
)
from django_llmchat.testing import FakeProviderServer, Fault, Reply, ToolCall
from django_llmchat.values import Tokens

try:
    from django_llmchat.providers.types import (
        ProviderMessage,
        ProviderRequest,
        ToolSpec,
    )
except ImportError:  # pragma: no cover - the provider package is incomplete
    ProviderMessage = ProviderRequest = ToolSpec = None


@dataclass(frozen=True)
class Case:
    id: str
    module: str
    cls: str
    name: str
    """The provider name whose base URL the class is given."""
    format: str


CASES = [
    Case("openai-responses", "openai_responses", "OpenAIResponsesProvider", "openai", "responses"),
    Case("openai-chat", "openai_chat", "OpenAIChatProvider", "openai", "chat_completions"),
    Case("xai", "openai_responses", "XAIProvider", "xai", "responses"),
    Case("anthropic", "anthropic", "AnthropicProvider", "anthropic", "anthropic"),
    Case("gemini", "gemini", "GeminiProvider", "gemini", "gemini"),
    Case("ollama", "openai_chat", "OllamaProvider", "ollama", "chat_completions"),
    Case("openrouter", "openai_chat", "OpenRouterProvider", "openrouter", "chat_completions"),
    Case("deepseek", "openai_chat", "DeepSeekProvider", "deepseek", "chat_completions"),
    Case("mistral", "openai_chat", "MistralProvider", "mistral", "chat_completions"),
    Case("perplexity", "openai_chat", "PerplexityProvider", "perplexity", "chat_completions"),
    Case(
        "openai-compatible",
        "openai_chat",
        "OpenAICompatibleProvider",
        "openai_compatible",
        "chat_completions",
    ),
]


def _load(case: Case):
    try:
        module = importlib.import_module(f"django_llmchat.providers.{case.module}")
        return getattr(module, case.cls)
    except (ImportError, AttributeError) as exc:
        return exc


def _params():
    for case in CASES:
        loaded = _load(case)
        marks = []
        if isinstance(loaded, Exception):
            marks.append(
                pytest.mark.skip(reason=f"{case.module}.{case.cls} is not available: {loaded}")
            )
        yield pytest.param(case, id=case.id, marks=marks)


USAGE = Tokens(input_tokens=10, cache_read_tokens=4, output_tokens=5, thinking_tokens=2)
TEXT = "The capital of France is Paris. It sits on the Seine."
WEATHER = (
    ToolSpec(
        name="weather",
        description="Gets current weather for a location",
        parameters={
            "type": "object",
            "properties": {"latitude": {"type": "string"}, "longitude": {"type": "string"}},
            "required": ["latitude", "longitude"],
        },
    )
    if ToolSpec
    else None
)
CLOCK = ToolSpec(name="clock", description="Current time in a zone") if ToolSpec else None


@pytest.fixture(scope="module")
def server():
    with FakeProviderServer(default=None) as srv:
        yield srv


@pytest.fixture(params=list(_params()))
def case(request, server):
    server.reset()
    yield request.param
    server.reset()


@pytest.fixture
def provider(case, server):
    cls = _load(case)
    instance = cls(api_key="test-key", base_url=server.base_url(case.name), max_retries=1)
    waits: list[float] = []
    instance.sleep = waits.append  # retries do not really wait
    instance.waits = waits
    return instance


def request_for(**kw) -> ProviderRequest:
    return ProviderRequest(
        model_id=kw.pop("model_id", "fake-model"),
        messages=[ProviderMessage(role="user", content="What is the capital of France?")],
        **kw,
    )


def run(provider, request, stream: bool):
    """``(response, events)``; ``events`` is empty for a whole (non-streaming) answer."""
    if not stream:
        return provider.complete(request), []
    handle = provider.stream(request)
    events = list(handle)
    return handle.response, events


def kinds(events) -> list[str]:
    return [type(e).__name__ for e in events]


def assert_tokens(tokens: Tokens, expected: Tokens) -> None:
    """Scripted counts read back exactly; unscripted ones may be 0 or None."""
    for field in ("input_tokens", "output_tokens", "cache_read_tokens", "thinking_tokens"):
        assert getattr(tokens, field) == getattr(expected, field), field
    assert tokens.cache_write_tokens in (None, 0)


def assert_finish_events(events, finish: str, tokens: Tokens) -> None:
    done = [e for e in events if isinstance(e, FinishReasonDone)]
    assert len(done) == 1, kinds(events)
    assert done[0].finish_reason == finish
    usage = [e for e in events if isinstance(e, TokenUsageDone)]
    assert len(usage) == 1, kinds(events)
    assert_tokens(usage[0].token_usage, tokens)


STREAM = [pytest.param(False, id="whole"), pytest.param(True, id="stream")]


# -- scenarios -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAM)
def test_plain_text(server, provider, case, stream):
    server.script(Reply(TEXT, usage=USAGE, chunk_size=7))
    response, events = run(provider, request_for(), stream)
    assert response.content == TEXT
    assert response.tool_calls == []
    assert response.thinking is None
    assert response.finish_reason == "stop"
    assert response.message_finish_reason == "stop"
    assert_tokens(response.tokens, USAGE)
    (sent,) = server.requests
    assert sent.format == case.format and sent.stream is stream
    if case.format != "gemini":
        assert sent.body["model"] == "fake-model"
    if stream:
        deltas = [e.content for e in events if isinstance(e, TextDelta)]
        assert len(deltas) > 1 and "".join(deltas) == TEXT
        (text_done,) = [e for e in events if isinstance(e, TextDone)]
        assert text_done.content == TEXT
        order = kinds(events)
        assert order.index("TextDone") > max(i for i, k in enumerate(order) if k == "TextDelta")
        assert_finish_events(events, "stop", USAGE)


@pytest.mark.parametrize("stream", STREAM)
def test_parallel_tool_calls(server, provider, case, stream):
    calls = [
        ToolCall("weather", {"latitude": "52.5200", "longitude": "13.4050"}, call_id="call_w1"),
        ToolCall("clock", {"zone": "Europe/Berlin"}, call_id="call_c2"),
    ]
    if case.format == "gemini":
        # Gemini 2.5 sends no call ids; the provider makes its own.
        calls = [ToolCall(c.name, c.arguments) for c in calls]
    if not provider.capabilities.tools:
        pytest.skip(f"{case.id} declares no tool support")
    server.script(Reply(tool_calls=calls, usage=USAGE, chunk_size=5))
    response, events = run(provider, request_for(tools=[WEATHER, CLOCK]), stream)
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("weather", {"latitude": "52.5200", "longitude": "13.4050"}),
        ("clock", {"zone": "Europe/Berlin"}),
    ]
    ids = [c.call_id for c in response.tool_calls]
    assert all(ids) and len(set(ids)) == 2
    if case.format != "gemini":
        assert ids == ["call_w1", "call_c2"]
    else:
        assert response.tool_calls[0].thought_signature  # kept for the next turn
    assert response.content == ""
    assert response.finish_reason == "tool_calls"
    assert response.message_finish_reason == "tool_calls"
    assert_tokens(response.tokens, USAGE)
    tools = server.requests[0].body.get("tools")
    assert tools, "the tool specs were sent"
    if stream:
        done = [e for e in events if isinstance(e, ToolCallDone)]
        assert [(e.name, json.loads(e.arguments)) for e in done] == [
            (c.name, c.arguments) for c in calls
        ]
        assert [e.call_id for e in done] == ids
        assert_finish_events(events, "tool_calls", USAGE)


@pytest.mark.parametrize("stream", STREAM)
def test_thinking(server, provider, case, stream):
    thinking = "The user asks about France; its capital is Paris."
    server.script(
        Reply(TEXT, thinking=thinking, thinking_signature="sig-abc", usage=USAGE, chunk_size=9)
    )
    # Ask for thinking where the provider takes the parameter (reasoning-only models such
    # as DeepSeek's and Mistral's refuse it); read it back everywhere.
    params = {"thinking": {"budget_tokens": 1024}}
    try:
        provider.build_payload(request_for(params=params), stream=False)
    except UnsupportedFeatureError:
        params = {}
    response, events = run(provider, request_for(params=params), stream)
    assert response.content == TEXT
    assert response.thinking is not None, "the thinking was dropped"
    assert response.thinking.text == thinking
    if case.format == "anthropic":
        assert response.thinking.signature == "sig-abc"
    assert_tokens(response.tokens, USAGE)
    if stream:
        pieces = [e.content for e in events if isinstance(e, ReasoningDelta)]
        assert "".join(pieces) == thinking
        done = [e for e in events if isinstance(e, ReasoningDone)]
        assert len(done) == 1 and done[0].part.text == thinking
        order = kinds(events)
        assert order.index("ReasoningDone") < order.index("TextDelta")


@pytest.mark.parametrize("stream", STREAM)
def test_truncated_by_length(server, provider, case, stream):
    server.script(Reply("Once upon a time", finish_reason="length", usage=USAGE))
    response, events = run(provider, request_for(), stream)
    assert response.content == "Once upon a time"
    assert response.finish_reason == "length"
    assert response.message_finish_reason == "max_tokens"
    if stream:
        assert_finish_events(events, "length", USAGE)


@pytest.mark.parametrize("stream", STREAM)
def test_rate_limited_then_success(server, provider, case, stream):
    server.script(Fault(status=429, retry_after=0), Reply("after the wait", usage=USAGE))
    response, events = run(provider, request_for(), stream)
    assert response.content == "after the wait"
    assert len(server.requests) == 2
    assert provider.waits == [0.0]


@pytest.mark.parametrize("stream", STREAM)
def test_rate_limited_until_retries_run_out(server, provider, case, stream):
    server.script(Fault(status=429, retry_after=3), Fault(status=429, retry_after=3))
    with pytest.raises(RateLimitError) as info:
        run(provider, request_for(), stream)
    assert info.value.status == 429
    assert info.value.retry_after == 3
    assert len(server.requests) == 2  # max_retries=1


@pytest.mark.parametrize("stream", STREAM)
def test_server_error(server, provider, case, stream):
    server.script(Fault(status=500), Fault(status=500))
    with pytest.raises(ProviderError) as info:
        run(provider, request_for(), stream)
    err = info.value
    assert err.status == 500 and err.retryable
    assert not isinstance(err, RateLimitError | IncompleteStreamError)
    assert "test-key" not in str(err)
    assert len(server.requests) == 2


def test_mid_stream_error(server, provider, case):
    server.script(Fault(error_event=6, reply=Reply(TEXT, chunk_size=4)))
    seen = []
    with pytest.raises(ProviderError) as info:
        for event in provider.stream(request_for()):
            seen.append(event)
    err = info.value
    assert not isinstance(err, IncompleteStreamError), "the error event was not recognised"
    assert err.status is None
    if case.format == "anthropic":
        assert isinstance(err, OverloadedError)
    assert any(isinstance(e, TextDelta) for e in seen)
    assert len(server.requests) == 1  # events were delivered: no retry


def test_cut_off_stream(server, provider, case):
    server.script(Fault(cut_after=6, reply=Reply(TEXT, chunk_size=4)))
    seen = []
    with pytest.raises(IncompleteStreamError):
        for event in provider.stream(request_for()):
            seen.append(event)
    assert any(isinstance(e, TextDelta) for e in seen)
    assert not any(isinstance(e, TextDone | FinishReasonDone) for e in seen)
    assert len(server.requests) == 1


def test_cut_off_cleanly_is_incomplete_too(server, provider, case):
    server.script(Fault(cut_after=6, cut_cleanly=True, reply=Reply(TEXT, chunk_size=4)))
    with pytest.raises(IncompleteStreamError):
        list(provider.stream(request_for()))


def test_cut_before_any_event_is_retried(server, provider, case):
    server.script(Fault(cut_after=0), Reply("second try"))
    response, _ = run(provider, request_for(), True)
    assert response.content == "second try"
    assert len(server.requests) == 2


@pytest.mark.parametrize("stream", STREAM)
def test_text_then_a_call_without_arguments(server, provider, case, stream):
    if not provider.capabilities.tools:
        pytest.skip(f"{case.id} declares no tool support")
    server.script(Reply("Let me check the time.", tool_calls=[ToolCall("clock", {})]))
    response, events = run(provider, request_for(tools=[CLOCK]), stream)
    assert response.content == "Let me check the time."
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("clock", {})]
    assert response.finish_reason == "tool_calls"


@pytest.mark.parametrize("stream", STREAM)
def test_content_filter(server, provider, case, stream):
    server.script(Reply("I can't", finish_reason="content_filter"))
    response, events = run(provider, request_for(), stream)
    assert response.finish_reason == "content_filter"
    assert response.message_finish_reason == "content_filter"


@pytest.mark.parametrize("stream", STREAM)
def test_unicode_survives_chunking(server, provider, case, stream):
    text = "Grüße 🌍 “quoted” line\u2028separator, 東京 — done"
    server.script(Reply(text, chunk_size=3))
    response, _ = run(provider, request_for(), stream)
    assert response.content == text


@pytest.mark.parametrize("stream", STREAM)
def test_reasoning_content_spelling(server, provider, case, stream):
    """DeepSeek and vLLM spell Chat Completions thinking ``reasoning_content``."""
    if case.format != "chat_completions":
        pytest.skip("a Chat Completions dialect")
    server.reasoning_field = "reasoning_content"
    server.script(Reply(TEXT, thinking="Paris, obviously."))
    response, _ = run(provider, request_for(), stream)
    assert response.thinking is not None and response.thinking.text == "Paris, obviously."


def test_error_event_before_any_event_is_retried(server, provider, case):
    server.script(Fault(error_event=0), Reply("second try"))
    response, _ = run(provider, request_for(), True)
    assert response.content == "second try"
    assert len(server.requests) == 2


@pytest.mark.parametrize("stream", STREAM)
def test_async(server, provider, case, stream):
    import asyncio

    server.script(Reply(TEXT, usage=USAGE))

    async def go():
        if not stream:
            return await provider.acomplete(request_for()), []
        handle = provider.astream(request_for())
        events = [event async for event in handle]
        return handle.response, events

    response, events = asyncio.run(go())
    assert response.content == TEXT
    assert_tokens(response.tokens, USAGE)
    if stream:
        assert "".join(e.content for e in events if isinstance(e, TextDelta)) == TEXT


def test_concurrent_streams_share_one_provider(server, provider, case):
    from concurrent.futures import ThreadPoolExecutor

    server.responder = lambda request: Reply(f"answer {len(server.requests)}", chunk_size=2)

    def one(_):
        handle = provider.stream(request_for())
        list(handle)
        return handle.response.content

    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(one, range(40)))
    assert len(server.requests) == 40
    assert all(a.startswith("answer ") for a in answers)


@pytest.mark.parametrize("stream", STREAM)
def test_cache_write_tokens(server, provider, case, stream, request):
    """Cache writes, where the wire format has a field for them."""
    if case.format == "gemini":
        pytest.skip("Gemini reports no cache writes")
    usage = Tokens(input_tokens=10, cache_read_tokens=4, cache_write_tokens=3, output_tokens=5)
    server.script(Reply("cached", usage=usage))
    response, _ = run(provider, request_for(), stream)
    assert response.tokens.cache_write_tokens == 3
    assert response.tokens.input_tokens == 10
    assert response.tokens.cache_read_tokens == 4


@pytest.mark.parametrize("stream", STREAM)
def test_slow_first_byte_times_out(server, provider, case, stream):
    provider.timeout = 0.2
    provider._client = None  # a client built for the shorter timeout
    provider.max_retries = 0
    server.script(Fault(first_byte_delay=2.0))
    with pytest.raises(ProviderTimeoutError):
        run(provider, request_for(), stream)


@pytest.mark.parametrize("stream", STREAM)
def test_slow_chunks_still_arrive(server, provider, case, stream):
    server.script(Fault(chunk_delay=0.005, reply=Reply(TEXT, chunk_size=10)))
    response, _ = run(provider, request_for(), stream)
    assert response.content == TEXT
