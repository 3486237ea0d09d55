"""A provider's HTTP requests in the trace: with ``opentelemetry-instrumentation-httpx`` on,
each attempt's HTTP span is a child of its ``chat {model}`` span (whole answers, streams,
async streams, retries), the body is read with that span current, ``gen_ai.response.id``
is the vendor's id, ``gen_ai.tool.definitions`` is recorded with content only, and with
telemetry off nothing is attached."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from opentelemetry import trace

from django_llmchat.models import Chat
from django_llmchat.providers.openai_chat import OpenAIChatProvider
from django_llmchat.providers.types import ProviderMessage, ProviderRequest
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing import ToolCall as Call
from django_llmchat.tools import tool
from tests.conftest import import_or_unavailable
from tests.otel import install

import_or_unavailable("opentelemetry.instrumentation.httpx")

pytestmark = pytest.mark.django_db(transaction=True)

MODELS = {
    "openai": "gpt-4.1-mini",  # the Responses API
    "mistral": "mistral-small-latest",  # Chat Completions
    "anthropic": "claude-haiku-4-5",
    "gemini": "gemini-2.5-flash",
}


@pytest.fixture
def spans():
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    exporter, _reader = install()
    exporter.clear()
    instrumentor = HTTPXClientInstrumentor()
    instrumentor.instrument()
    yield exporter
    instrumentor.uninstrument()
    exporter.clear()


def http_spans(spans) -> list:
    return [s for s in spans.get_finished_spans() if s.name == "POST"]


def status_of(http) -> int:
    """The HTTP status on an httpx span (named after the semantic conventions in force)."""
    attributes = dict(http.attributes)
    return attributes.get("http.response.status_code", attributes.get("http.status_code"))


@tool
def traced_lookup(city: str) -> str:
    """Looks a city up"""
    return f"{city}: 21 C"


def answer(chat: Chat, mode: str) -> None:
    if mode == "ask":
        chat.ask("Hello")
    elif mode == "stream":
        list(chat.stream("Hello"))
    else:

        async def consume():
            return [event async for event in chat.astream("Hello")]

        asyncio.run(consume())


@pytest.mark.parametrize("mode", ["ask", "stream", "astream"])
@pytest.mark.parametrize("provider", list(MODELS))
def test_the_http_span_is_a_child_of_its_attempt(fake_llm, spans, provider, mode):
    model = MODELS[provider]
    fake_llm.configure(provider, model, OPENTELEMETRY=True)
    fake_llm.script(Reply("Hi.", response_id=f"id-{provider}-{mode}"))
    chat = Chat.objects.create(provider=provider, model_id=model)
    with trace.get_tracer("tests").start_as_current_span("POST /ask") as request:
        answer(chat, mode)
    found = {s.name: s for s in spans.get_finished_spans()}
    run, call = found["invoke_agent"], found[f"chat {model}"]
    (http,) = http_spans(spans)
    assert run.parent.span_id == request.get_span_context().span_id
    assert call.parent.span_id == run.context.span_id
    assert http.parent.span_id == call.context.span_id
    trace_id = request.get_span_context().trace_id
    assert {s.context.trace_id for s in (run, call, http)} == {trace_id}
    assert http.kind == trace.SpanKind.CLIENT
    assert status_of(http) == 200
    assert dict(call.attributes)["gen_ai.response.id"] == f"id-{provider}-{mode}"


@pytest.mark.parametrize("mode", ["ask", "stream"])
def test_each_retried_attempt_has_its_own_http_span(fake_llm, spans, mode):
    fake_llm.configure("openai", MODELS["openai"], OPENTELEMETRY=True, MAX_RETRIES=2)
    fake_llm.script(Fault(status=500), Fault(status=503), Reply("Hi.", response_id="resp_3"))
    answer(Chat.objects.create(provider="openai", model_id=MODELS["openai"]), mode)
    calls = [s for s in spans.get_finished_spans() if s.name.startswith("chat ")]
    https = http_spans(spans)
    assert len(calls) == len(https) == 3
    for call, http in zip(calls, https, strict=True):
        assert http.parent.span_id == call.context.span_id
    statuses = [status_of(h) for h in https]
    assert statuses == [500, 503, 200]
    assert [dict(c.attributes).get("gen_ai.response.id") for c in calls] == [None, None, "resp_3"]


def test_the_tools_offered_are_recorded_with_content_only(fake_llm, spans):
    model = MODELS["openai"]
    fake_llm.configure("openai", model, OPENTELEMETRY=True)
    fake_llm.script(
        Reply(tool_calls=[Call("traced_lookup", {"city": "Oslo"}, call_id="c1")]), "Warm."
    )
    Chat.objects.create(provider="openai", model_id=model).with_tools(traced_lookup).ask("Weather?")
    calls = [s for s in spans.get_finished_spans() if s.name == f"chat {model}"]
    assert len(calls) == 2
    assert all("gen_ai.tool.definitions" not in c.attributes for c in calls)

    spans.clear()
    fake_llm.configure("openai", model, OPENTELEMETRY=True, OPENTELEMETRY_CONTENT=True)
    fake_llm.script(
        Reply(tool_calls=[Call("traced_lookup", {"city": "Oslo"}, call_id="c1")]), "Warm."
    )
    Chat.objects.create(provider="openai", model_id=model).with_tools(traced_lookup).ask("Weather?")
    call = [s for s in spans.get_finished_spans() if s.name == f"chat {model}"][0]
    (definition,) = json.loads(dict(call.attributes)["gen_ai.tool.definitions"])
    assert definition["type"] == "function" and definition["name"] == "traced_lookup"
    assert definition["description"] == "Looks a city up"
    assert definition["parameters"]["properties"]["city"]["type"] == "string"


def test_off_the_http_span_stays_where_the_caller_is(fake_llm, spans):
    fake_llm.configure("openai", MODELS["openai"])
    fake_llm.script("Hi.")
    with trace.get_tracer("tests").start_as_current_span("POST /ask") as request:
        list(Chat.objects.create(provider="openai", model_id=MODELS["openai"]).stream("Hello"))
    (http,) = http_spans(spans)
    assert http.parent.span_id == request.get_span_context().span_id
    assert [s.name for s in spans.get_finished_spans()] == ["POST", "POST /ask"]


class Recording(httpx.SyncByteStream):
    """A streamed body that notes the current span as each piece is read."""

    def __init__(self, pieces: list[bytes]):
        self.pieces, self.seen = pieces, []

    def __iter__(self):
        for piece in self.pieces:
            self.seen.append(trace.get_current_span())
            yield piece


def test_a_stream_is_read_in_its_attempts_context_and_only_then(spans):
    chunk = {"id": "chatcmpl-1", "model": "m", "choices": [{"index": 0, "delta": {}}]}
    frames = [
        {**chunk, "choices": [{"index": 0, "delta": {"content": "Hi"}}]},
        {**chunk, "choices": [{"index": 0, "delta": {"content": " there"}}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    body = Recording(
        [f"data: {json.dumps(f)}\n\n".encode() for f in frames] + [b"data: [DONE]\n\n"]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    provider = OpenAIChatProvider(api_key="k", transport=httpx.MockTransport(handler))
    tracer = trace.get_tracer("tests")
    attempt = tracer.start_span("chat m")
    request = ProviderRequest("m", [ProviderMessage("user", "Hi")])
    request.trace_context = trace.set_span_in_context(attempt)
    between = []
    with tracer.start_as_current_span("caller") as caller:
        stream = provider.stream(request)
        for _event in stream:
            between.append(trace.get_current_span())
    attempt.end()
    assert len(body.seen) == 4 and all(span is attempt for span in body.seen)
    assert between and all(span is caller for span in between)
    assert stream.response.response_id == "chatcmpl-1"
