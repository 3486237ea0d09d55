"""The docs' blocks meant to be pasted run as pasted, in a project nobody prepared.

* A fresh ``django-admin startproject`` (in a temporary folder) gets docs/quickstart.md's
  first ``# settings.py`` block (the offline model) pasted at the end of its settings;
  every other ``# settings.py`` block of the docs is then pasted after it (each on its
  own) and must run; and all of them pasted one after the other, in the order of the
  pages in mkdocs.yml, into one settings file: each adds to the settings before it, none
  erases what an earlier one set.
* A ``python`` block after ``<!-- pasted: manage_py_shell -->`` runs in
  ``python manage.py shell -c`` of the project (a plain shell, no test runner), twice.
* A block whose first line names a file (``# conftest.py``, ``# pytest.ini``) is written
  to that file of the project; a ``bash`` block after ``<!-- pasted: shell -->`` runs there
  (``python`` being this interpreter): docs/quickstart.md's ``migrate``, docs/testing.md's
  pytest examples as a real pytest run.
* The ``javascript`` block after ``<!-- pasted: node -->`` in docs/frontends.md runs in
  node against a live server, as a signed-in page would (its cookies, relative URLs).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import test_js_clients
from tests.conftest import unavailable

# serves its own server on its own SQLite database, whatever DATABASE_URL says
pytestmark = pytest.mark.own_database

JS = test_js_clients.JS
# the live server of the JavaScript client tests (a module of its own here)
node_packages = test_js_clients.node_packages
servers = test_js_clients.servers
live_api = test_js_clients.live_api

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(
    r"^(?:<!-- pasted: (?P<mark>\w+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)^```", re.S | re.M
)
FILE_LINE = re.compile(r"^# (?P<path>[\w./-]+\.(?:py|ini|cfg|toml))\n")


def blocks(page: str) -> list[tuple[str | None, str, str]]:
    """``(mark, language, text)`` of every fenced block of a page."""
    text = (DOCS / page).read_text()
    return [(m["mark"], m["lang"], m["body"]) for m in FENCE.finditer(text)]


def quickstart_settings() -> str:
    """The quickstart's first settings block: the offline model."""
    return next(b for _m, _lang, b in blocks("quickstart.md") if b.startswith("# settings.py"))


def environment(project: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "PYTHONPATH")
        and not k.endswith("_API_KEY")
    }
    # this checkout's django_llmchat, the project's own modules first
    env["PYTHONPATH"] = os.pathsep.join([str(project), str(ROOT)])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run(command: list[str] | str, project: Path, *, timeout: float = 300):
    done = subprocess.run(
        command,
        cwd=project,
        env=environment(project),
        shell=isinstance(command, str),
        executable="/bin/bash" if isinstance(command, str) else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done


def new_project(where: Path) -> Path:
    """``django-admin startproject mysite`` with the quickstart's settings pasted in."""
    where.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "django", "startproject", "mysite", "."], where)
    settings = where / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + "\n\n" + quickstart_settings())
    return where


def paste(page: str, project: Path) -> list[str]:
    """Write the page's file blocks into ``project``, run its shell blocks there; returns
    their output."""
    outputs = []
    for mark, lang, text in blocks(page):
        named = FILE_LINE.match(text)
        if named and named["path"] != "settings.py":
            (project / named["path"]).write_text(text)
        elif mark == "shell":
            assert lang == "bash"
            outputs.append(run(text, project).stdout)
        elif mark == "manage_py_shell":
            assert lang == "python"
            for _ in range(2):  # pasted twice: no fixed name or id gets in the way
                shell = [sys.executable, "manage.py", "shell", "-v", "0", "-c", text]
                outputs.append(run(shell, project).stdout)
    return outputs


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return new_project(tmp_path_factory.mktemp("startproject"))


def test_quickstart_settings_and_commands_in_a_fresh_project(project):
    """The quickstart as a newcomer follows it: its settings, migrate, and an offline ask
    in ``manage.py shell`` that answers (no key, no network but the loopback)."""
    outputs = paste("quickstart.md", project)
    assert outputs, "docs/quickstart.md has no block marked <!-- pasted: shell -->"
    assert "django_llmchat" in outputs[0]  # migrate applied the app's migrations
    asked = [m for m, lang, _t in blocks("quickstart.md") if m == "manage_py_shell"]
    assert asked, "docs/quickstart.md has no offline ask (<!-- pasted: manage_py_shell -->)"
    assert "offline demo model" in outputs[-1], outputs[-1]  # the demo model answered
    run([sys.executable, "manage.py", "check", "--fail-level", "WARNING"], project)


def test_the_pytest_examples_pass_as_a_real_pytest_run(tmp_path):
    project = new_project(tmp_path / "project")
    (output,) = paste("testing.md", project)
    assert re.search(r"\b2 passed\b", output), output
    assert "failed" not in output and "error" not in output.lower()


def settings_blocks():
    for path in sorted(DOCS.rglob("*.md")):
        page = str(path.relative_to(DOCS))
        for number, (_mark, lang, text) in enumerate(blocks(page)):
            if lang == "python" and text.startswith("# settings.py") and page != "quickstart.md":
                yield pytest.param(text, id=f"{page}#{number}")


@pytest.fixture(scope="module")
def startproject_settings(tmp_path_factory) -> str:
    where = tmp_path_factory.mktemp("settings-only")
    run([sys.executable, "-m", "django", "startproject", "mysite", "."], where)
    return (where / "mysite" / "settings.py").read_text()


