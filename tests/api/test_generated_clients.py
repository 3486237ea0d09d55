"""Clients generated from the schema survive a tool added after they were: a Python client
(openapi-python-client) and a TypeScript one (openapi-typescript's types, openapi-fetch)
are generated from the schema a live server serves, then the server is restarted with a
tool registered (``tide_times``) and an MCP server configured (``mcp:notes``) beside
those it had (``moon_phase``, ``mcp:almanac``, the schema's examples), and each
client makes a chat holding both and reads the chat list and the chat, over HTTP on
loopback (``manage.py runserver``, :mod:`tests.api.server_settings`).

Both clients are cached by the schema's hash and the generators' versions
(``tests/.generated/``, ``tests/js/build/``): an unchanged schema is not generated again.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest

from tests.conftest import import_or_unavailable
from tests.test_js_clients import JS, ROOT, node_packages  # noqa: F401 - a fixture

# serves its own server on its own SQLite database, whatever DATABASE_URL says
pytestmark = pytest.mark.own_database

import_or_unavailable("openapi_python_client")

GENERATED = ROOT / "tests" / ".generated"
NEW_TOOLS = ["tide_times", "mcp:notes"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_env(tmp_path_factory):
    """The environment of the live servers (one SQLite file), and a user's token."""
    work = tmp_path_factory.mktemp("generated-clients")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "LLMCHAT_API_TOOLS")},
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.api.server_settings",
        "LLMCHAT_API_DB": str(work / "db.sqlite3"),
    }
    python = sys.executable
    done = subprocess.run(
        [python, "-m", "django", "migrate", "--noinput"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    script = (
        "from django.contrib.auth import get_user_model\n"
        "from rest_framework.authtoken.models import Token\n"
        "user = get_user_model().objects.create_user('generated', password='generated')\n"
        "print(Token.objects.create(user=user).key)\n"
    )
    done = subprocess.run(
        [python, "-m", "django", "shell", "-c", script], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return env, done.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def serve(env: dict[str, str], **extra: str):
    """``manage.py runserver`` on a free loopback port until the block ends: its URL."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "django", "runserver", "--noreload", f"127.0.0.1:{port}"],
        env={**env, **extra},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/schema/?format=json", timeout=5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    pytest.fail(f"runserver did not start: {process.stderr.read()[-2000:]}")
                time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()


def _key(schema: bytes, *parts: str) -> str:
    digest = hashlib.sha256(schema)
    for part in parts:
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def python_client(schema: bytes) -> Path:
    """The package openapi-python-client generates from ``schema`` (cached)."""
    key = _key(schema, metadata.version("openapi-python-client"))
    package = GENERATED / f"llmchat_client_{key}"
    if not (package / "client.py").exists():
        shutil.rmtree(package, ignore_errors=True)
        GENERATED.mkdir(parents=True, exist_ok=True)
        source = GENERATED / f"schema-{key}.json"
        source.write_bytes(schema)
        bin_dir = Path(sys.executable).parent
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        done = subprocess.run(
            [str(bin_dir / "openapi-python-client"), "generate", "--path", str(source)]
            + ["--output-path", str(package), "--meta", "none"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "Warning" not in done.stdout + done.stderr, done.stdout + done.stderr
    return package


def typescript_client(schema: bytes) -> Path:
    """``new-tools.js``: tests/js/new-tools.ts compiled by tsc against the types
    openapi-typescript generates from ``schema`` (cached)."""
    lock = (JS / "package-lock.json").read_bytes().decode()
    program = (JS / "new-tools.ts").read_text()
    build = JS / "build" / _key(schema, lock, program)
    if not (build / "new-tools.js").exists():
        shutil.rmtree(build, ignore_errors=True)
        build.mkdir(parents=True)
        (build / "schema.json").write_bytes(schema)
        (build / "new-tools.ts").write_text(program)
        bin_dir = JS / "node_modules" / ".bin"
        for command in (
            [str(bin_dir / "openapi-typescript"), "schema.json", "-o", "schema.d.ts"],
            [str(bin_dir / "tsc"), "--target", "ES2022", "--module", "ES2022"]
            + ["--moduleResolution", "bundler", "--strict", "--skipLibCheck"]
            + ["--lib", "ES2022,DOM", "new-tools.ts"],
        ):
            done = subprocess.run(command, cwd=build, capture_output=True, text=True)
            assert done.returncode == 0, done.stdout + done.stderr
    return build / "new-tools.js"


def test_clients_generated_before_a_tool_read_the_chats_holding_it(
    server_env,
    node_packages,  # noqa: F811 - the fixture imported above
    capsys,
):
    env, token = server_env
    started = time.monotonic()
    with serve(env, LLMCHAT_API_TOOLS="1") as base:  # before tide_times and mcp:notes
        with urllib.request.urlopen(f"{base}/api/schema/?format=json") as response:
            schema = response.read()
    for name in NEW_TOOLS:
        assert name.encode() not in schema  # the clients know nothing of them
    tool_item = json.loads(schema)["components"]["schemas"]["Chat"]["properties"]["tools"]
    assert tool_item["items"]["examples"] == ["moon_phase", "mcp:almanac"]
    assert "enum" not in tool_item["items"] and tool_item["items"]["pattern"]
    package = python_client(schema)
    script = typescript_client(schema)
    generated = time.monotonic() - started

    sys.path.insert(0, str(package.parent))
    try:
        client_module = importlib.import_module(package.name)
        api = importlib.import_module(f"{package.name}.api.chats")
        models = importlib.import_module(f"{package.name}.models")
        importlib.import_module(f"{package.name}.api.chats.chats_create")
        importlib.import_module(f"{package.name}.api.chats.chats_list")
        importlib.import_module(f"{package.name}.api.chats.chats_retrieve")
        with contextlib.ExitStack() as stack:
            base = stack.enter_context(serve(env, LLMCHAT_API_TOOLS="2"))  # a release later
            client = client_module.AuthenticatedClient(base_url=base, token=token, prefix="Token")
            stack.enter_context(client)  # its connections closed with the server
            body = models.ChatRequest(title="tides (python)", tools=NEW_TOOLS)
            created = api.chats_create.sync_detailed(client=client, body=body)
            assert created.status_code == 201, created.content
            assert isinstance(created.parsed, models.Chat)
            assert created.parsed.tools == NEW_TOOLS
            page = api.chats_list.sync(client=client, page_size=100)
            assert isinstance(page, models.PaginatedChatSearchList)
            listed = {chat.id: chat.tools for chat in page.results}
            assert listed[created.parsed.id] == NEW_TOOLS
            one = api.chats_retrieve.sync(client=client, id=created.parsed.id)
            assert isinstance(one, models.Chat) and one.tools == NEW_TOOLS

            done = subprocess.run(
                ["node", str(script), base, token], cwd=JS, capture_output=True, text=True
            )
            assert done.returncode == 0, done.stdout + done.stderr
            read = json.loads(done.stdout.strip().splitlines()[-1])
            assert read["one"] == NEW_TOOLS
            assert read["listed"][str(read["created"])] == NEW_TOOLS
            # each client reads the chat the other made
            assert read["listed"][str(created.parsed.id)] == NEW_TOOLS
            again = api.chats_retrieve.sync(client=client, id=read["created"])
            assert isinstance(again, models.Chat) and again.tools == NEW_TOOLS
    finally:
        sys.path.remove(str(package.parent))
    with capsys.disabled():
        print(
            f"\n[generated clients] generation {generated:.1f} s, "
            f"whole test {time.monotonic() - started:.1f} s"
        )
