"""OpenTelemetry (django_llmchat.telemetry), with the SDK's in-memory exporter: span names
and GenAI attributes, parenting (run > attempt, run > tool > the tool's own spans), retries
and failures, no content unless asked, metrics, and nothing at all when off."""

from __future__ import annotations

import json

import pytest
from django.core.checks import run_checks
from django.test import override_settings
from opentelemetry import trace

from django_llmchat.errors import ProviderError
from django_llmchat.models import Chat
from django_llmchat.tasks import wait_for_background_runs
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing import ToolCall as Call
from django_llmchat.tools import tool
from tests.otel import install

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gpt-4.1-mini"
USAGE = {"input_tokens": 12, "output_tokens": 5, "cache_read_tokens": 3}


@pytest.fixture
def spans():
    exporter, _reader = install()
    exporter.clear()
    yield exporter
    exporter.clear()


@pytest.fixture
def otel(fake_llm, spans):
    """The fake provider configured with OpenTelemetry on; ``otel(**more)`` adds settings."""

    def configure(**more):
        fake_llm.configure("openai", MODEL, OPENTELEMETRY=True, MAX_RETRIES=1, **more)

    configure()
    return configure


@tool
def city_weather(city: str) -> str:
    """Looks a city up"""
    with trace.get_tracer("tests").start_as_current_span("geocoder"):
        return f"{city}: 21 C"


def by_name(spans) -> dict:
    return {s.name: s for s in spans.get_finished_spans()}


def test_off_by_default_no_spans(fake_llm, spans):
    fake_llm.configure("openai", MODEL)
    fake_llm.script("Hi.")
    Chat.objects.create(provider="openai", model_id=MODEL).ask("Hello")
    assert spans.get_finished_spans() == ()


def test_a_reply_is_a_run_span_with_a_chat_span_inside(otel, spans, fake_llm):
    fake_llm.script(Reply("Hi.", usage=USAGE))
    chat = Chat.objects.create(provider="openai", model_id=MODEL)
    chat.ask("Hello")
    found = by_name(spans)
    assert set(found) == {"invoke_agent", f"chat {MODEL}"}
    run, call = found["invoke_agent"], found[f"chat {MODEL}"]
    assert call.parent.span_id == run.context.span_id and run.parent is None
    assert call.kind == trace.SpanKind.CLIENT
    attributes = dict(call.attributes)
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == MODEL
    assert attributes["gen_ai.conversation.id"] == str(chat.pk)
    assert attributes["django_llmchat.run.id"] == str(chat.last_run.pk)
    # the conventions count cached prompt tokens as input
    assert attributes["gen_ai.usage.input_tokens"] == 12 + 3
    assert attributes["gen_ai.usage.output_tokens"] == 5
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 3
    assert list(attributes["gen_ai.response.finish_reasons"]) == ["stop"]
    assert dict(run.attributes)["django_llmchat.run.status"] == "succeeded"
    assert run.status.status_code == trace.StatusCode.UNSET
    # no content unless asked for
    everything = json.dumps([dict(s.attributes) for s in spans.get_finished_spans()])
    assert "Hello" not in everything and "Hi." not in everything


def test_the_requests_sampling_parameters_are_attributes(otel, spans, fake_llm):
    fake_llm.script("Hi.")
    chat = Chat.objects.create(provider="openai", model_id=MODEL)
    chat.with_temperature(0.2).with_params(max_tokens=100, top_p=0.9).ask("Hello")
    attributes = dict(by_name(spans)[f"chat {MODEL}"].attributes)
    assert attributes["gen_ai.request.temperature"] == 0.2
    assert attributes["gen_ai.request.max_tokens"] == 100
    assert attributes["gen_ai.request.top_p"] == 0.9


def test_a_tool_run_nests_in_the_run_and_the_tools_own_spans_in_it(otel, spans, fake_llm):
    fake_llm.script(
        Reply(tool_calls=[Call("city_weather", {"city": "Oslo"}, call_id="c1")]), "Warm."
    )
    chat = Chat.objects.create(provider="openai", model_id=MODEL).with_tools(city_weather)
    chat.ask("Weather?")
    finished = spans.get_finished_spans()
    found = by_name(spans)
    run, tool_span = found["invoke_agent"], found["execute_tool city_weather"]
    assert [s.name for s in finished].count(f"chat {MODEL}") == 2
    assert tool_span.parent.span_id == run.context.span_id
    assert found["geocoder"].parent.span_id == tool_span.context.span_id
    attributes = dict(tool_span.attributes)
    assert attributes["gen_ai.tool.name"] == "city_weather"
    assert attributes["gen_ai.tool.call.id"] == "c1"
    assert "gen_ai.tool.call.arguments" not in attributes


