"""The body of .ci/wheel.sh (standard library only; see there).

``python .ci/wheel.py contents WHEEL SDIST`` checks what the artefacts hold: every file of
the package in git (templates, static files, SQL, migrations, data, ``py.typed``) and
nothing else (no tests, no example project, no bytecode).

``python .ci/wheel.py project --docs DOCS --project DIR``, run by the interpreter of a
virtualenv holding the installed wheel, follows the docs in a new ``startproject``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlparse

FENCE = re.compile(
    r"^(?:<!-- pasted: (?P<mark>\w+) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)^```", re.S | re.M
)


def step(title: str, started: list[float]) -> None:
    now = time.monotonic()
    print(f"-- {title} ({now - started[0]:.1f} s)", flush=True)
    started[0] = now


# --- the artefacts -------------------------------------------------------------------


def package_files() -> set[str]:
    """The package's files in git (relative to the checkout)."""
    listed = subprocess.run(
        ["git", "ls-files", "django_llmchat"], capture_output=True, text=True, check=True
    ).stdout.split()
    return {path for path in listed if Path(path).exists()}


def contents(wheel: Path, sdist: Path) -> None:
    expected = package_files()
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if not n.endswith("/")]
    info = [n for n in names if n.split("/")[0].endswith(".dist-info")]
    files = set(names) - set(info)
    missing, extra = expected - files, files - expected
    assert not missing, f"the wheel lacks {sorted(missing)}"
    assert not extra, f"the wheel holds files not in the package: {sorted(extra)}"
    assert any(n.endswith("licenses/LICENSE") for n in info), info
    for needed in ("py.typed", "data/models.json"):
        assert f"django_llmchat/{needed}" in files, needed
    for kind, pattern in (
        ("templates", "django_llmchat/templates/"),
        ("static files", "django_llmchat/static/"),
        ("SQL files", "django_llmchat/sql/"),
        ("migrations", "django_llmchat/migrations/"),
    ):
        count = sum(n.startswith(pattern) for n in files)
        assert count, f"the wheel holds no {kind}"
        print(f"   {kind}: {count}")
    print(f"   the wheel: {len(names)} files ({len(files)} of the package, {len(info)} metadata)")

    with tarfile.open(sdist) as archive:
        members = [m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile()]
    top = {m for m in members if "/" not in m}
    packaged = {m for m in members if m.startswith("django_llmchat/")}
    missing = expected - packaged
    assert not missing, f"the sdist lacks {sorted(missing)}"
    stray = [
        m
        for m in members
        if not (m in top or m.startswith(("django_llmchat/", "django_llmchat.egg-info/")))
        or m.endswith((".pyc", ".sqlite3"))
        or "__pycache__" in m
    ]
    assert not stray, f"the sdist holds {stray}"
    assert {"pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md"} <= top, top
    print(f"   the sdist: {len(members)} files, at its top {sorted(top)}")


# --- the project ---------------------------------------------------------------------


def blocks(docs: Path, page: str) -> list[tuple[str | None, str, str]]:
    return [(m["mark"], m["lang"], m["body"]) for m in FENCE.finditer((docs / page).read_text())]


def section(docs: Path, page: str, heading: str) -> str:
    """The text of a page from a heading to the next one of its level."""
    text = (docs / page).read_text()
    level = heading.split(" ")[0]
    start = text.index(heading + "\n")
    end = text.find(f"\n{level} ", start + len(heading))
    return text[start : end if end != -1 else None]


def first_example(docs: Path, page: str, heading: str) -> str:
    """The first python block of a page's section that is not a settings block."""
    for match in FENCE.finditer(section(docs, page, heading)):
        if match["lang"] == "python" and not match["body"].startswith("# settings.py"):
            return match["body"]
    raise AssertionError(f"docs/{page} has no example under {heading!r}")


