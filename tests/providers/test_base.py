"""The provider plumbing: clients, errors, retries, streams, framing and the registry."""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
from typing import Any

import httpx
import pytest

from django_llmchat import providers as registry
from django_llmchat.errors import (
    AuthenticationError,
    ConfigurationError,
    ContextLengthExceededError,
    IncompleteStreamError,
    OverloadedError,
    ProviderError,
    ProviderTimeoutError,
    RateLimitError,
)
from django_llmchat.events import FinishReasonDone, TextDelta, TextDone
from django_llmchat.providers import base
from django_llmchat.providers.base import (
    NDJSONDecoder,
    Provider,
    SSEDecoder,
    StreamParser,
    close_clients,
)
from django_llmchat.providers.openai_chat import (
    DeepSeekProvider,
    OllamaProvider,
    OpenAIChatProvider,
    OpenAICompatibleProvider,
)
from django_llmchat.providers.types import ProviderMessage, ProviderRequest, ProviderResponse
from tests.conftest import import_or_unavailable

KEY = "sk-live-SECRET-0123456789abcdef"
REQUEST = ProviderRequest(model_id="m", messages=[ProviderMessage("user", "hi")])


class EchoParser(StreamParser):
    def feed(self, event, data):
        if data == "[DONE]":
            self.done = True
            return [FinishReasonDone("stop", "stop")]
        chunk = json.loads(data)
        if "error" in chunk:
            raise self.provider.error_from_payload(chunk, body=data)
        return [TextDelta(chunk["t"])]


class EchoProvider(Provider):
    """The smallest possible vendor: JSON ``{"text"}`` answers, ``{"t"}`` SSE chunks."""

    name = "echo"
    label = "Echo"
    default_base_url = "https://echo.example/v1"

    def auth_headers(self):
        return {"Authorization": f"Bearer {self.api_key}"}

    def endpoint(self, request, *, stream):
        return "/echo"

    def build_payload(self, request, *, stream):
        return {"model": request.model_id, "stream": stream}

    def parse_response(self, data, request):
        return ProviderResponse(content=data["text"])

    def new_stream_parser(self, request):
        return EchoParser(self, request)


def sse(*texts: str, done: bool = True) -> bytes:
    frames = [f"data: {json.dumps({'t': t})}\n\n" for t in texts]
    if done:
        frames.append("data: [DONE]\n\n")
    return "".join(frames).encode()


class Broken(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body that delivers ``first`` and then fails like a dropped connection."""

    def __init__(self, first: bytes, exc: Exception):
        self.first = first
        self.exc = exc

    def __iter__(self):
        yield self.first
        raise self.exc

    async def __aiter__(self):
        yield self.first
        raise self.exc


def scripted(*steps: Any) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport answering each request with the next step: a Response or an exception."""
    sent: list[httpx.Request] = []
    pending = list(steps)

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        sent.append(request)
        step = pending.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    return httpx.MockTransport(handler), sent


def ok(text: str = "hello") -> httpx.Response:
    return httpx.Response(200, json={"text": text})


def err(status: int, headers: dict[str, str] | None = None, body: Any = None) -> httpx.Response:
    body = body if body is not None else {"error": {"message": f"status {status}"}}
    return httpx.Response(status, headers=headers, json=body)


def echo(*steps: Any, **kw: Any) -> tuple[EchoProvider, list[httpx.Request], list[float]]:
    transport, sent = scripted(*steps)
    provider = EchoProvider(api_key=KEY, transport=transport, **kw)
    waits: list[float] = []
    provider.sleep = waits.append
    return provider, sent, waits


# -- retries -------------------------------------------------------------------------------


# -- network failures -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectTimeout("timed out"),
        httpx.ReadTimeout("timed out"),
        httpx.ConnectError("[Errno 111] Connection refused"),
        httpx.RemoteProtocolError("Server disconnected without sending a response."),
    ],
)
def test_network_failures_become_retryable_timeouts(exc):
    provider, sent, waits = echo(exc, ok())
    assert provider.complete(REQUEST).content == "hello"
    assert len(waits) == 1

    provider, sent, waits = echo(exc, exc, exc, max_retries=2)
    with pytest.raises(ProviderTimeoutError) as info:
        provider.complete(REQUEST)
    error = info.value
    assert error.retryable and error.provider == "echo"
    assert str(error).startswith("echo: ")
    assert "echo.example" in str(error)
    assert not isinstance(error, httpx.HTTPError)
    assert error.__cause__ is None and error.__suppress_context__
    assert len(sent) == 3