def test_a_retried_attempt_is_a_failed_span_of_its_own(otel, spans, fake_llm):
    fake_llm.script(Fault(status=500), Reply("Hi."))
    Chat.objects.create(provider="openai", model_id=MODEL).ask("Hello")
    calls = [s for s in spans.get_finished_spans() if s.name == f"chat {MODEL}"]
    assert len(calls) == 2
    failed, succeeded = calls
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert dict(failed.attributes)["error.type"]
    assert dict(failed.attributes)["django_llmchat.usage.status"] == "failed"
    assert succeeded.status.status_code == trace.StatusCode.UNSET


def test_a_failed_run_marks_its_span(otel, spans, fake_llm):
    fake_llm.script(Fault(status=400))
    with pytest.raises(ProviderError):
        Chat.objects.create(provider="openai", model_id=MODEL).ask("Hello")
    run = by_name(spans)["invoke_agent"]
    assert run.status.status_code == trace.StatusCode.ERROR
    assert dict(run.attributes)["django_llmchat.run.status"] == "failed"
    assert dict(run.attributes)["error.type"]


def test_content_only_when_asked(otel, spans, fake_llm):
    otel(OPENTELEMETRY_CONTENT=True)
    fake_llm.script(
        Reply(tool_calls=[Call("city_weather", {"city": "Oslo"}, call_id="c1")]), "Warm."
    )
    Chat.objects.create(provider="openai", model_id=MODEL).with_tools(city_weather).ask("Weather?")
    found = by_name(spans)
    call = [s for s in spans.get_finished_spans() if s.name == f"chat {MODEL}"][0]
    messages = json.loads(dict(call.attributes)["gen_ai.input.messages"])
    assert messages[-1] == {"role": "user", "parts": [{"type": "text", "content": "Weather?"}]}
    tool_attributes = dict(found["execute_tool city_weather"].attributes)
    assert json.loads(tool_attributes["gen_ai.tool.call.arguments"]) == {"city": "Oslo"}
    assert tool_attributes["gen_ai.tool.call.result"] == "Oslo: 21 C"


def test_a_run_queued_in_a_request_continues_its_trace_in_the_thread(otel, spans, fake_llm):
    fake_llm.script("Later.")
    chat = Chat.objects.create(provider="openai", model_id=MODEL)
    with trace.get_tracer("tests").start_as_current_span("POST /messages") as request:
        chat.ask_later("Hello")
    assert wait_for_background_runs(30)
    run = by_name(spans)["invoke_agent"]
    assert run.context.trace_id == request.get_span_context().trace_id
    assert run.parent.span_id == request.get_span_context().span_id


def test_metrics_count_tokens_and_durations(otel, fake_llm):
    _exporter, reader = install()
    fake_llm.script(Reply("Hi.", usage=USAGE))
    Chat.objects.create(provider="openai", model_id=MODEL).ask("Hello")
    data = reader.get_metrics_data()
    points = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            if scope.scope.name != "django_llmchat":
                continue
            for metric in scope.metrics:
                points[metric.name] = list(metric.data.data_points)
    assert {"gen_ai.client.token.usage", "gen_ai.client.operation.duration"} <= set(points)
    types = {dict(p.attributes)["gen_ai.token.type"] for p in points["gen_ai.client.token.usage"]}
    assert types == {"input", "output"}


def test_the_setting_is_checked():
    with override_settings(LLMCHAT={"OPENTELEMETRY": "yes"}):
        ids = {e.id for e in run_checks(databases=[])}
    assert "llmchat.E031" in ids


def test_a_task_runs_under_the_task_span_when_one_is_current_else_the_senders(otel):
    from types import SimpleNamespace

    from django_llmchat import telemetry

    tracer = trace.get_tracer("tests")
    headers: dict = {}
    with tracer.start_as_current_span("enqueue") as enqueue:
        telemetry.inject(headers)
    request = SimpleNamespace(**headers)  # a Celery task request: its headers as attributes
    # no task span (no Celery instrumentation): the context the message carries
    sent = trace.get_current_span(telemetry.task_context(request)).get_span_context()
    assert (sent.trace_id, sent.span_id) == (enqueue.context.trace_id, enqueue.context.span_id)
    # the instrumentation's task span is current: the run stays in it
    with tracer.start_as_current_span("run/complete_chat"):
        assert telemetry.task_context(request) is None
    with override_settings(LLMCHAT={"OPENTELEMETRY": False}):
        assert telemetry.task_context(request) is None