@pytest.mark.parametrize("block", list(settings_blocks()))
def test_every_settings_block_pastes_after_the_quickstart(
    block, startproject_settings, monkeypatch
):
    """Pasted at the end of a fresh project's settings (after the quickstart's), the block
    runs (every name it uses is defined; a key it reads from the environment is there)
    and the project keeps the apps it had."""

    class Environment(dict):
        """The environment of a deployment: a key the block requires is set there."""

        def __missing__(self, key):
            return "set-in-the-environment"

    monkeypatch.setattr(os, "environ", Environment(os.environ))
    namespace: dict = {"__file__": "/srv/mysite/mysite/settings.py", "__name__": "settings"}
    source = startproject_settings + "\n\n" + quickstart_settings() + "\n\n" + block
    exec(compile(source, "settings.py", "exec"), namespace)
    apps = namespace["INSTALLED_APPS"]
    assert {"django.contrib.admin", "django.contrib.auth", "django_llmchat"} <= set(apps)
    assert len(set(apps)) == len(apps), apps  # an app listed twice stops Django
    assert isinstance(namespace["LLMCHAT"], dict)


def pages_in_reading_order() -> list[str]:
    """The docs' pages as mkdocs.yml's nav lists them, then any page it does not list."""
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    nav = re.findall(r"^\s*- (?:[^:\n]+: )?([\w/.-]+\.md)$", mkdocs, re.M)
    rest = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    return nav + [page for page in rest if page not in nav]


def kept(namespace: dict) -> set[tuple]:
    """What the settings hold so far: each dict setting's keys (two levels deep: the names
    in ``LLMCHAT["PROVIDERS"]`` among them), each list setting's items."""
    held = set()
    for name, value in namespace.items():
        if not name.isupper():
            continue
        if isinstance(value, dict):
            for key, inner in value.items():
                held.add((name, key))
                if isinstance(inner, dict):
                    held.update((name, key, k) for k in inner)
        elif isinstance(value, list | tuple):
            held.update((name, "item", item) for item in value if isinstance(item, str))
    return held


def test_all_settings_blocks_pasted_in_order_keep_what_came_before(
    startproject_settings, monkeypatch
):
    """Every settings block of the docs, pasted one after the other at the end of one
    settings.py (the quickstart's first), adds its keys: none erases a setting, an
    ``LLMCHAT`` key or a provider an earlier block set."""

    class Environment(dict):
        def __missing__(self, key):
            return "set-in-the-environment"

    monkeypatch.setattr(os, "environ", Environment(os.environ))
    namespace: dict = {"__file__": "/srv/mysite/mysite/settings.py", "__name__": "settings"}
    exec(compile(startproject_settings, "settings.py", "exec"), namespace)
    pasted = [("quickstart.md", quickstart_settings())]
    for page in pages_in_reading_order():
        pasted += [
            (page, text)
            for _m, lang, text in blocks(page)
            if lang == "python" and text.startswith("# settings.py") and text not in pasted[0]
        ]
    assert len(pasted) > 20, pasted
    lost = []
    for page, text in pasted:
        before = kept(namespace)
        exec(compile(text, f"docs/{page}", "exec"), namespace)
        gone = before - kept(namespace)
        lost += [f"docs/{page} erases {'/'.join(map(str, key))}" for key in sorted(gone, key=str)]
    assert not lost, "\n".join(lost)
    llmchat = namespace["LLMCHAT"]
    assert "demo" in llmchat["PROVIDERS"] and "OPENTELEMETRY" in llmchat, llmchat


def test_the_plain_javascript_recipe_runs_in_node(live_api):
    """docs/frontends.md's plain ``ask()``, run as a signed-in page of the site runs it:
    relative URLs, the session and CSRF cookies, ``document.querySelector``."""
    (recipe,) = [t for mark, lang, t in blocks("frontends.md") if mark == "node"]
    url, _token, env, work = live_api
    script = (
        "from django.contrib.auth import get_user_model\n"
        "from django.test import Client\n"
        "user = get_user_model().objects.create_user('page', password='page-password')\n"
        "client = Client()\n"
        "client.force_login(user)\n"
        "print(client.cookies['sessionid'].value)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "django", "shell", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    session = done.stdout.strip().splitlines()[-1]
    # what a browser gives the page: its origin, its cookies, an <output id="reply">
    prelude = f"""
const origin = {url!r};
const cookie = "sessionid={session}; csrftoken=abcdefghijklmnopqrstuvwxyzABCDEF";
const reply = {{ textContent: "" }};
globalThis.document = {{ cookie, querySelector: (s) => (s === "#reply" ? reply : null) }};
const pageFetch = globalThis.fetch;
globalThis.fetch = (path, init = {{}}) =>
  pageFetch(new URL(path, origin), {{ ...init, headers: {{ ...init.headers, Cookie: cookie }} }});
process.on("exit", () => console.log(`reply: ${{reply.textContent}}`));
"""
    page = work / "plain-ask.mjs"
    page.write_text(prelude + "\n" + recipe)
    if not shutil.which("node"):
        unavailable("node is not installed")
    done = subprocess.run(
        ["node", str(page)], cwd=JS, capture_output=True, text=True, timeout=120, check=False
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output + (work / "server.log").read_text()[-4000:]
    assert re.search(r"^succeeded, total \$", output, re.M), output
    assert "stored message" in output
    reply = output.rsplit("reply: ", 1)[1].strip()
    assert reply, output