# -- streams ----------------------------------------------------------------------------


def stream_ok(*texts: str, done: bool = True) -> httpx.Response:
    return httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=sse(*texts, done=done)
    )


# -- errors never carry the key ------------------------------------------------------------


class SettingsEcho(EchoProvider):
    """Built by get_provider from settings; takes its transport from ``TRANSPORT``."""

    TRANSPORT: Any = None

    def __init__(self, **kw: Any):
        super().__init__(transport=self.TRANSPORT, **kw)


def _leaks(error: ProviderError) -> list[str]:
    places = {
        "str": str(error),
        "repr": repr(error),
        "message": error.message,
        "body": error.body or "",
        "headers": json.dumps(error.headers),
        "args": repr(error.args),
        "pickle": pickle.dumps(error).decode("latin-1"),
    }
    return [name for name, text in places.items() if KEY in text]


def test_key_never_appears_in_errors_or_logs(settings, caplog):
    caplog.set_level(logging.DEBUG)
    echoed = {"error": {"message": f"Incorrect API key provided: {KEY}", "code": KEY}}
    SettingsEcho.TRANSPORT, sent = scripted(
        err(429, {"retry-after": "0", "x-echo": KEY}, echoed),
        err(401, {"x-echo": KEY, "set-cookie": f"k={KEY}"}, echoed),
        httpx.ConnectError(f"could not reach https://echo.example/?key={KEY}"),
        httpx.Response(200, stream=Broken(sse("a", done=False), httpx.ReadError(KEY))),
    )
    settings.LLMCHAT = {
        "PROVIDERS": {"echo": {"class": "tests.providers.test_base.SettingsEcho", "api_key": KEY}},
        "MAX_RETRIES": 0,
    }
    provider = registry.get_provider("echo")
    assert provider.api_key == KEY
    assert KEY not in repr(provider)
    provider.max_retries = 1
    provider.sleep = lambda s: None
    errors = []
    with pytest.raises(AuthenticationError) as info:
        provider.complete(REQUEST)
    errors.append(info.value)
    assert "[redacted]" in info.value.message
    assert "set-cookie" not in info.value.headers
    provider.max_retries = 0
    with pytest.raises(ProviderTimeoutError) as info:
        provider.complete(REQUEST)
    errors.append(info.value)
    with pytest.raises(IncompleteStreamError) as info:
        list(provider.stream(REQUEST))
    errors.append(info.value)
    for error in errors:
        assert _leaks(error) == [], type(error)
    assert sent[0].headers["authorization"] == f"Bearer {KEY}"  # it was really sent
    assert caplog.records  # the retry was logged...
    assert KEY not in caplog.text  # ...without the key


# -- pickling ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls",
    [
        ProviderError,
        AuthenticationError,
        RateLimitError,
        ContextLengthExceededError,
        OverloadedError,
        ProviderTimeoutError,
        IncompleteStreamError,
    ],
)
def test_every_error_class_pickles(cls):
    error = cls(
        "went wrong",
        provider="echo",
        status=429,
        body='{"error": "x"}',
        headers={"retry-after": "3"},
        retry_after=3.0,
        code="rate_limit",
    )
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls
    for attr in ("message", "provider", "status", "body", "headers", "retry_after", "code"):
        assert getattr(copy, attr) == getattr(error, attr)
    assert copy.retryable == error.retryable
    assert str(copy) == str(error)


