"""A run queued in a request and answered by a real Celery worker continues the request's
trace: the task carries the W3C trace context in its headers, the worker's run span is a
child of the request's span, its attempt and tool spans children of the run's."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings
from opentelemetry import trace

from django_llmchat.models import Chat
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call
from tests.integration.conftest import current_app
from tests.otel import install

pytestmark = [pytest.mark.redis]


def test_a_workers_run_continues_the_trace_of_the_request(services, llm, tmp_path):
    install()  # this process's spans (the request's) go to the SDK
    spans_file = tmp_path / "spans.jsonl"
    llmchat = {
        **services.llmchat,
        "OPENTELEMETRY": True,
        "TOOL_MODULES": ["tests.integration.tools"],
    }
    queue = f"{services.queue}-otel"
    llm.script(Reply(tool_calls=[Call("slow_step", {"n": 1}, call_id="c1")]))
    llm.script("Answered by the worker.")
    worker = services.worker(
        queue=queue,
        concurrency=2,
        LLMCHAT_TEST_SPANS=str(spans_file),
        LLMCHAT_TEST_SETTINGS=json.dumps(llmchat),
    )
    try:
        with override_settings(LLMCHAT=llmchat), current_app(services.sender(queue)):
            chat = Chat.objects.create().with_tools("slow_step")
            with trace.get_tracer("tests").start_as_current_span("POST /messages") as request:
                chat.ask_later("Hi")
            ended = services.wait_task_ended(chat.runs.get().task_id, timeout=60)
    finally:
        worker.stop()
    assert ended.startswith("SUCCESS"), worker.output()
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    names = [s["name"] for s in spans]
    (run,) = [s for s in spans if s["name"] == "invoke_agent"]
    context = request.get_span_context()
    assert run["trace_id"] == format(context.trace_id, "032x")
    assert run["parent_id"] == format(context.span_id, "016x")
    assert run["attributes"]["gen_ai.conversation.id"] == str(chat.pk)
    assert run["attributes"]["django_llmchat.run.status"] == "succeeded"
    calls = [s for s in spans if s["name"].startswith("chat ")]
    tools = [s for s in spans if s["name"] == "execute_tool slow_step"]
    assert len(calls) == 2 and len(tools) == 1, names
    for child in calls + tools:
        assert child["trace_id"] == run["trace_id"] and child["parent_id"] == run["span_id"]
    assert tools[0]["attributes"]["gen_ai.tool.call.id"] == "c1"
