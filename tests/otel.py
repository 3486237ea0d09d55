"""OpenTelemetry for the tests: one SDK tracer and meter provider per process (the global
providers can be set once), spans kept in memory or, for worker processes, written to a
JSON-lines file a test reads back."""

from __future__ import annotations

import json
import os
import threading

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_lock = threading.Lock()
_installed: dict = {}


def install() -> tuple[InMemorySpanExporter, InMemoryMetricReader]:
    """The process's in-memory span exporter and metric reader (installed once)."""
    with _lock:
        if not _installed:
            exporter = InMemorySpanExporter()
            provider = trace.get_tracer_provider()
            if not isinstance(provider, TracerProvider):  # the global one is set once
                provider = TracerProvider()
                trace.set_tracer_provider(provider)
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            reader = InMemoryMetricReader()
            metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
            _installed.update(exporter=exporter, reader=reader)
        return _installed["exporter"], _installed["reader"]


class JSONLinesExporter(SpanExporter):
    """Each ended span as one JSON line (name, ids, parent, attributes, status)."""

    def __init__(self, path: str):
        self.path = path

    def export(self, spans) -> SpanExportResult:
        with _lock, open(self.path, "a", encoding="utf-8") as out:
            for span in spans:
                out.write(json.dumps(as_dict(span)) + "\n")
        return SpanExportResult.SUCCESS


def as_dict(span) -> dict:
    context, parent = span.get_span_context(), span.parent
    return {
        "name": span.name,
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
        "parent_id": format(parent.span_id, "016x") if parent is not None else None,
        "attributes": {
            k: (list(v) if isinstance(v, tuple) else v) for k, v in span.attributes.items()
        },
        "status": span.status.status_code.name,
    }


def install_file_exporter() -> None:
    """In a worker process: spans to the file named by ``LLMCHAT_TEST_SPANS``."""
    path = os.environ.get("LLMCHAT_TEST_SPANS")
    if path:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(JSONLinesExporter(path)))
        trace.set_tracer_provider(provider)