class Project:
    def __init__(self, where: Path):
        self.where = where
        self.bin = Path(sys.executable).parent
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "PYTHONPATH", "VIRTUAL_ENV")
            and not k.endswith("_API_KEY")
        }
        # `python`, `django-admin` and `celery` are the new venv's, as after `activate`
        self.env["PATH"] = os.pathsep.join([str(self.bin), self.env.get("PATH", "")])
        self.env["VIRTUAL_ENV"] = str(self.bin.parent)

    def run(self, command: list[str] | str, *, timeout: float = 180) -> str:
        done = subprocess.run(
            command,
            cwd=self.where,
            env=self.env,
            shell=isinstance(command, str),
            executable="/bin/bash" if isinstance(command, str) else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode:
            raise SystemExit(f"failed: {command}\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def shell(self, code: str) -> str:
        """``python manage.py shell -c``: a plain shell, no test runner around it."""
        return self.run([str(self.bin / "python"), "manage.py", "shell", "-v", "0", "-c", code])

    def append(self, path: str, text: str) -> None:
        file = self.where / path
        file.write_text(file.read_text() + "\n\n" + text)


def fresh_services(database_url: str, redis_url: str) -> dict[str, str]:
    """Drop and create the step's database, empty its Redis database; returns the
    database's parts."""
    import psycopg
    import redis

    url = urlparse(database_url)
    parts = {
        "NAME": unquote(url.path.lstrip("/")),
        "USER": unquote(url.username or ""),
        "PASSWORD": unquote(url.password or ""),
        "HOST": url.hostname or "",
        "PORT": str(url.port or ""),
    }
    admin = database_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as connection:
        name = parts["NAME"].replace('"', '""')
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    redis.Redis.from_url(redis_url).flushdb()
    return parts


def project(docs: Path, where: Path) -> None:
    started = [time.monotonic()]
    assert importlib.util.find_spec("pytest") is None, "a dev extra is installed in this venv"
    import django_llmchat

    installed = Path(django_llmchat.__file__).resolve()
    assert "site-packages" in installed.parts, f"django_llmchat comes from {installed}"

    database_url, redis_url = os.environ["WHEEL_DATABASE_URL"], os.environ["WHEEL_REDIS_URL"]
    database = fresh_services(database_url, redis_url)
    where.mkdir(parents=True)
    p = Project(where)
    p.run([str(p.bin / "django-admin"), "startproject", "mysite", "."])

    # settings.py: the quickstart's (the offline model), then the deployment page's
    # PostgreSQL and Celery settings, pointed at this machine's services
    quickstart = blocks(docs, "quickstart.md")
    first = next(b for _m, lang, b in quickstart if b.startswith("# settings.py"))
    p.append("mysite/settings.py", first)
    deployment = blocks(docs, "deployment.md")
    production = next(b for _m, lang, b in deployment if b.startswith("# settings.py"))
    p.append("mysite/settings.py", production)
    p.append(
        "mysite/settings.py",
        "# this machine's services\n"
        f'DATABASES["default"].update({database!r})\n'
        f"CELERY_BROKER_URL = {redis_url!r}\n"
        f'LLMCHAT["EVENTS_URL"] = {redis_url!r}\n',
    )
    # the Celery app, as the deployment page lays it out
    celery_app = next(b for _m, lang, b in deployment if b.startswith("# example_project/celery"))
    (where / "mysite" / "celery.py").write_text(celery_app.replace("example_project", "mysite"))
    p.append("mysite/__init__.py", "from .celery import app as celery_app\n")
    step("startproject and settings", started)

    # the quickstart's commands (migrate, llmchat_sync_models)
    commands = [b for mark, lang, b in quickstart if mark == "shell"]
    assert commands, "docs/quickstart.md has no <!-- pasted: shell --> block"
    for command in commands:
        output = p.run(command)
        assert "Error" not in output, output
    p.run([str(p.bin / "python"), "manage.py", "check", "--fail-level", "WARNING"])
    step("migrate, llmchat_sync_models, check", started)

    # the postgres extra: the pool of the deployment page, the run transitions installed
    print(
        p.shell(
            "from django.db import connection\n"
            "assert connection.vendor == 'postgresql', connection.vendor\n"
            "connection.ensure_connection()\n"
            "assert connection.pool is not None, 'no psycopg pool'\n"
            "with connection.cursor() as cursor:\n"
            "    cursor.execute(\"SELECT count(*) FROM pg_proc WHERE proname LIKE 'llmchat%%'\")\n"
            "    functions = cursor.fetchone()[0]\n"
            "assert functions >= 5, functions\n"
            "print(f'   PostgreSQL with the pool, {functions} run functions')\n"
        ).strip()
    )
    step("postgres", started)

    # the quickstart's offline ask, twice (a second paste must work too)
    asks = [b for mark, lang, b in quickstart if mark == "manage_py_shell"]
    assert asks, "docs/quickstart.md has no <!-- pasted: manage_py_shell --> block"
    for _ in range(2):
        for code in asks:
            output = p.shell(code)
    print("   the offline ask answered:", output.strip().splitlines()[0][:70])
    step("the quickstart's offline ask, twice", started)

    # a Celery worker on Redis answers ask_later
    log = where / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [str(p.bin / "celery"), "-A", "mysite", "worker", "--pool", "threads",
             "--concurrency", "2", "-l", "info", "--without-heartbeat", "--without-gossip",
             "--without-mingle"],
            cwd=where, env=p.env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "ready." not in log.read_text():
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        output = p.shell(
            "import time\n"
            "from django_llmchat.models import Chat\n"
            "chat = Chat.objects.create(title='Later')\n"
            "chat.ask_later('Tell me about Paris')\n"
            "deadline = time.monotonic() + 60\n"
            "while time.monotonic() < deadline:\n"
            "    run = chat.runs.order_by('-pk').first()\n"
            "    if run.status not in ('queued', 'running'):\n"
            "        break\n"
            "    time.sleep(0.2)\n"
            "assert run.status == 'succeeded', (run.status, run.error)\n"
            "reply = list(chat.transcript())[-1]\n"
            "assert reply.role == 'assistant' and reply.content, reply\n"
            "print(run.pk, reply.content[:60])\n"
        )
        run_id = output.strip().splitlines()[-1].split()[0]
        text = log.read_text()
        assert "django_llmchat.tasks.complete_chat" in text and "succeeded" in text, text
        print(f"   the worker answered run {run_id}")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    step("a Celery worker on Redis answers ask_later", started)

    # each extra's first documented example, twice, in a plain shell
    for extra, page, heading in (
        ("mcp", "mcp.md", "## A chat takes a server's tools"),
        ("otel", "observability.md", "## Spans"),
        ("encryption", "privacy.md", "## Encryption at rest"),
    ):
        code = first_example(docs, page, heading)
        for _ in range(2):
            p.shell(code)
        step(f"[{extra}]: docs/{page}'s first example, twice", started)


# --- the documented install lines ---------------------------------------------------

GITHUB = "https://github.com/django-llmchat/django-llmchat"
# what the extras bring, imported in each venv: the pool, and a worker on Redis
EXTRAS_IMPORT = """
import celery, kombu.transport.redis, psycopg, psycopg_pool, redis
import django_llmchat
from importlib import metadata
from pathlib import Path
assert "site-packages" in Path(django_llmchat.__file__).parts, django_llmchat.__file__
print(metadata.distribution("django-llmchat").read_text("direct_url.json"))
"""


def install_block(page: Path) -> list[str]:
    """The commands of the first bash block of a page's ``## Install`` section (comments
    dropped)."""
    text = page.read_text().split("## Install\n", 1)[1]
    block = next(m["body"] for m in FENCE.finditer(text) if m["lang"] == "bash")
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def installs(checkout: Path, python: str, work: Path) -> None:
    """The install lines of the README and the quickstart, as written, each into a new
    venv: the clone (of this checkout) and the plain install of it, and the git URL (the
    checkout's, ``git+file://``). Both install what the checkout has committed."""
    started = [time.monotonic()]
    readme = install_block(checkout / "README.md")
    quickstart = install_block(checkout / "docs" / "quickstart.md")
    clone = f"git clone {GITHUB}"
    assert clone in readme and clone in quickstart, (readme, quickstart)
    git = [line for line in quickstart if "@ git+" in line]
    assert len(git) == 1 and git[0] in readme, (git, readme)
    editable = [line for line in readme if line.startswith("pip install -e ")]
    assert len(editable) == 1 and editable[0] in quickstart, (editable, quickstart)
    plain = editable[0].replace("pip install -e ", "pip install ")
    assert plain in quickstart, f"the quickstart has no plain install of the checkout: {plain}"

    work.mkdir(parents=True)
    head = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # the clone of this checkout, into the folder the URL's clone makes
    mirror = clone.replace(GITHUB, f"--quiet {checkout} django-llmchat")
    subprocess.run(mirror, shell=True, cwd=work, check=True)
    # the git URL of this checkout (with a host: a PEP 508 URL must have one)
    lines = {"checkout": plain, "git": git[0].replace(GITHUB, f"file://localhost{checkout}")}
    running = {}
    for name, line in lines.items():  # both at once
        venv = work / f"venv-{name}"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])  # its pip
        with (work / f"{name}.log").open("w") as log:
            running[name] = subprocess.Popen(
                f"{line} --quiet", shell=True, cwd=work, env=env, stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
    for name, install in running.items():
        shown = lines[name].replace(str(checkout), "<checkout>")
        code = install.wait(300)
        assert code == 0, f"{shown}\n{(work / f'{name}.log').read_text()}"
        venv_python = str(work / f"venv-{name}" / "bin" / "python")
        subprocess.run([venv_python, "-m", "pip", "check"], check=True, capture_output=True)
        done = subprocess.run(
            [venv_python, "-c", EXTRAS_IMPORT], cwd=work, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{shown}: {done.stderr}"
        source = json.loads(done.stdout)  # where pip says it installed it from
        if name == "git":
            assert source["vcs_info"]["commit_id"] == head, source
        else:
            assert "dir_info" in source and source["url"].endswith("/django-llmchat"), source
        print(f"   {shown}: installed, its extras import")
    step("the README's and the quickstart's install lines, each in a new venv", started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("contents")
    check.add_argument("wheel", type=Path)
    check.add_argument("sdist", type=Path)
    follow = commands.add_parser("project")
    follow.add_argument("--docs", type=Path, required=True)
    follow.add_argument("--project", type=Path, required=True)
    lines = commands.add_parser("installs")
    lines.add_argument("--checkout", type=Path, required=True)
    lines.add_argument("--python", required=True)
    lines.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "contents":
        contents(args.wheel, args.sdist)
    elif args.command == "installs":
        installs(args.checkout.resolve(), args.python, args.work)
    else:
        project(args.docs, args.project)


if __name__ == "__main__":
    main()