def test_raised_errors_pickle_with_their_hints():
    provider, sent, waits = echo(err(429, {"retry-after": "4"}), max_retries=0)
    with pytest.raises(RateLimitError) as info:
        provider.complete(REQUEST)
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.status, copy.retry_after, copy.body) == (429, 4.0, info.value.body)


# -- clients -------------------------------------------------------------------------------


def test_one_client_per_configuration_reused_across_calls():
    provider, sent, waits = echo(ok(), ok(), stream_ok("x"))
    client = provider.client
    provider.complete(REQUEST)
    provider.complete(REQUEST)
    list(provider.stream(REQUEST))
    assert provider.client is client
    assert len(sent) == 3
    assert sent[0].headers["user-agent"] == base.USER_AGENT
    assert sent[0].headers["authorization"] == f"Bearer {KEY}"


def test_clients_are_pooled_per_configuration(monkeypatch):
    made: list[dict[str, Any]] = []
    real = base.ProviderClient

    def counting(**kw: Any) -> httpx.Client:
        made.append(kw)
        return real(**kw)

    close_clients()
    monkeypatch.setattr(base, "ProviderClient", counting)
    try:
        a = EchoProvider(api_key="key-a")
        b = EchoProvider(api_key="key-b")
        assert a.client is b.client  # keys travel per request: one pool serves both
        assert EchoProvider(timeout=5).client is not a.client
        assert EchoProvider(base_url="https://other.example").client is not a.client
        assert len(made) == 3
        kw = made[0]
        assert kw["limits"].max_connections >= 100
        assert kw["timeout"].connect == base.CONNECT_TIMEOUT
        assert kw["timeout"].read == base.DEFAULT_TIMEOUT
        assert made[1]["timeout"].read == 5 and made[1]["timeout"].connect == 5
    finally:
        close_clients()


def test_a_provider_client_keeps_a_cookie_it_is_sent_and_parses_no_answer_without_one(
    monkeypatch,
):
    """The jar of a provider's client: an answer without ``Set-Cookie`` never reaches
    :mod:`http.cookiejar` (its parse is a tenth of a request's CPU); a load balancer's
    affinity cookie is kept and sent back, as by any httpx client."""
    import http.cookiejar

    parsed: list[str] = []
    real = http.cookiejar.CookieJar.extract_cookies

    def counting(jar, response, request):
        parsed.append(request.get_full_url())
        return real(jar, response, request)

    monkeypatch.setattr(http.cookiejar.CookieJar, "extract_cookies", counting)
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("cookie"))
        if request.url.path == "/v1/sticky":
            return httpx.Response(200, headers={"set-cookie": "AWSALB=node-2; Path=/"}, json={})
        return httpx.Response(200, json={"text": "ok"})

    provider = EchoProvider(api_key=KEY, transport=httpx.MockTransport(handler))
    assert isinstance(provider.client, base.ProviderClient)
    assert provider.complete(REQUEST).content == "ok"
    assert parsed == [] and seen == [None]
    provider.client.get("https://echo.example/v1/sticky")
    assert parsed == ["https://echo.example/v1/sticky"]
    assert provider.complete(REQUEST).content == "ok"
    assert seen[-1] == "AWSALB=node-2"
    assert dict(provider.client.cookies) == {"AWSALB": "node-2"}
    provider.client.cookies = {"session": "given"}  # the public setter: the same jar kind
    assert provider.complete(REQUEST).content == "ok" and seen[-1] == "session=given"
    assert len(parsed) == 1


def test_timeout_settings():
    assert EchoProvider(timeout=30).httpx_timeout() == httpx.Timeout(30, connect=10)
    assert EchoProvider(timeout={"connect": 2, "read": 300}).httpx_timeout() == httpx.Timeout(
        300, connect=2, write=300, pool=300
    )


