"""The CPU of one reply, this checkout against another, for changes too small for
``peers.py`` to tell from the machine's noise (a few per cent).

One process a checkout, taking turns round by round (the first of a round alternating):
each asks ``--replies`` replies a round (``Chat().ask()``, a new chat each ``--turns``
replies) after a warm-up and reports the round's CPU (the process's, every thread) and
wall time per reply. The loopback fake provider runs in this process, apart from the
sides' CPU. Printed: each side's fastest round and quartiles, their ratios (this checkout
to the other), and the quartiles of the ratios of rounds run next to each other. On a
shared machine the fastest rounds and the first quartiles move least with its load.

    .venv/bin/python benchmarks/reply_cpu.py --compare /path/to/other/checkout
    .venv/bin/python benchmarks/reply_cpu.py --compare ../base --turns 10 \\
        --postgres postgres://postgres@127.0.0.1:5432/llmchat

``--statements``: where this checkout's reply spends its database time instead. Each
kind of statement's count and time per reply, timed from the client around its
execution, the commits', and beside them one ``INSERT`` of a reply row and its commit in
the same database, committed on its own: what the bare SDK side of ``peers.py`` stores a
reply with.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MODEL = "gpt-4.1-mini"
REPLY = "The answer is forty-two, as it always was."


def _asker(url: str, turns: int, root: str | None = None):
    """Django set up with the provider at ``url`` (the checkout at ``root``, else this
    one); ``block(count)`` asks ``count`` replies, a new chat every ``turns``. Warmed up
    (imports, statements compiled, connections) before it is returned."""
    sys.path.insert(0, str(HERE))
    from _django import setup  # puts this checkout on the path

    if root:
        sys.path.insert(0, root)  # the checkout measured, first
    setup(
        {
            "DEFAULT_PROVIDER": "openai_compatible",
            "DEFAULT_MODEL": MODEL,
            "PROVIDERS": {"openai_compatible": {"api_key": "sk-bench", "base_url": url}},
        }
    )
    from django_llmchat.models import Chat

    def block(count: int) -> None:
        for number in range(count // turns):
            chat = Chat()
            for turn in range(turns):
                chat.ask(f"question {number} {turn}")

    block(max(100, turns * 10))
    return block


def serve_side(url: str, turns: int) -> None:
    """One process: the checkout it imported, then per line ``<replies>`` read, a line
    ``<cpu ms> <wall ms>`` per reply."""
    block = _asker(url, turns, os.environ["REPLY_CPU_ROOT"])
    import django_llmchat

    print(Path(django_llmchat.__file__).resolve().parent.parent, flush=True)
    for line in sys.stdin:
        replies = int(line)
        cpu, wall = time.process_time(), time.perf_counter()
        block(replies)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(f"{1000 * cpu / replies:.4f} {1000 * wall / replies:.4f}", flush=True)


class _Side:
    def __init__(self, name: str, root: Path, url: str, turns: int, postgres: str | None):
        env = {**os.environ, "REPLY_CPU_ROOT": str(root), "PYTHONPATH": str(root)}
        env.pop("DATABASE_URL", None)
        if postgres:  # each side a database of its own beside the one named
            env["DATABASE_URL"] = f"{postgres}_{name}"
        self.name, self.root = name, root
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--side", url, "--turns", str(turns)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        measured = self._line()
        if Path(measured) != root:
            sys.exit(f"the {name} side measured {measured}, not {root}")

    def _line(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"the {self.name} side ended (see its error output above)")
        return line.strip()

    def round(self, replies: int) -> tuple[float, float]:
        self.proc.stdin.write(f"{replies}\n")
        self.proc.stdin.flush()
        cpu, wall = self._line().split()
        return float(cpu), float(wall)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


_KIND = re.compile(r'(SELECT \* FROM \w+|INSERT INTO "\w+"|UPDATE "\w+"|DELETE FROM "\w+"|\w+)')


def statements(url: str, replies: int, turns: int) -> None:
    """This checkout's replies, each statement and commit timed from the client."""
    block = _asker(url, turns)
    from django.db import connection

    spent: dict[str, list] = {}

    def timed(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            kind = _KIND.match(sql.lstrip())
            entry = spent.setdefault(kind.group(0) if kind else sql[:40], [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - started

    commit = connection.commit

    def timed_commit():
        started = time.perf_counter()
        try:
            commit()
        finally:
            entry = spent.setdefault("(commit)", [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - started

    connection.commit = timed_commit
    started = time.perf_counter()
    with connection.execute_wrapper(timed):
        block(replies)
    wall = time.perf_counter() - started
    del connection.commit

    # the bare SDK side's store: one row a reply, in a table of its own, in autocommit
    key = "integer PRIMARY KEY" if connection.vendor == "sqlite" else "bigserial PRIMARY KEY"
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS reply_cpu_store (id {key}, conversation integer,"
            " role text, content text, raw text)"
        )
    started = time.perf_counter()
    for number in range(replies):
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO reply_cpu_store (conversation, role, content, raw)"
                " VALUES (%s, %s, %s, %s)",
                [number, "assistant", REPLY, None],
            )
    store = time.perf_counter() - started

    database = "PostgreSQL" if connection.vendor == "postgresql" else "SQLite"
    print(f"{database}, {turns}-turn chats, {replies} replies, this checkout ({ROOT})")
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"a reply: {1000 * wall / replies:.3f} ms; its database time, timed from the client:")
    print(f"{'':<48}{'a reply':>9}{'ms':>9}")
    total = 0.0
    for kind, (count, seconds) in sorted(spent.items(), key=lambda item: -item[1][1]):
        total += seconds
        print(f"{kind:<48}{count / replies:9.2f}{1000 * seconds / replies:9.3f}")
    print(f"{'all':<48}{'':>9}{1000 * total / replies:9.3f}")
    print(f"{'one INSERT of a reply row and its commit':<48}{1:9.2f}{1000 * store / replies:9.3f}")


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, middle, high = statistics.quantiles(values, n=4)
    return low, middle, high


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", type=Path, help="another checkout of django-llmchat")
    parser.add_argument("--replies", type=int, default=200, help="replies a round")
    parser.add_argument("--rounds", type=int, default=30, help="rounds a side")
    parser.add_argument("--turns", type=int, default=1, help="replies a chat")
    parser.add_argument("--postgres", help="a PostgreSQL URL (default: SQLite)")
    parser.add_argument(
        "--statements", action="store_true", help="this checkout's database time per reply"
    )
    parser.add_argument("--side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return serve_side(args.side, args.turns)
    if args.replies % args.turns:
        parser.error("--replies must be a multiple of --turns (whole chats)")
    if args.statements and args.compare:
        parser.error("--statements measures this checkout alone: no --compare")
    roots = {"this": ROOT}
    if args.compare:
        if not (args.compare / "django_llmchat").is_dir():
            parser.error(f"--compare {args.compare}: no django_llmchat package there")
        roots["other"] = args.compare.resolve()

    sys.path.insert(0, str(ROOT))
    from django_llmchat.testing import FakeProviderServer, Reply

    server = FakeProviderServer(
        default=Reply(REPLY, usage={"input_tokens": 20, "output_tokens": 8})
    ).start()
    url = server.base_url("openai")
    if args.statements:
        if args.postgres:  # a database of its own beside the one named
            os.environ["DATABASE_URL"] = f"{args.postgres}_statements"
        else:
            os.environ.pop("DATABASE_URL", None)
        try:
            return statements(url, args.replies * args.rounds, args.turns)
        finally:
            server.stop()
    sides = [_Side(name, root, url, args.turns, args.postgres) for name, root in roots.items()]
    measured: dict[str, list[tuple[float, float]]] = {side.name: [] for side in sides}
    try:
        for number in range(args.rounds):  # the sides take turns, the first one alternating
            for side in sides[number % len(sides) :] + sides[: number % len(sides)]:
                measured[side.name].append(side.round(args.replies))
            server.reset()
    finally:
        for side in sides:
            side.close()
        server.stop()

    database = "PostgreSQL" if args.postgres else "SQLite"
    print(
        f"{database}, {args.turns}-turn chats, {args.replies} replies a round, {args.rounds} rounds"
    )
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'ms per reply':<30}{'min':>8}{'q1':>8}{'median':>8}{'q3':>8}")
    for side in sides:
        for index, kind in enumerate(("cpu", "wall")):
            values = [pair[index] for pair in measured[side.name]]
            label = f"{side.name} ({side.root.name}) {kind}"
            print(f"{label:<30}" + "".join(f"{x:8.3f}" for x in _spread(values)))
    if len(sides) == 2:
        print("this / other: the ratio of the sides' figures above (min, q1, median, q3),")
        print("then the quartiles of the ratios of rounds run next to each other")
        for index, kind in enumerate(("cpu", "wall")):
            this = [pair[index] for pair in measured["this"]]
            other = [pair[index] for pair in measured["other"]]
            of_sides = [a / b for a, b in zip(_spread(this), _spread(other), strict=True)]
            print(f"{kind + ', the sides':<30}" + "".join(f"{x:8.3f}" for x in of_sides))
            rounds = [a / b for a, b in zip(this, other, strict=True)]
            print(
                f"{kind + ', round by round':<30}{'':>8}"
                + "".join(f"{x:8.3f}" for x in _quartiles(rounds))
            )


def _spread(values: list[float]) -> tuple[float, ...]:
    return (min(values), *_quartiles(values))


if __name__ == "__main__":
    main()
