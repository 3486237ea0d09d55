"""OpenTelemetry spans and metrics of runs, provider attempts and tool runs, named and
described after the OpenTelemetry GenAI semantic conventions.

Off unless ``LLMCHAT["OPENTELEMETRY"] = True`` (extra ``[otel]``: ``opentelemetry-api``):
then every run is a span ``invoke_agent {agent}`` (the parent), every provider attempt a
client span ``chat {model}`` (a summary request ``summarize {model}``), retried and failed
attempts included, and every tool run a span ``execute_tool {name}``, all on the global
tracer provider. ``gen_ai.conversation.id`` is the chat id, ``django_llmchat.run.id`` the
run. Message content and tool arguments and results are recorded only with
``LLMCHAT["OPENTELEMETRY_CONTENT"] = True``. The histograms ``gen_ai.client.token.usage``
and ``gen_ai.client.operation.duration`` go to the global meter provider.

The Celery task carries the trace context of the code that queued the run in its headers
(W3C ``traceparent``), so a worker's run continues the request's trace: a child of the
task's span when ``opentelemetry-instrumentation-celery`` makes one, else of the sender's.
A provider's HTTP requests are sent and read with the attempt's span current, so an
instrumented HTTP client's spans (``opentelemetry-instrumentation-httpx``) are its
children. ``gen_ai.response.id`` is the vendor's id of the answer; with content on,
``gen_ai.tool.definitions`` lists the tools offered.

When it is off every function here returns at once: no spans, no cost. When it is on,
the tracer and the histograms are looked up once per global provider (and again only
when the global provider changes); the attributes set as a span ends, and the content
(JSON) of the request, the answer and a tool's arguments and result, are built only when
the span is recording (sampled): metrics are recorded either way.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from functools import cache
from typing import Any

from .conf import settings

__all__ = [
    "current_context",
    "enabled",
    "extract",
    "inject",
    "task_context",
    "with_context",
]

SCOPE = "django_llmchat"

# gen_ai.provider.name of the semantic conventions, by the project's provider names
PROVIDER_NAMES = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "mistral": "mistral_ai",
    "xai": "x_ai",
    "deepseek": "deepseek",
    "perplexity": "perplexity",
    "groq": "groq",
}

RUN_ID = "django_llmchat.run.id"
RUN_STATUS = "django_llmchat.run.status"


def enabled() -> bool:
    return bool(settings.OPENTELEMETRY)


def _content() -> bool:
    return bool(settings.OPENTELEMETRY_CONTENT)


@cache
def _trace():
    from opentelemetry import trace

    return trace


@cache
def _context():
    from opentelemetry import context

    return context


@cache
def _metrics():
    from opentelemetry import metrics

    return metrics


# (the global tracer provider, django_llmchat's tracer from it): one lookup per provider
_tracer_of: tuple[Any, Any] = (None, None)


def _tracer():
    """django_llmchat's tracer from the global tracer provider, looked up once for each
    provider (a provider set later, replacing the API's proxy, gets a lookup of its own)."""
    global _tracer_of
    provider, tracer = _tracer_of
    current = _trace().get_tracer_provider()
    if current is not provider:
        from . import __version__

        tracer = current.get_tracer(SCOPE, __version__)
        _tracer_of = (current, tracer)
    return tracer


def provider_name(chat) -> str:
    return PROVIDER_NAMES.get(chat.provider, chat.provider)


# -- context: which trace a run belongs to -----------------------------------------------------
def current_context() -> Any:
    """The calling code's trace context (``None`` when off): a run started from here is a
    child of its current span."""
    if not enabled():
        return None
    return _context().get_current()


def inject(headers: MutableMapping[str, Any]) -> None:
    """Write the current trace context into ``headers`` (a task's message headers)."""
    if not enabled():
        return
    from opentelemetry import propagate

    propagate.inject(headers)


def extract(carrier: Any) -> Any:
    """The trace context ``inject`` wrote, read from a mapping or a Celery task request
    (whose custom headers are attributes); ``None`` when off or absent."""
    if not enabled() or carrier is None:
        return None
    from opentelemetry import propagate

    if not isinstance(carrier, Mapping):
        found: dict[str, Any] = {}
        extra = getattr(carrier, "headers", None) or {}
        for key in ("traceparent", "tracestate", "baggage"):
            value = getattr(carrier, key, None) or extra.get(key)
            if value:
                found[key] = value
        carrier = found
    if not carrier.get("traceparent"):
        return None
    return propagate.extract(carrier)


def task_context(request: Any) -> Any:
    """The trace context a worker's task runs its run in (``None``: the current one).

    With ``opentelemetry-instrumentation-celery`` the task's own span is current, itself
    a child of the span that sent the message: the run is its child. Without it, the
    context the message's headers carry (:func:`inject`), so the run still continues the
    sender's trace."""
    if not enabled():
        return None
    if _trace().get_current_span().get_span_context().is_valid:
        return None
    return extract(request)


@contextmanager
def with_context(ctx: Any) -> Iterator[None]:
    """Make ``ctx`` (from :func:`extract` or :func:`current_context`) current inside."""
    if ctx is None:
        yield
        return
    context = _context()
    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)