def test_client_creation_is_thread_safe():
    import threading

    close_clients()
    provider = EchoProvider()
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(provider.client)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in seen}) == 1
    close_clients()


# -- async twins ---------------------------------------------------------------------------


def aecho(*steps: Any, **kw: Any) -> tuple[EchoProvider, list[httpx.Request], list[float]]:
    # the async calls run the sync attempts in a worker thread: they wait with ``sleep``
    return echo(*steps, **kw)


def test_acomplete_retries_like_complete():
    provider, sent, waits = aecho(err(429, {"retry-after": "2"}), ok("async"))
    assert asyncio.run(provider.acomplete(REQUEST)).content == "async"
    assert waits == [2.0] and len(sent) == 2


def test_acomplete_timeout():
    provider, sent, waits = aecho(httpx.ReadTimeout("x"), max_retries=0)
    with pytest.raises(ProviderTimeoutError, match="waiting for echo.example"):
        asyncio.run(provider.acomplete(REQUEST))


def test_astream_events_response_and_retry():
    provider, sent, waits = aecho(err(503), stream_ok("a", "b"))

    async def run():
        stream = provider.astream(REQUEST)
        events = [e async for e in stream]
        return events, stream.response

    events, response = asyncio.run(run())
    assert events[-1] == TextDone("ab")
    assert response.content == "ab"
    assert len(waits) == 1 and len(sent) == 2


def test_astream_mid_stream_break_is_incomplete():
    broken = httpx.Response(200, stream=Broken(sse("a", done=False), httpx.ReadError("reset")))
    provider, sent, waits = aecho(broken, stream_ok("b"))

    async def run():
        seen = []
        with pytest.raises(IncompleteStreamError):
            async for event in provider.astream(REQUEST):
                seen.append(event)
        return seen

    assert asyncio.run(run()) == [TextDelta("a")]
    assert len(sent) == 1


def test_async_calls_share_the_sync_client_and_leave_the_loop_free():
    provider, sent, waits = aecho(ok("one"), stream_ok("two"))
    client = provider.client
    threads = []
    provider.sleep = waits.append

    async def run():
        ticks = asyncio.create_task(asyncio.sleep(0))
        first = await provider.acomplete(REQUEST)
        stream = provider.astream(REQUEST)
        events = [event async for event in stream]
        await ticks
        threads.append(ticks.done())
        return first, stream.response, events

    first, second, events = asyncio.run(run())
    assert (first.content, second.content) == ("one", "two")
    assert events[-1] == TextDone("two")
    assert provider.client is client and len(sent) == 2 and threads == [True]


def test_astream_closed_early_closes_its_response():
    closed = []

    class Tracked(httpx.SyncByteStream):
        def __iter__(self):
            yield sse("a", "b", done=False)
            yield sse("c")

        def close(self):
            closed.append(True)

    provider, sent, waits = aecho(httpx.Response(200, stream=Tracked()))

    async def run():
        stream = provider.astream(REQUEST).__aiter__()
        first = await stream.__anext__()
        await stream.aclose()
        return first

    assert asyncio.run(run()) == TextDelta("a")
    assert closed == [True]


# -- framing -------------------------------------------------------------------------------


SSE_TEXT = (
    ": comment\r\n"
    "event: message_start\r\n"
    'data: {"a": "line\u2028separator"}\r\n'
    "\r\n"
    "data: first\n"
    "data: second\n"
    "\n"
    "data:no-space\r"
    "\r"
    "data: trailing"
)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_sse_decoder_across_chunk_boundaries(size):
    raw = SSE_TEXT.encode()
    decoder = SSEDecoder()
    out = []
    for i in range(0, len(raw), size):
        out.extend(decoder.feed(raw[i : i + size]))
    out.extend(decoder.flush())
    assert out == [
        ("message_start", '{"a": "line\u2028separator"}'),
        (None, "first\nsecond"),
        (None, "no-space"),
        (None, "trailing"),
    ]


