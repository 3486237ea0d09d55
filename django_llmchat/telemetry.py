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

When it is off every function here returns at once: no spans, no cost.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
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


def _trace():
    from opentelemetry import trace

    return trace


def _tracer():
    from . import __version__

    return _trace().get_tracer(SCOPE, __version__)


def provider_name(chat) -> str:
    return PROVIDER_NAMES.get(chat.provider, chat.provider)


# -- context: which trace a run belongs to -----------------------------------------------------
def current_context() -> Any:
    """The calling code's trace context (``None`` when off): a run started from here is a
    child of its current span."""
    if not enabled():
        return None
    from opentelemetry import context

    return context.get_current()


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
    from opentelemetry import context

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
    trace = _trace()
    span.set_attribute(RUN_STATUS, status or "unknown")
    if status in ("failed", "retrying"):
        span.set_attribute("error.type", error_type or "error")
        span.set_status(trace.Status(trace.StatusCode.ERROR, error_type or status))
    span.end()


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
    params = getattr(request, "params", None) or {}
    for key, attribute in (
        ("temperature", "gen_ai.request.temperature"),
        ("max_tokens", "gen_ai.request.max_tokens"),
        ("top_p", "gen_ai.request.top_p"),
    ):
        if isinstance(params.get(key), int | float) and not isinstance(params[key], bool):
            attributes[attribute] = params[key]
    if _content():
        attributes["gen_ai.input.messages"] = json.dumps(
            [_message(m) for m in request.messages], ensure_ascii=False
        )
        tools = getattr(request, "tools", None)
        if tools:
            attributes["gen_ai.tool.definitions"] = json.dumps(
                [_tool_definition(tool) for tool in tools], ensure_ascii=False
            )
    parent = getattr(runner, "trace_context", None)
    span = _tracer().start_span(
        f"{name} {model_id}", context=parent, kind=trace.SpanKind.CLIENT, attributes=attributes
    )
    attempt = _Attempt(span, time.monotonic(), request)
    # the provider sends (and reads) its HTTP requests in this context: an instrumented
    # client's spans (opentelemetry-instrumentation-httpx) are children of this one
    attempt.context = trace.set_span_in_context(span, parent)
    if hasattr(request, "trace_context"):
        request.trace_context = attempt.context
    return attempt


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
    trace = _trace()
    span = attempt.span
    tokens = row.tokens
    inputs = [tokens.input_tokens, tokens.cache_read_tokens, tokens.cache_write_tokens]
    known = [n for n in inputs if n is not None]
    if known:  # the conventions count cached prompt tokens as input
        span.set_attribute("gen_ai.usage.input_tokens", sum(known))
    if tokens.output_tokens is not None:
        span.set_attribute("gen_ai.usage.output_tokens", tokens.output_tokens)
    if tokens.cache_read_tokens is not None:
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", tokens.cache_read_tokens)
    if tokens.cache_write_tokens is not None:
        span.set_attribute("gen_ai.usage.cache_creation.input_tokens", tokens.cache_write_tokens)
    if row.model_id:
        span.set_attribute("gen_ai.response.model", row.model_id)
    if response is not None:
        span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
        response_id = getattr(response, "response_id", None)
        if response_id:
            span.set_attribute("gen_ai.response.id", response_id)
        if _content():
            span.set_attribute(
                "gen_ai.output.messages",
                json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": response.content}],
                        }
                    ],
                    ensure_ascii=False,
                ),
            )
    span.set_attribute("django_llmchat.usage.status", row.status)
    error_type = None
    if row.status not in ("succeeded",):
        error_type = "cancelled" if row.status == "cancelled" else _error_type(row)
        span.set_attribute("error.type", error_type)
        if row.status != "cancelled":
            span.set_status(trace.Status(trace.StatusCode.ERROR, error_type))
    _record_metrics(attempt, row, error_type)
    span.end()


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
    if _content():
        attributes["gen_ai.tool.call.arguments"] = json.dumps(call.arguments, ensure_ascii=False)
    span = _tracer().start_span(
        f"execute_tool {call.name}",
        context=getattr(runner, "trace_context", None),
        kind=trace.SpanKind.INTERNAL,
        attributes=attributes,
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
        if _content():  # the text the tool message stores: bounded, never raising
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
_instruments: dict[str, Any] = {}


def _histograms():
    if not _instruments:
        from opentelemetry import metrics

        from . import __version__

        meter = metrics.get_meter(SCOPE, __version__)
        _instruments["tokens"] = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens per attempt"
        )
        _instruments["duration"] = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Attempt duration"
        )
    return _instruments


def _record_metrics(attempt: _Attempt, row, error_type: str | None) -> None:
    instruments = _histograms()
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER_NAMES.get(row.provider, row.provider),
        "gen_ai.request.model": row.model_id,
    }
    duration = {**attributes, **({"error.type": error_type} if error_type else {})}
    instruments["duration"].record(time.monotonic() - attempt.started, duration)
    tokens = row.tokens
    inputs = [tokens.input_tokens, tokens.cache_read_tokens, tokens.cache_write_tokens]
    known = [n for n in inputs if n is not None]
    if known:
        instruments["tokens"].record(sum(known), {**attributes, "gen_ai.token.type": "input"})
    if tokens.output_tokens is not None:
        instruments["tokens"].record(
            tokens.output_tokens, {**attributes, "gen_ai.token.type": "output"}
        )