# -- spans -----------------------------------------------------------------------------------
def start_run(runner, parent: Any) -> Any:
    """The span of a run (not made current: the run's generator yields to its caller
    between events); the runner keeps its context for the attempts and tool runs."""
    if not enabled():
        return None
    trace = _trace()
    chat, run = runner.chat, runner.run_row
    agent = runner.agent.name if runner.agent is not None else None
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": provider_name(chat),
        "gen_ai.request.model": chat.model_id,
        "gen_ai.conversation.id": str(chat.pk),
        RUN_ID: str(run.pk),
    }
    if agent:
        attributes["gen_ai.agent.name"] = agent
    span = _tracer().start_span(
        f"invoke_agent {agent}" if agent else "invoke_agent",
        context=parent,
        kind=trace.SpanKind.INTERNAL,
        attributes=attributes,
    )
    runner.trace_context = trace.set_span_in_context(span, parent)
    return span


def end_run(span: Any, status: str | None, error_type: str | None = None) -> None:
    if span is None:
        return
    if span.is_recording():
        if status in ("failed", "retrying"):
            trace = _trace()
            span.set_attributes({RUN_STATUS: status, "error.type": error_type or "error"})
            span.set_status(trace.Status(trace.StatusCode.ERROR, error_type or status))
        else:
            span.set_attribute(RUN_STATUS, status or "unknown")
    span.end()


_REQUEST_PARAMS = (
    ("temperature", "gen_ai.request.temperature"),
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("top_p", "gen_ai.request.top_p"),
)


def start_attempt(runner, request, provider: str, model_id: str, operation: str) -> Any:
    """The client span of one provider attempt, a child of the run's."""
    if not enabled():
        return None
    trace = _trace()
    chat = runner.chat
    name = "summarize" if operation == "summary" else "chat"
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER_NAMES.get(provider, provider),
        "gen_ai.request.model": model_id,
        "gen_ai.conversation.id": str(chat.pk),
    }
    execution = getattr(runner, "execution", None)
    if execution is not None:
        attributes[RUN_ID] = str(execution.pk)
    params = getattr(request, "params", None)
    if params:
        for key, attribute in _REQUEST_PARAMS:
            value = params.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[attribute] = value
    parent = getattr(runner, "trace_context", None)
    span = _tracer().start_span(
        f"{name} {model_id}", context=parent, kind=trace.SpanKind.CLIENT, attributes=attributes
    )
    if _content() and span.is_recording():  # no JSON for a span no one keeps
        _request_content(span, request)
    attempt = _Attempt(span, time.monotonic(), request)
    # the provider sends (and reads) its HTTP requests in this context: an instrumented
    # client's spans (opentelemetry-instrumentation-httpx) are children of this one
    attempt.context = trace.set_span_in_context(span, parent)
    if hasattr(request, "trace_context"):
        request.trace_context = attempt.context
    return attempt