def test_ndjson_decoder():
    decoder = NDJSONDecoder()
    raw = b'{"a": 1}\n\n{"b": "\xc3'
    out = decoder.feed(raw) + decoder.feed(b'\xa9"}\n') + decoder.flush()
    assert out == [(None, '{"a": 1}'), (None, '{"b": "\u00e9"}')]


# -- registry ------------------------------------------------------------------------------

ENV_VARS = [v for names in registry.API_KEY_ENV.values() for v in names] + [
    "OLLAMA_BASE_URL",
    "OLLAMA_HOST",
]


@pytest.fixture
def clean_env(monkeypatch, settings):
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    settings.LLMCHAT = {}
    registry.clear_provider_cache()
    yield monkeypatch
    registry.clear_provider_cache()


def test_registry_names():
    assert set(registry.PROVIDERS) == {
        "openai", "anthropic", "gemini", "xai", "ollama", "openrouter", "deepseek",
        "mistral", "perplexity", "openai_compatible",
    }  # fmt: skip
    assert registry.PROVIDERS["openai"].endswith("openai_responses.OpenAIResponsesProvider")
    assert registry.PROVIDERS["xai"].endswith("openai_responses.XAIProvider")


def test_get_provider_from_env_is_cached(clean_env):
    clean_env.setenv("DEEPSEEK_API_KEY", "env-key")
    provider = registry.get_provider("deepseek")
    assert isinstance(provider, DeepSeekProvider)
    assert provider.api_key == "env-key"
    assert registry.get_provider("deepseek") is provider


def test_get_provider_from_settings(clean_env, settings):
    settings.LLMCHAT = {
        "PROVIDERS": {
            "deepseek": {
                "api_key": "set-key",
                "base_url": "https://proxy.example/deepseek/",
                "timeout": 12,
                "max_retries": 5,
                "options": {"headers": {"X-Team": "a"}},
                "verify": False,
            }
        }
    }
    provider = registry.get_provider("deepseek")
    assert provider.api_key == "set-key"
    assert provider.base_url == "https://proxy.example/deepseek"
    assert provider.timeout == 12 and provider.max_retries == 5
    assert provider.options == {"headers": {"X-Team": "a"}, "verify": False}
    assert provider.headers()["X-Team"] == "a"


def test_setting_changes_rebuild_providers(clean_env, settings):
    settings.LLMCHAT = {"PROVIDERS": {"mistral": {"api_key": "one"}}}
    first = registry.get_provider("mistral")
    settings.LLMCHAT = {"PROVIDERS": {"mistral": {"api_key": "two"}}}
    second = registry.get_provider("mistral")
    assert first is not second and second.api_key == "two"


def test_missing_key_names_env_var_and_setting(clean_env):
    with pytest.raises(ConfigurationError) as info:
        registry.get_provider("mistral")
    text = str(info.value)
    assert 'LLMCHAT["PROVIDERS"]["mistral"]["api_key"]' in text
    assert "MISTRAL_API_KEY" in text


def test_gemini_also_reads_google_api_key(clean_env):
    import_or_unavailable("django_llmchat.providers.gemini")
    clean_env.setenv("GOOGLE_API_KEY", "g-key")
    assert registry.get_provider("gemini").api_key == "g-key"
    with pytest.raises(ConfigurationError, match="GEMINI_API_KEY / GOOGLE_API_KEY"):
        clean_env.delenv("GOOGLE_API_KEY")
        registry.clear_provider_cache()
        registry.get_provider("gemini")


def test_unknown_provider(clean_env):
    with pytest.raises(ConfigurationError, match=r'LLMCHAT\["PROVIDERS"\]\["nope"\]'):
        registry.get_provider("nope")


