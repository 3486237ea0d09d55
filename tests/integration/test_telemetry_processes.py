"""One trace over a real web process and a real Celery worker: both set OpenTelemetry up
with the blocks of docs/observability.md as written (the SDK with the OTLP/HTTP exporter,
then the Django, Celery and httpx instrumentations) and export to an OTLP receiver in this
process. A prompt posted to the web process and answered by the worker (a tool call, then
the answer) is one trace: the request's span > the enqueue > the worker's task span >
``invoke_agent`` > each ``chat {model}`` > its provider HTTP request, with the vendor's
``gen_ai.response.id``."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from rest_framework.authtoken.models import Token

from django_llmchat.models import Chat
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call
from tests.conftest import import_or_unavailable

from .conftest import REPO, WebProcess, wait_until

import_or_unavailable("opentelemetry.exporter.otlp.proto.http")
import_or_unavailable("opentelemetry.instrumentation.celery")
import_or_unavailable("opentelemetry.instrumentation.django")
import_or_unavailable("opentelemetry.instrumentation.httpx")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)

pytestmark = [pytest.mark.redis]

PAGE = REPO / "docs" / "observability.md"
MODEL = "gpt-4.1-mini"
TASK = "django_llmchat.tasks.complete_chat"


def setup_blocks() -> str:
    """The page's two set-up blocks, as written."""
    text = PAGE.read_text()
    blocks = [
        re.search(rf"```py\n(# wsgi\.py, asgi\.py and celery\.py: {first}.*?)```", text, re.S)
        for first in ("before", "after")
    ]
    assert all(blocks), "the set-up blocks are no longer on the page"
    return "\n".join(block.group(1) for block in blocks)


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: every span it is sent, as a dict."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[dict] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def received(self) -> list[dict]:
        with self.lock:
            return list(self.spans)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the http.server API
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/v1/traces":
            export = ExportTraceServiceRequest.FromString(body)
            with self.server.lock:
                self.server.spans.extend(_spans(export))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def _spans(export) -> list[dict]:
    out = []
    for resource in export.resource_spans:
        service = {a.key: _value(a.value) for a in resource.resource.attributes}
        for scope in resource.scope_spans:
            for span in scope.spans:
                out.append(
                    {
                        "service": service.get("service.name"),
                        "scope": scope.scope.name,
                        "name": span.name,
                        "kind": span.kind,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_id": span.parent_span_id.hex() or None,
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                    }
                )
    return out


# the web process's manage.py: the project's Celery app imported first, as a project's
# __init__.py does (tests/celery_app.py runs the set-up file), then the command
MANAGE = """
import sys

import tests.celery_app  # noqa: F401
from django.core.management import execute_from_command_line

execute_from_command_line(["manage.py", *sys.argv[1:]])
"""


def test_one_trace_from_the_request_through_the_worker_to_the_provider(
    services, llm, django_user_model, tmp_path
):
    setup = tmp_path / "otel_setup.py"
    setup.write_text(setup_blocks())
    manage = tmp_path / "manage.py"
    manage.write_text(MANAGE)
    receiver = Receiver()
    llmchat = {**services.llmchat, "OPENTELEMETRY": True}
    otel_env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within 0.1 s, not the default 5 s
        "LLMCHAT_TEST_OTEL_SETUP": str(setup),
        "LLMCHAT_TEST_SETTINGS": json.dumps(llmchat),
    }
    user = django_user_model.objects.create_user("traced", password="pw")
    token = Token.objects.create(user=user).key
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL).with_tools("slow_step")
    llm.script(
        Reply(tool_calls=[Call("slow_step", {"n": 1}, call_id="c1")], response_id="resp_call"),
        Reply("Answered by the worker.", response_id="resp_answer"),
    )
    queue = f"{services.queue}-trace"
    worker = services.worker(queue=queue, concurrency=2, OTEL_SERVICE_NAME="worker", **otel_env)
    web = WebProcess(
        services,
        llmchat,
        script=str(manage),
        OTEL_SERVICE_NAME="web",
        LLMCHAT_TEST_QUEUE=queue,
        **otel_env,
    )
    try:
        posted = httpx.post(
            f"{web.url}/api/chats/{chat.pk}/messages/",
            json={"content": "Step once, then answer"},
            headers={"Authorization": f"Token {token}"},
            timeout=30,
        )
        assert posted.status_code in (200, 201, 202), (posted.text, web.output())
        ended = services.wait_task_ended(chat.runs.get().task_id, timeout=60)
        assert ended.startswith("SUCCESS"), worker.output()

        def whole_tree():
            spans = receiver.received()
            names = {(s["service"], s["name"]) for s in spans}
            https = [s for s in spans if (s["service"], s["name"]) == ("worker", "POST")]
            expected = {("web", f"apply_async/{TASK}"), ("worker", f"run/{TASK}")}
            server = any(s["service"] == "web" and s["kind"] == 2 for s in spans)
            return spans if expected <= names and len(https) >= 2 and server else None

        spans = wait_until(whole_tree, timeout=30, message="the spans did not all arrive")
    finally:
        web.kill()
        worker.stop()
        receiver.shutdown()
        receiver.server_close()

    by_id = {s["span_id"]: s for s in spans}

    def parent(span):
        return by_id.get(span["parent_id"])

    def one(service, name):
        found = [s for s in spans if s["service"] == service and s["name"] == name]
        assert len(found) == 1, (service, name, [(s["service"], s["name"]) for s in spans])
        return found[0]

    # the web process: the request's span (Django), the enqueue inside it (Celery)
    request = one("web", "POST api/chats/<int:pk>/messages/")
    assert request["parent_id"] is None and request["kind"] == 2  # SERVER
    # one trace: every span but the start-up probe's (a request of its own) is in it
    probe = one("web", "GET api/models/")
    others = [s for s in spans if s["trace_id"] != request["trace_id"]]
    assert others == [probe], [(s["service"], s["name"]) for s in others]
    enqueue = one("web", f"apply_async/{TASK}")
    assert parent(enqueue) is request
    # the worker: its task span a child of the enqueue, the run of the task span
    task = one("worker", f"run/{TASK}")
    assert parent(task) is enqueue
    run = one("worker", "invoke_agent")
    assert parent(run) is task
    assert run["attributes"]["gen_ai.conversation.id"] == str(chat.pk)
    assert run["attributes"]["django_llmchat.run.status"] == "succeeded"
    # each attempt of the run, its provider HTTP request inside it
    calls = [s for s in spans if s["name"] == f"chat {MODEL}"]
    assert len(calls) == 2 and all(parent(c) is run for c in calls)
    assert {c["service"] for c in calls} == {"worker"}
    ids = sorted(c["attributes"]["gen_ai.response.id"] for c in calls)
    assert ids == ["resp_answer", "resp_call"]
    https = [s for s in spans if s["name"] == "POST" and s["service"] == "worker"]
    assert sorted(parent(h)["span_id"] for h in https) == sorted(c["span_id"] for c in calls)
    assert all(h["scope"] == "opentelemetry.instrumentation.httpx" for h in https)
    (step,) = [s for s in spans if s["name"] == "execute_tool slow_step"]
    assert parent(step) is run
    assert Path(setup).read_text() == setup_blocks()  # as the page has it