# -- what a span no one keeps costs, and what is looked up once --------------------------------
UNSAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"  # flags 00: not sampled


def points(reader, name: str) -> int:
    """How many measurements django_llmchat's histogram ``name`` has counted so far."""
    counted = 0
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            if scope.scope.name == "django_llmchat":
                for metric in scope.metrics:
                    if metric.name == name:
                        counted += sum(p.count for p in metric.data.data_points)
    return counted


def test_a_run_under_an_unsampled_parent_makes_no_spans_and_still_counts(otel, spans, fake_llm):
    from django_llmchat import telemetry

    otel(OPENTELEMETRY_CONTENT=True)
    _exporter, reader = install()
    before = points(reader, "gen_ai.client.operation.duration")
    fake_llm.script(
        Reply(tool_calls=[Call("city_weather", {"city": "Oslo"}, call_id="c1")]),
        Reply("Warm.", usage=USAGE),
    )
    chat = Chat.objects.create(provider="openai", model_id=MODEL).with_tools(city_weather)
    with telemetry.with_context(telemetry.extract({"traceparent": UNSAMPLED})):
        chat.ask("Weather?")
    assert chat.last_run.status == "succeeded"
    # the sampler dropped the run, so every span in it (the tool's own "geocoder" too)
    assert spans.get_finished_spans() == ()
    # the two attempts are counted all the same: metrics do not follow sampling
    assert points(reader, "gen_ai.client.operation.duration") == before + 2


class Unwritable:
    """A value ``json.dumps`` cannot write: building the content JSON of it raises."""


def test_a_span_no_one_keeps_gets_no_content_built(otel):
    from types import SimpleNamespace

    from django_llmchat import telemetry
    from django_llmchat.models import Usage
    from django_llmchat.providers.types import ProviderMessage, ProviderRequest, ProviderResponse

    otel(OPENTELEMETRY_CONTENT=True)
    chat = Chat.objects.create(provider="openai", model_id=MODEL)
    request = ProviderRequest(MODEL, [ProviderMessage("user", Unwritable())])
    answer = ProviderResponse(content=Unwritable())
    row = Usage(chat=chat, provider="openai", model_id=MODEL, status="succeeded")
    unsampled = telemetry.extract({"traceparent": UNSAMPLED})
    runner = SimpleNamespace(chat=chat, execution=None, trace_context=unsampled)
    attempt = telemetry.start_attempt(runner, request, "openai", MODEL, "chat")
    assert not attempt.span.is_recording()
    telemetry.end_attempt(attempt, row, answer)  # nothing written: nothing raised
    # a span that records does write the request (and so fails on it)
    runner.trace_context = None
    with pytest.raises(TypeError):
        telemetry.start_attempt(runner, request, "openai", MODEL, "chat")


def test_the_tracer_and_the_histograms_are_looked_up_once(otel, spans):
    from django_llmchat import __version__, telemetry

    # one tracer and one pair of histograms, on the global providers, reused by every call
    assert telemetry._tracer() is telemetry._tracer()
    assert telemetry._histograms() is telemetry._histograms()
    telemetry._tracer().start_span("chat m").end()
    (span,) = spans.get_finished_spans()
    assert (span.instrumentation_scope.name, span.instrumentation_scope.version) == (
        "django_llmchat",
        __version__,
    )


FOLLOWS_THE_PROVIDER = """
import django
from django.conf import settings
settings.configure(LLMCHAT={"OPENTELEMETRY": True})
django.setup()
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from django_llmchat import telemetry

early_tracer, early_histograms = telemetry._tracer(), telemetry._histograms()
exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

tracer, histograms = telemetry._tracer(), telemetry._histograms()
assert tracer is not early_tracer and tracer is telemetry._tracer()
assert histograms is not early_histograms and histograms is telemetry._histograms()
tracer.start_span("chat m").end()
(span,) = exporter.get_finished_spans()
assert span.instrumentation_scope.name == "django_llmchat", span.instrumentation_scope
histograms["duration"].record(0.5, {"gen_ai.operation.name": "chat"})
names = [
    (scope.scope.name, metric.name)
    for resource in reader.get_metrics_data().resource_metrics
    for scope in resource.scope_metrics
    for metric in scope.metrics
]
assert names == [("django_llmchat", "gen_ai.client.operation.duration")], names
print("followed")
"""


def test_a_provider_set_after_the_first_lookup_is_followed():
    """The tracer and histograms looked up before the application set its providers
    (the API's proxies) are looked up again on the providers set later."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", FOLLOWS_THE_PROVIDER],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "followed"
