"""The OTLP recipe of docs/observability.md, run as written in a process of its own: its
block sets up the SDK with the OTLP/HTTP exporter, a chat answers one prompt, and a local
OTLP receiver (standing in for Jaeger's port 4318) gets the run's spans."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.conftest import import_or_unavailable

import_or_unavailable("opentelemetry.exporter.otlp.proto.http")

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "observability.md"

ASK = """
import django
from django.core.management import call_command
django.setup()
call_command("migrate", verbosity=0)
from django.test import override_settings
from django_llmchat.models import Chat
from django_llmchat.testing import FakeProviderServer, Reply

server = FakeProviderServer().start()
llmchat = server.llmchat_settings("openai", "gpt-4.1-mini")
with override_settings(LLMCHAT={**llmchat, "OPENTELEMETRY": True}):
    server.script(Reply("Hi!"))
    Chat.objects.create(provider="openai", model_id="gpt-4.1-mini").ask("Hello")
provider.force_flush()
server.stop()
print("asked")
"""


def recipe() -> str:
    block = re.search(r"```py\n(# wsgi\.py, asgi\.py and celery\.py.*?)```", PAGE.read_text(), re.S)
    assert block, "the OTLP recipe is no longer on the page"
    return block.group(1)


class Receiver(BaseHTTPRequestHandler):
    bodies: list[tuple[str, bytes]] = []

    def do_POST(self):  # noqa: N802 - the http.server API
        length = int(self.headers.get("Content-Length") or 0)
        Receiver.bodies.append((self.path, self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_otlp_recipe_sends_the_runs_spans(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Receiver.bodies = []
    try:
        script = tmp_path / "recipe.py"
        script.write_text(recipe() + ASK)
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=ROOT,
            env={
                "PATH": "/usr/bin:/bin",
                "PYTHONPATH": str(ROOT),
                "DJANGO_SETTINGS_MODULE": "tests.settings",
                "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_port}",
                "OTEL_SERVICE_NAME": "my-chat-app",
            },
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        server.shutdown()
    assert done.returncode == 0 and "asked" in done.stdout, done.stderr[-3000:]
    paths = {path for path, _ in Receiver.bodies}
    assert paths == {"/v1/traces"}
    sent = b"".join(body for _, body in Receiver.bodies)
    for name in (b"invoke_agent", b"chat gpt-4.1-mini", b"my-chat-app", b"gen_ai.usage"):
        assert name in sent, name
