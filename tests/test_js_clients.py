"""The API driven by real JavaScript clients, in Node: the AI SDK's ``Chat`` and
``DefaultChatTransport`` (``tests/js/ui-chat.test.mjs``), a network that fails under each
server, with fetch-event-source's retry and the SDK's resume as docs/frontends.md writes
them (``tests/js/retry-resume.test.mjs``), and a client typed by openapi-typescript,
compiled with ``tsc --noEmit`` (``tests/js/client.ts``), and branches (regenerate, edit,
switch) through the AI SDK (``tests/js/branches.test.mjs``).

The packages install from ``tests/js/package-lock.json`` (``npm ci``) when missing. The
servers are ``manage.py runserver`` (WSGI) and uvicorn (ASGI) on free ports, each with a
SQLite file, the demo model's replies (a loopback fake provider) and live events on Redis.
Without ``node`` and ``npm`` the tests are skipped, except under ``CI=true``, where that
is a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.conftest import import_or_unavailable, require_service, unavailable

# serves its own server on its own SQLite database, whatever DATABASE_URL says
pytestmark = pytest.mark.own_database

ROOT = Path(__file__).resolve().parents[1]
JS = ROOT / "tests" / "js"


def _run(*args: str, env=None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, cwd=JS, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def node_packages() -> None:
    """``npm ci`` from the committed lock file, unless node_modules matches it already."""
    if not shutil.which("node") or not shutil.which("npm"):
        unavailable("node and npm are not installed")
    lock = (JS / "package-lock.json").read_bytes()
    installed = JS / "node_modules" / ".llmchat-lock"
    if not installed.exists() or installed.read_bytes() != lock:
        done = _run("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
        assert done.returncode == 0, done.stdout + done.stderr
        installed.write_bytes(lock)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVERS = ("runserver", "uvicorn")


def _command(kind: str, port: int) -> list[str]:
    python = sys.executable
    if kind == "runserver":  # WSGI, Django's development server
        return [python, "-m", "django", "runserver", "--noreload", f"127.0.0.1:{port}"]
    # ASGI: Django's application under uvicorn
    return [
        python,
        "-m",
        "uvicorn",
        "--factory",
        "django.core.asgi:get_asgi_application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--lifespan",
        "off",
        "--timeout-graceful-shutdown",
        "2",
    ]


class Servers:
    """The live servers of this module, started on first use, one per kind, each with
    its own SQLite file, user and token."""

    def __init__(self, tmp_path_factory):
        self.tmp_path_factory = tmp_path_factory
        self.redis_url = require_service("REDIS_URL")
        self.running: dict[str, tuple] = {}
        self.processes: list[tuple[subprocess.Popen, object]] = []

    def __call__(self, kind: str = "runserver"):
        """``(url, token, env, work)`` of a server of ``kind`` (``runserver`` or
        ``uvicorn``)."""
        if kind not in self.running:
            self.running[kind] = self._start(kind)
        return self.running[kind]

    def _start(self, kind: str):
        if kind == "uvicorn":
            import_or_unavailable("uvicorn")
        work = self.tmp_path_factory.mktemp(f"js-api-{kind}")
        env = {
            **{k: v for k, v in os.environ.items() if k != "DATABASE_URL"},
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "tests.api.ui_server_settings",
            "LLMCHAT_API_DB": str(work / "db.sqlite3"),
            "REDIS_URL": self.redis_url,
            "EVENTS_KEY_PREFIX": f"llmchat-js-{uuid.uuid4().hex[:8]}",
            "CHUNK_DELAY": "0.02",
            "LLMCHAT_PROVIDER_LOG": str(work / "provider-requests.jsonl"),
        }
        python = sys.executable
        done = subprocess.run(
            [python, "-m", "django", "migrate", "--noinput"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        script = (
            "from django.contrib.auth import get_user_model\n"
            "from rest_framework.authtoken.models import Token\n"
            "user = get_user_model().objects.create_user('js', password='js-password')\n"
            "print(Token.objects.create(user=user).key)\n"
        )
        done = subprocess.run(
            [python, "-m", "django", "shell", "-c", script],
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        token = done.stdout.strip().splitlines()[-1]
        # a port found free can be taken by another process before the server binds it:
        # then another port, up to three times
        for _attempt in range(3):
            url, server = self._serve(kind, env, work)
            if server.poll() is None:
                break
            if "address already in use" not in (work / "server.log").read_text():
                break
        assert server.poll() is None, (work / "server.log").read_text()
        return url, token, env, work

    def _serve(self, kind: str, env: dict, work: Path):
        """The server started on a free port, answering (or exited: see its log)."""
        port = _free_port()
        log = open(work / "server.log", "w")  # noqa: SIM115 - closed in close()
        server = subprocess.Popen(
            _command(kind, port), env=env, stdout=log, stderr=subprocess.STDOUT
        )
        self.processes.append((server, log))
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/api/schema/?format=json", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None:
                    break
                time.sleep(0.1)
        else:
            pytest.fail(f"the {kind} server did not start")
        return url, server

    def close(self) -> None:
        for server, log in self.processes:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=10)
            log.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory, node_packages):
    """Starts live servers (``manage.py runserver``, uvicorn) with
    ``tests.api.ui_server_settings`` on demand; stops them after the module."""
    started = Servers(tmp_path_factory)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="module")
def live_api(servers):
    """``manage.py runserver``: ``(url, token, env, work)``."""
    return servers("runserver")


def _node(test_file: str, url: str, token: str, work: Path) -> None:
    env = {
        **os.environ,
        "LLMCHAT_URL": url,
        "LLMCHAT_TOKEN": token,
        "LLMCHAT_PROVIDER_LOG": str(work / "provider-requests.jsonl"),
    }
    done = _run("node", "--test", "--test-reporter=spec", test_file, env=env)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        output += "\n--- server log ---\n" + (work / "server.log").read_text()[-6000:]
    assert done.returncode == 0, output


def test_the_ai_sdk_chat_works_against_the_api(live_api):
    url, token, env, work = live_api
    _node("ui-chat.test.mjs", url, token, work)


def test_branches_through_the_ai_sdk(live_api):
    """``tests/js/branches.test.mjs``: regenerate keeps the old reply as an alternative,
    the SDK's edit flow branches and the provider gets only the edited path (read from
    the requests the live server's fake provider recorded), switching restores a
    branch; with the recipes of docs/frontends.md as they are written."""
    url, token, env, work = live_api
    _node("branches.test.mjs", url, token, work)


def test_the_token_recipes_run_as_pasted(live_api):
    """``tests/js/signing-in.test.mjs``: docs/frontends.md's token recipes (the token from
    the credentials, the chat list, ``follow`` reading a chat's events) as written."""
    url, token, env, work = live_api
    _node("signing-in.test.mjs", url, token, work)


def test_generated_typescript_types_compile_against_a_client(live_api):
    url, token, env, work = live_api
    schema = urllib.request.urlopen(f"{url}/api/schema/?format=json", timeout=10).read()
    json.loads(schema)
    (work / "schema.json").write_bytes(schema)
    generated = JS / "schema.d.ts"
    done = _run("npx", "openapi-typescript", str(work / "schema.json"), "-o", str(generated))
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        done = _run("npx", "tsc", "--noEmit", "-p", ".")
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        generated.unlink(missing_ok=True)


@pytest.mark.parametrize("kind", SERVERS)
def test_a_cut_connection_is_retried_or_resumed_under(servers, kind):
    """``tests/js/retry-resume.test.mjs`` against each server: fetch-event-source's retry
    of a cut streaming POST stores one prompt and one run; the AI SDK resumes a cut UI
    stream to the stored reply; a reloaded denied call passes the SDK's schema."""
    url, token, env, work = servers(kind)
    _node("retry-resume.test.mjs", url, token, work)
