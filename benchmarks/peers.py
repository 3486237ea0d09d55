"""django-llmchat beside its peers: the time of one stored reply, as a ratio to a floor.

Every side answers the same prompts from the same loopback fake server
(``django_llmchat.testing.FakeProviderServer``, Chat Completions, non-streaming) and stores
each reply in SQLite (a file of its own, WAL, ``synchronous=NORMAL``) and, with
``--postgres URL`` (or ``DATABASE_URL`` naming a PostgreSQL server), in PostgreSQL too (a
database of the benchmark's own on that server):

* ``floor``: one reused ``httpx.Client`` POST and one ``INSERT`` of the reply;
* ``django-llmchat``: ``chat.ask()`` (prompt, run, reply, tool calls, usage and cost rows);
* ``openai``: the openai SDK's ``chat.completions.create`` and one ``INSERT``;
* ``litellm``: ``litellm.completion`` and one ``INSERT``;
* ``pydantic-ai``: ``Agent.run_sync`` with the message history, its new messages stored
  (``new_messages_json()``, one ``INSERT``);
* ``llm``: simonw/llm's conversation ``prompt()`` with ``log_to_db`` (its own tables).

Two shapes: 1-turn (every reply a new conversation) and 10-turn (conversations of ten
turns, each request sending the history so far, as a chat does). Each side runs in its own
process (the server in this one), warmed up untimed first; then the sides take turns, a
block of replies each, round after round and in a rotating order, so a slow spell of the
machine hits them alike. Times are measured inside each side's process around its block,
by the wall clock and by the process's CPU clock (the server runs in another process, so
a side's CPU time is its own work: building the request, parsing the answer, storing it);
printed are ms per reply and the ratio to the floor, of the totals over all rounds, one
table per database. The sides ``llm`` (its own SQLite tables) and ``pydantic-ai``,
``litellm`` store in SQLite only unless psycopg is installed beside them.

The peers are installed, the first time, into ``benchmarks/.peers-venv`` (a venv of their
own, from PyPI); ``--no-install`` skips sides whose packages are missing there.

    python benchmarks/peers.py [--rounds 10] [--block 10] [--sides floor,django-llmchat,...]
        [--postgres postgres://postgres@127.0.0.1:5432/test] [--databases sqlite,postgres]
        [--compare ../other-checkout]

``--compare DIR`` adds a django-llmchat side running the checkout in ``DIR`` (another
commit), side by side in the same run: a change's before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEERS_VENV = HERE / ".peers-venv"
PEER_PACKAGES = {
    "openai": ["openai>=1.60"],
    "litellm": ["litellm>=1.60"],
    "pydantic-ai": ["pydantic-ai-slim[openai]>=1.0"],
    "llm": ["llm>=0.27"],
}
SIDES = ("floor", "django-llmchat", "openai", "litellm", "pydantic-ai", "llm")
MODEL = "gpt-4.1-mini"
KEY = "bench-key"
REPLY = "The capital of France is Paris."
SHAPES = (1, 10)  # turns per conversation
POSTGRES_SIDES = ("floor", "django-llmchat", "openai", "litellm", "pydantic-ai")


# -- the orchestrator ------------------------------------------------------------------------


def peers_python(install: bool) -> Path:
    python = PEERS_VENV / "bin" / "python"
    if not python.exists():
        if not install:
            return python
        print(f"creating {PEERS_VENV} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    missing = [
        spec for side, specs in PEER_PACKAGES.items() for spec in specs if not _has(python, side)
    ]
    if not _has(python, "psycopg"):  # the sides' INSERTs into PostgreSQL
        missing.append("psycopg[binary]>=3.2")
    if missing and install:
        print(f"installing {' '.join(missing)} into {PEERS_VENV} ...", flush=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "httpx", *missing], check=True
        )
    return python


def _has(python: Path, side: str) -> bool:
    module = {
        "pydantic-ai": "pydantic_ai",
        "llm": "llm",
        "openai": "openai",
        "litellm": "litellm",
        "psycopg": "psycopg",
    }
    if not python.exists():
        return False
    done = subprocess.run([str(python), "-c", f"import {module[side]}"], capture_output=True)
    return done.returncode == 0


class Side:
    """One side's process: told ``<conversations> <turns>``, it answers the seconds spent."""

    def __init__(
        self, name: str, python: Path, url: str, workdir: Path, database: str, root: Path = ROOT
    ):
        self.name, self.database = name, database
        if root != ROOT:  # another checkout of django-llmchat, side by side with this one
            self.name = f"{name}@{root.name}"
        env = {**os.environ, "PYTHONPATH": str(root), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env["PEERS_LLMCHAT_ROOT"] = str(root)
        env["LLM_USER_PATH"] = str(workdir / "llm")
        env.pop("DATABASE_URL", None)
        if database != "sqlite":  # another checkout: a database of its own beside it
            env["DATABASE_URL"] = database + ("" if root == ROOT else f"_{root.name}")
        self.proc = subprocess.Popen(
            [str(python), str(Path(__file__).resolve()), "--side", name, "--url", url,
             "--workdir", str(workdir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        self.ready = self._read()

    def _read(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} side ended (see its error output above)")
        return line.strip()

    def run(self, conversations: int, turns: int) -> tuple[float, float]:
        """The block's wall and CPU seconds."""
        self.proc.stdin.write(f"{conversations} {turns}\n")
        self.proc.stdin.flush()
        wall, cpu = self._read().split()
        return float(wall), float(cpu)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def _postgres_url(given: str | None) -> str | None:
    url = given or os.environ.get("DATABASE_URL", "")
    return url if url.startswith(("postgres://", "postgresql://")) else None


def _fresh_database(url: str, suffix: str) -> str:
    """A database named after ``url``'s with ``suffix`` added, created anew on its server;
    its URL."""
    import psycopg

    base, _, name = url.rpartition("/")
    name = (name.split("?")[0] or "postgres") + suffix
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"{base}/{name}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=10, help="replies per side per turn")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--postgres", help="a PostgreSQL server's URL (default: DATABASE_URL)")
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument(
        "--compare", type=Path, help="another checkout: its django-llmchat side beside this one"
    )
    parser.add_argument("--no-install", action="store_true")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return serve_side(args.side, args.url, Path(args.workdir))
    if args.block % 10:
        parser.error("--block must be a multiple of 10 (whole 10-turn conversations)")
    names = [s for s in args.sides.split(",") if s]
    unknown = set(names) - set(SIDES)
    if unknown:
        parser.error(f"unknown sides: {', '.join(sorted(unknown))}; known: {', '.join(SIDES)}")
    wanted = [d for d in args.databases.split(",") if d]
    if set(wanted) - {"sqlite", "postgres"}:
        parser.error("--databases takes sqlite and postgres")
    postgres = _postgres_url(args.postgres)
    databases = ["sqlite"] if "sqlite" in wanted else []
    if "postgres" in wanted and postgres:
        databases.append(_fresh_database(postgres, "_peers"))
    elif "postgres" in wanted:
        print("PostgreSQL: no server given (--postgres URL or DATABASE_URL): SQLite only")

    sys.path.insert(0, str(ROOT))
    from django_llmchat.testing import FakeProviderServer, Reply

    server = FakeProviderServer(
        default=Reply(REPLY, usage={"input_tokens": 20, "output_tokens": 8})
    ).start()
    peers = None
    if any(name in PEER_PACKAGES for name in names):
        peers = peers_python(install=not args.no_install)
    sides: list[Side] = []
    workroot = Path(tempfile.mkdtemp(prefix="llmchat-peers-"))
    for database in databases:
        for name in names:
            if database != "sqlite" and name not in POSTGRES_SIDES:
                continue
            python = Path(sys.executable) if name not in PEER_PACKAGES else peers
            if name in PEER_PACKAGES and not _has(python, name):
                print(f"skipping {name}: not installed in {PEERS_VENV}")
                continue
            roots = [ROOT]
            if name == "django-llmchat" and args.compare:
                roots.append(args.compare.resolve())
            for root in roots:
                workdir = workroot / f"{name}-{len(sides)}"
                workdir.mkdir()
                side = Side(name, python, server.base_url("openai"), workdir, database, root)
                print(f"{side.name} ({_label(database)}): {side.ready}", flush=True)
                sides.append(side)

    for side in sides:  # untimed warm-up: imports, pools, prepared statements, caches
        for turns in SHAPES:
            side.run(args.block // turns, turns)

    spent = {(id(side), turns): [0.0, 0.0] for side in sides for turns in SHAPES}
    for number in range(args.rounds):
        order = sides[number % len(sides) :] + sides[: number % len(sides)]
        for turns in SHAPES:
            for side in order:
                wall, cpu = side.run(args.block // turns, turns)
                spent[id(side), turns][0] += wall
                spent[id(side), turns][1] += cpu
            server.reset()  # its record of requests, not anyone's state
    for side in sides:
        side.close()
    server.stop()
    report(sides, spent, args.block * args.rounds, args.rounds)


def _label(database: str) -> str:
    return "SQLite" if database == "sqlite" else "PostgreSQL"


def report(sides: list[Side], spent: dict, replies: int, rounds: int) -> None:
    """One table per database: ms per reply (wall, CPU) and the ratio to its floor."""
    print()
    print(f"{replies} replies per side, shape and database, {rounds} rounds, interleaved")
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for database in dict.fromkeys(side.database for side in sides):
        mine = [side for side in sides if side.database == database]
        floor = next((side for side in mine if side.name == "floor"), None)
        print()
        print(_label(database))
        print(
            f"{'side':<24}{'1-turn ms':>11}{'ratio':>7}{'cpu ms':>8}"
            f"{'10-turn ms':>12}{'ratio':>7}{'cpu ms':>8}"
        )
        for side in mine:
            cells = []
            for turns, width in zip(SHAPES, (11, 12), strict=True):
                wall, cpu = spent[id(side), turns]
                base = spent[id(floor), turns][0] if floor else 0.0
                ratio = f"{wall / base:.2f}" if base else "-"
                ms, cpu_ms = wall / replies * 1000, cpu / replies * 1000
                cells.append(f"{ms:>{width}.2f}{ratio:>7}{cpu_ms:>8.2f}")
            print(f"{side.name:<24}{''.join(cells)}")


# -- the sides ----------------------------------------------------------------------------------


def serve_side(name: str, url: str, workdir: Path) -> None:
    """Answer ``<conversations> <turns>`` lines with the seconds one block took."""
    reply_block = SIDE_FACTORIES[name](url, workdir)
    print(f"ready (Python {sys.version.split()[0]})", flush=True)
    counter = 0
    for line in sys.stdin:
        conversations, turns = (int(x) for x in line.split())
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(conversations):
            ask = reply_block()
            for _ in range(turns):
                counter += 1
                ask(f"question {counter}")
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"{wall:.9f} {cpu:.9f}", flush=True)


class _Store:
    """``store.insert(conversation, role, content, raw)``: one INSERT of a reply, its own
    commit, into SQLite (a file in ``workdir``, WAL, ``synchronous=NORMAL``) or, when the
    side runs with ``DATABASE_URL``, into a table of the side's own in that PostgreSQL
    database."""

    def __init__(self, workdir: Path, name: str):
        url = os.environ.get("DATABASE_URL")
        table = "reply_" + name.replace("-", "_")
        if url:
            import psycopg

            self.db = psycopg.connect(url, autocommit=True)  # one INSERT, one commit
            self.db.execute(f"DROP TABLE IF EXISTS {table}")
            self.db.execute(
                f"CREATE TABLE {table} (id bigserial PRIMARY KEY, conversation integer, "
                "role text, content text, raw text)"
            )
            placeholders = "%s, %s, %s, %s"
        else:
            self.db = sqlite3.connect(workdir / f"{name}.sqlite3", isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute(
                f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, conversation INTEGER, "
                "role TEXT, content TEXT, raw TEXT)"
            )
            placeholders = "?, ?, ?, ?"
        self.sql = f"INSERT INTO {table} (conversation, role, content, raw) VALUES ({placeholders})"

    def insert(self, conversation: int, role: str, content: str, raw: str | None) -> None:
        self.db.execute(self.sql, (conversation, role, content, raw))


def floor_side(url: str, workdir: Path):
    import httpx

    client = httpx.Client(headers={"Authorization": f"Bearer {KEY}"})
    db = _Store(workdir, "floor")
    endpoint = url + "/chat/completions"
    conversation = [0]

    def new():
        conversation[0] += 1
        number = conversation[0]
        history: list[dict] = []

        def ask(prompt: str) -> None:
            history.append({"role": "user", "content": prompt})
            answer = client.post(endpoint, json={"model": MODEL, "messages": history}).json()
            text = answer["choices"][0]["message"]["content"]
            history.append({"role": "assistant", "content": text})
            db.insert(number, "assistant", text, None)

        return ask

    return new


def llmchat_side(url: str, workdir: Path):
    sys.path.insert(0, str(HERE))
    from _django import setup  # DATABASE_URL: a database beside it (its name + "_bench")

    # the checkout measured (--compare: another one), ahead of this one on the path
    sys.path.insert(0, os.environ.get("PEERS_LLMCHAT_ROOT", str(ROOT)))

    setup(
        {
            "DEFAULT_PROVIDER": "openai_compatible",
            "DEFAULT_MODEL": MODEL,
            "PROVIDERS": {"openai_compatible": {"api_key": KEY, "base_url": url}},
        }
    )
    from django_llmchat.models import Chat
    from django_llmchat.runs import admission

    # an older checkout (--compare) saves the chat before its first prompt
    saved_with_prompt = "saved here, in the admission" in (admission.enqueue.__doc__ or "")

    def new():
        # a new conversation is a Chat row here (counted: llm's log_to_db writes its
        # conversation row too), saved with its first prompt
        chat = Chat() if saved_with_prompt else Chat.objects.create()
        return chat.ask

    return new


def openai_side(url: str, workdir: Path):
    from openai import OpenAI

    client = OpenAI(base_url=url, api_key=KEY, max_retries=0)
    db = _Store(workdir, "openai")
    conversation = [0]

    def new():
        conversation[0] += 1
        number = conversation[0]
        history: list[dict] = []

        def ask(prompt: str) -> None:
            history.append({"role": "user", "content": prompt})
            answer = client.chat.completions.create(model=MODEL, messages=history)
            text = answer.choices[0].message.content
            history.append({"role": "assistant", "content": text})
            db.insert(number, "assistant", text, None)

        return ask

    return new


def litellm_side(url: str, workdir: Path):
    import litellm

    litellm.telemetry = False
    db = _Store(workdir, "litellm")
    conversation = [0]

    def new():
        conversation[0] += 1
        number = conversation[0]
        history: list[dict] = []

        def ask(prompt: str) -> None:
            history.append({"role": "user", "content": prompt})
            answer = litellm.completion(
                model=f"openai/{MODEL}", messages=history, api_base=url, api_key=KEY
            )
            text = answer.choices[0].message.content
            history.append({"role": "assistant", "content": text})
            db.insert(number, "assistant", text, None)

        return ask

    return new


def pydantic_ai_side(url: str, workdir: Path):
    from pydantic_ai import Agent

    try:
        from pydantic_ai.models.openai import OpenAIChatModel as ChatModel
    except ImportError:  # releases before 1.0
        from pydantic_ai.models.openai import OpenAIModel as ChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = ChatModel(MODEL, provider=OpenAIProvider(base_url=url, api_key=KEY))
    agent = Agent(model)
    db = _Store(workdir, "pydantic-ai")
    conversation = [0]

    def new():
        conversation[0] += 1
        number = conversation[0]
        history: list = []

        def ask(prompt: str) -> None:
            result = agent.run_sync(prompt, message_history=history)
            history[:] = result.all_messages()
            db.insert(number, "messages", result.output, result.new_messages_json().decode())

        return ask

    return new


def llm_side(url: str, workdir: Path):
    (workdir / "llm").mkdir(exist_ok=True)
    (workdir / "llm" / "extra-openai-models.yaml").write_text(
        f"- model_id: bench\n  model_name: {MODEL}\n  api_base: {json.dumps(url)}\n"
    )
    import llm
    import sqlite_utils
    from llm.migrations import migrate

    db = sqlite_utils.Database(str(workdir / "llm.sqlite3"))
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    migrate(db)
    model = llm.get_model("bench")

    def new():
        conversation = model.conversation()

        def ask(prompt: str) -> None:
            response = conversation.prompt(prompt, key=KEY, stream=False)
            response.text()
            response.log_to_db(db)

        return ask

    return new


SIDE_FACTORIES = {
    "floor": floor_side,
    "django-llmchat": llmchat_side,
    "openai": openai_side,
    "litellm": litellm_side,
    "pydantic-ai": pydantic_ai_side,
    "llm": llm_side,
}


if __name__ == "__main__":
    main()