def test_openai_chat_completions_switch(clean_env, settings):
    clean_env.setenv("OPENAI_API_KEY", "o-key")
    settings.LLMCHAT = {"PROVIDERS": {"openai": {"api": "chat_completions"}}}
    provider = registry.get_provider("openai")
    assert type(provider) is OpenAIChatProvider
    assert provider.base_url == "https://api.openai.com/v1"
    settings.LLMCHAT = {"PROVIDERS": {"openai": {"api": "soap"}}}
    with pytest.raises(ConfigurationError, match="chat_completions"):
        registry.get_provider("openai")


def test_ollama_needs_no_key_and_reads_its_host(clean_env):
    provider = registry.get_provider("ollama")
    assert isinstance(provider, OllamaProvider)
    assert provider.api_key is None and provider.base_url == "http://localhost:11434/v1"
    registry.clear_provider_cache()
    clean_env.setenv("OLLAMA_HOST", "0.0.0.0:11434")
    assert registry.get_provider("ollama").base_url == "http://localhost:11434/v1"
    registry.clear_provider_cache()
    clean_env.setenv("OLLAMA_BASE_URL", "https://gpu.example:11434/v1")
    assert registry.get_provider("ollama").base_url == "https://gpu.example:11434/v1"


def test_custom_names(clean_env, settings):
    settings.LLMCHAT = {
        "PROVIDERS": {
            "lmstudio": {"api": "chat_completions", "base_url": "http://localhost:1234/v1"},
            "house": {"class": "tests.providers.test_base.EchoProvider", "api_key": "k"},
            "vllm": {"api": "chat_completions"},
        }
    }
    lmstudio = registry.get_provider("lmstudio")
    assert type(lmstudio) is OpenAICompatibleProvider and lmstudio.name == "lmstudio"
    assert isinstance(registry.get_provider("house"), EchoProvider)
    with pytest.raises(ConfigurationError, match=r'\["vllm"\]\["base_url"\]'):
        registry.get_provider("vllm")


def test_default_provider(clean_env, settings):
    settings.LLMCHAT = {"DEFAULT_PROVIDER": "ollama"}
    assert isinstance(registry.get_provider(), OllamaProvider)


def test_provider_classes_skips_what_does_not_import(monkeypatch):
    monkeypatch.setitem(registry.PROVIDERS, "broken", ".does_not_exist.Nope")
    classes = registry.provider_classes()
    assert "broken" not in classes
    assert classes["ollama"] is OllamaProvider
    for name, cls in classes.items():
        assert issubclass(cls, Provider)
        assert cls.capabilities is not None
        assert name


# -- on_retry ------------------------------------------------------------------------------


def test_on_retry_hears_each_retried_failure():
    heard: list[tuple[int | None, int]] = []

    def on_retry(error: ProviderError, number: int) -> None:
        heard.append((error.status, number))

    provider, sent, waits = echo(err(429), err(503), ok())
    provider.complete(REQUEST, on_retry=on_retry)
    assert heard == [(429, 1), (503, 2)]

    heard.clear()
    provider, sent, waits = echo(err(500), stream_ok("x"))
    list(provider.stream(REQUEST, on_retry=on_retry))
    assert heard == [(500, 1)]

    heard.clear()
    provider, sent, waits = aecho(err(502), ok(), err(502), stream_ok("y"))

    async def run():
        await provider.acomplete(REQUEST, on_retry=on_retry)
        return [e async for e in provider.astream(REQUEST, on_retry=on_retry)]

    asyncio.run(run())
    assert heard == [(502, 1), (502, 1)]

    heard.clear()
    provider, sent, waits = echo(err(401))
    with pytest.raises(AuthenticationError):
        provider.complete(REQUEST, on_retry=on_retry)
    assert heard == []


def test_clients_are_rebuilt_after_close_or_fork():
    provider = EchoProvider()
    first = provider.client
    close_clients()
    assert first.is_closed
    second = provider.client
    assert second is not first and not second.is_closed
    base._forget_clients_after_fork()  # what a forked worker runs
    assert provider.client is not second
    close_clients()