def _request_content(span: Any, request) -> None:
    """The request's messages and the tools it offers, as the conventions' JSON."""
    content = {
        "gen_ai.input.messages": json.dumps(
            [_message(m) for m in request.messages], ensure_ascii=False
        )
    }
    tools = getattr(request, "tools", None)
    if tools:
        content["gen_ai.tool.definitions"] = json.dumps(
            [_tool_definition(tool) for tool in tools], ensure_ascii=False
        )
    span.set_attributes(content)


class _Attempt:
    __slots__ = ("context", "request", "span", "started")

    def __init__(self, span: Any, started: float, request: Any = None):
        self.span, self.started, self.request = span, started, request
        self.context: Any = None


def end_attempt(attempt: _Attempt | None, row, response=None) -> None:
    """End an attempt's span with what its usage row says (status, tokens, error)."""
    if attempt is None:
        return
    request = attempt.request
    if getattr(request, "trace_context", None) is attempt.context:
        request.trace_context = None  # the next attempt (a retry) sets its own
    span = attempt.span
    tokens = row.tokens
    inputs = [tokens.input_tokens, tokens.cache_read_tokens, tokens.cache_write_tokens]
    known = [n for n in inputs if n is not None]
    # the conventions count cached prompt tokens as input
    input_tokens = sum(known) if known else None
    error_type = None
    if row.status != "succeeded":
        error_type = "cancelled" if row.status == "cancelled" else _error_type(row)
    if span.is_recording():  # a sampled-out span: nothing to set, the metrics still count
        span.set_attributes(_ended_attributes(row, tokens, input_tokens, response, error_type))
        if error_type is not None and row.status != "cancelled":
            trace = _trace()
            span.set_status(trace.Status(trace.StatusCode.ERROR, error_type))
    _record_metrics(attempt, row, input_tokens, tokens.output_tokens, error_type)
    span.end()


def _ended_attributes(row, tokens, input_tokens, response, error_type) -> dict[str, Any]:
    """The attributes an attempt's span gets as it ends."""
    attributes: dict[str, Any] = {}
    if input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = input_tokens
    if tokens.output_tokens is not None:
        attributes["gen_ai.usage.output_tokens"] = tokens.output_tokens
    if tokens.cache_read_tokens is not None:
        attributes["gen_ai.usage.cache_read.input_tokens"] = tokens.cache_read_tokens
    if tokens.cache_write_tokens is not None:
        attributes["gen_ai.usage.cache_creation.input_tokens"] = tokens.cache_write_tokens
    if row.model_id:
        attributes["gen_ai.response.model"] = row.model_id
    if response is not None:
        attributes["gen_ai.response.finish_reasons"] = [response.finish_reason]
        response_id = getattr(response, "response_id", None)
        if response_id:
            attributes["gen_ai.response.id"] = response_id
        if _content():
            attributes["gen_ai.output.messages"] = json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": response.content}]}],
                ensure_ascii=False,
            )
    attributes["django_llmchat.usage.status"] = row.status
    if error_type is not None:
        attributes["error.type"] = error_type
    return attributes


def _error_type(row) -> str:
    """A low-cardinality kind of a failed attempt (never its text)."""
    error = row.error or ""
    for kind in ("rate_limited", "timeout", "context_length", "auth", "overloaded"):
        if kind in error:
            return kind
    head = error.split(":", 1)[0].strip()
    return head if head.isidentifier() else "provider_error"


@contextmanager
def tool_span(runner, call, result_of) -> Iterator[None]:
    """The span of one tool run, current while the tool runs (its own spans nest in it);
    ``result_of()`` gives the result once it ran."""
    if not enabled():
        yield
        return
    trace = _trace()
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.call_id,
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": str(runner.chat.pk),
    }
    span = _tracer().start_span(
        f"execute_tool {call.name}",
        context=getattr(runner, "trace_context", None),
        kind=trace.SpanKind.INTERNAL,
        attributes=attributes,
    )
    content = _content() and span.is_recording()  # no JSON for a span no one keeps
    if content:
        span.set_attribute(
            "gen_ai.tool.call.arguments", json.dumps(call.arguments, ensure_ascii=False)
        )
    try:
        with trace.use_span(span, end_on_exit=False, record_exception=True):
            yield
    except BaseException as exc:
        span.set_attribute("error.type", type(exc).__name__)
        span.end()
        raise
    result = result_of()
    if result is not None:
        if result.is_error:
            kind = result.error_type or "error"
            span.set_attribute("error.type", kind)
            span.set_status(trace.Status(trace.StatusCode.ERROR, kind))
        if content:  # the text the tool message stores: bounded, never raising
            from .loop.steps import checked_result

            span.set_attribute("gen_ai.tool.call.result", checked_result(call.name, result).text)
    span.end()


def _tool_definition(tool) -> dict[str, Any]:
    """A tool as ``gen_ai.tool.definitions`` lists it (the conventions' shape)."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
    }


def _message(m) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if m.content:
        parts.append({"type": "text", "content": m.content})
    for call in getattr(m, "tool_calls", None) or []:
        parts.append(
            {
                "type": "tool_call",
                "id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            }
        )
    return {"role": m.role, "parts": parts}


# -- metrics ---------------------------------------------------------------------------------
# (the global meter provider, its two histograms): created once per provider
_instruments_of: tuple[Any, dict[str, Any]] = (None, {})
# the attributes of the points, by (provider, model, error type): built once each
_metric_attributes: dict[tuple[str, str, str | None], tuple[dict, dict, dict]] = {}
_METRIC_ATTRIBUTES_KEPT = 256


def _histograms() -> dict[str, Any]:
    """The histograms on the global meter provider, created once for each provider (a
    provider set later, replacing the API's proxy, gets histograms of its own)."""
    global _instruments_of
    provider, instruments = _instruments_of
    current = _metrics().get_meter_provider()
    if current is not provider:
        from . import __version__

        meter = current.get_meter(SCOPE, __version__)
        instruments = {
            "tokens": meter.create_histogram(
                "gen_ai.client.token.usage", unit="{token}", description="Tokens per attempt"
            ),
            "duration": meter.create_histogram(
                "gen_ai.client.operation.duration", unit="s", description="Attempt duration"
            ),
        }
        _instruments_of = (current, instruments)
    return instruments


def _point_attributes(provider: str, model_id: str, error_type: str | None):
    """(duration, input tokens, output tokens) attributes of an attempt's points."""
    key = (provider, model_id, error_type)
    found = _metric_attributes.get(key)
    if found is None:
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER_NAMES.get(provider, provider),
            "gen_ai.request.model": model_id,
        }
        duration = {**attributes, **({"error.type": error_type} if error_type else {})}
        found = (
            duration,
            {**attributes, "gen_ai.token.type": "input"},
            {**attributes, "gen_ai.token.type": "output"},
        )
        if len(_metric_attributes) >= _METRIC_ATTRIBUTES_KEPT:
            _metric_attributes.clear()  # many models or kinds of error: start over
        _metric_attributes[key] = found
    return found


def _record_metrics(
    attempt: _Attempt,
    row,
    input_tokens: int | None,
    output_tokens: int | None,
    error_type: str | None,
) -> None:
    instruments = _histograms()
    duration, inputs, outputs = _point_attributes(row.provider, row.model_id, error_type)
    instruments["duration"].record(time.monotonic() - attempt.started, duration)
    if input_tokens is not None:
        instruments["tokens"].record(input_tokens, inputs)
    if output_tokens is not None:
        instruments["tokens"].record(output_tokens, outputs)
