"""Replies per second through Celery workers as processes are added: 200 prompts over 50
chats (four each, asked one after another, so a chat's runs wait for each other as they
must), a model with a fixed latency (``--latency``, 200 ms to the first byte), the same
threads in all (``--threads`` 20: one process of 20, two of 10, four of 5), each process
on a psycopg pool of half its threads (at least two).

The prompts are stored first, in one transaction (as many requests would have stored
them), and the clock starts at its commit, which sends their tasks: what is measured is
the workers draining that backlog, not this process asking.

Prints, per layout: replies/s, p50 and p99 end to end (the prompts' commit to a reply
stored), and the aim: replies/s at least 0.8 x threads / latency (bounded by the chats'
own order: at most min(threads, chats) runs at once) and growing with processes while
the CPUs last (this machine's count is printed beside). ``--details`` adds where the time
went: how long runs waited before a worker started them and how long they took, the
workers' CPU time, their tasks by outcome (with the threads' time in each), the retries
of tasks that found their chat busy, and the waits for a pooled connection.

Needs PostgreSQL and Redis:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/15 \
        .venv/bin/python benchmarks/throughput.py [--prompts 200] [--chats 50] [--threads 20]

The database named after ``DATABASE_URL``'s with ``_bench`` added (``test_bench`` here)
is recreated, so two people benchmarking on one server name their own databases. The
broker is database ``--broker-db`` (14) of that Redis, each layout on a queue of its own
(deleted afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import redis
from _django import ROOT, setup
from worker_concurrency import cpu_seconds, percentile, redis_db

HERE = Path(__file__).resolve().parent
SERVER = """
import sys, time
from django_llmchat.testing import FakeProviderServer, Reply
reply = Reply("A short answer from a slow model.", usage={"input_tokens": 12, "output_tokens": 8})
delay = float(sys.argv[2])
FakeProviderServer(port=int(sys.argv[1]), default=reply, first_byte_delay=delay).start()
print("serving", flush=True)
while True:
    time.sleep(3600)
"""


@dataclass
class Layout:
    """One layout's figures: replies/s, the runs' timestamps, the workers' CPU and stats."""

    processes: int
    threads: int
    rate: float
    wall: float
    sent: float  # seconds the prompts took to commit
    cpu: float
    times: list  # (the prompts' commit, started_at, finished_at) of each timed run
    firsts: list  # those of each chat's first prompt
    stats: Counter = field(default_factory=Counter)

    def ms(self, end: int, start: int, q: float, rows: list | None = None) -> int:
        """Percentile ``q`` of the runs' ``times[end] - times[start]``, in ms."""
        spans = [(row[end] - row[start]).total_seconds() for row in rows or self.times]
        return round(percentile(spans, q) * 1000)

    def print_details(self) -> None:
        stats = self.stats
        print(f"    the prompts took {self.sent:.2f} s to commit")
        print(
            f"    queued (prompt to run started) p50 {self.ms(1, 0, 50)} ms, "
            f"p99 {self.ms(1, 0, 99)} ms; working (started to reply stored) p50 "
            f"{self.ms(2, 1, 50)} ms, p99 {self.ms(2, 1, 99)} ms"
        )
        print(
            f"    each chat's first prompt, end to end: p50 {self.ms(2, 0, 50, self.firsts)} ms, "
            f"p99 {self.ms(2, 0, 99, self.firsts)} ms"
        )
        print(
            f"    workers' CPU {self.cpu:.2f} s for {self.wall:.2f} s of wall time "
            f"({self.cpu / len(self.times) * 1000:.1f} ms a reply)"
        )
        tasks = ", ".join(
            f"{stats[key]} {key.removeprefix('tasks ')} ({stats['seconds ' + key[6:]]:.1f} s)"
            for key in sorted(stats)
            if key.startswith("tasks ")
        )
        print(f"    tasks by outcome (their threads' time): {tasks or 'none'}")
        if stats["retries"]:
            print(
                f"    retries: {stats['retries']}, countdown "
                f"{stats['retry countdown seconds'] / stats['retries']:.1f} s on average"
            )
        if "pool requests_num" in stats:
            print(
                f"    pool: {stats['pool requests_num']} connections lent, "
                f"{stats.get('pool requests_queued', 0)} had to wait "
                f"({stats.get('pool requests_wait_ms', 0)} ms in all), "
                f"{stats.get('pool connections_num', 0)} connections opened"
            )


def start_workers(processes: int, threads: int, env: dict, queue: str) -> list:
    """Start the worker processes; returns ``(process, stats file)`` pairs."""
    workers = []
    for n in range(processes):
        folder = Path(tempfile.mkdtemp())
        ready = folder / "ready"
        pool = {"min_size": 1, "max_size": max(2, threads // 2), "timeout": 30}
        command = [
            sys.executable, "-m", "celery", "-A", "_celery_worker", "worker",
            "--pool", "threads", "--concurrency", str(threads), "-n", f"bench{n}@%h",
            "-Q", queue, "-l", "warning",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        worker_env = {
            **env,
            "BENCH_READY_FILE": str(ready),
            "BENCH_STATS_FILE": str(folder / "stats.json"),
            "BENCH_DB_POOL": json.dumps(pool),
        }
        workers.append((subprocess.Popen(command, cwd=HERE, env=worker_env), folder))
    deadline = time.monotonic() + 60
    for proc, folder in workers:
        while not (folder / "ready").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit("a worker did not start")
            time.sleep(0.05)
    return [(proc, folder / "stats.json") for proc, folder in workers]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=20, help="threads in all, per layout")
    parser.add_argument("--latency", type=float, default=0.2, help="the model's first byte (s)")
    parser.add_argument("--layouts", default="1,2,4", help="processes per layout")
    parser.add_argument("--broker-db", type=int, default=14, help="Redis database of the broker")
    parser.add_argument(
        "--details", action="store_true", help="where the time went, per layout (see docs)"
    )
    args = parser.parse_args()

    database_url, redis_url = os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL")
    if not database_url or not redis_url:
        sys.exit("set DATABASE_URL (PostgreSQL) and REDIS_URL to run this benchmark")

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), repr(args.latency)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert model.stdout.readline().strip() == "serving"
    llmchat = {
        "DEFAULT_PROVIDER": "openai",
        "DEFAULT_MODEL": "gpt-4.1-mini",
        "PROVIDERS": {
            "openai": {"api_key": "bench-key", "base_url": f"http://127.0.0.1:{port}/v1"}
        },
    }
    setup(llmchat)
    from celery import Celery
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from django_llmchat.models import Chat, Message, Run

    # the model registry, as a deployment has it (manage.py llmchat_sync_models): the
    # history is fitted to the model's context window
    call_command("llmchat_sync_models", verbosity=0)
    broker = redis_db(redis_url, args.broker_db)
    results = []
    try:
        for processes in [int(n) for n in args.layouts.split(",")]:
            per = max(1, args.threads // processes)
            queue = f"llmchat-bench-{uuid.uuid4().hex[:8]}"
            env = {
                **os.environ,
                "DJANGO_SETTINGS_MODULE": "_celery_worker",
                "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
                "BENCH_DB_NAME": connection.settings_dict["NAME"],
                "BENCH_LLMCHAT": json.dumps(llmchat),
                "BENCH_BROKER_URL": broker,
                "BENCH_QUEUE": queue,
            }
            workers = start_workers(processes, per, env, queue)
            try:
                sender = Celery("bench-sender", broker=broker, set_as_current=False)
                sender.conf.task_default_queue = queue
                sender.set_current()
                warm = [Chat.objects.create() for _ in range(processes * 2)]
                for chat in warm:
                    chat.ask_later("warm up")
                while Message.objects.filter(chat__in=warm, role="assistant").count() < len(warm):
                    time.sleep(0.05)
                chats = [Chat.objects.create() for _ in range(args.chats)]
                # every prompt stored first, in one transaction: its commit sends the
                # tasks (a chat's four in the order asked, round after round over the
                # chats), and the clock starts then; so neither this process's asks nor
                # the chats' locks they hold are in the measure
                with transaction.atomic():
                    for i in range(args.prompts):
                        chats[i % len(chats)].ask_later(f"question {i}")
                    cpu = [cpu_seconds(proc.pid) for proc, _ in workers]
                    committed = timezone.now()
                    started = time.perf_counter()
                sent = time.perf_counter() - started
                while (
                    Run.objects.filter(chat__in=chats, status=Run.SUCCEEDED).count() < args.prompts
                ):
                    time.sleep(0.05)
                cpu = sum(cpu_seconds(proc.pid) for proc, _ in workers) - sum(cpu)
                rows = Run.objects.filter(chat__in=chats).order_by("id")
                times, firsts, seen = [], [], set()
                for chat_id, started_at, finished_at in rows.values_list(
                    "chat_id", "started_at", "finished_at"
                ):
                    times.append((committed, started_at, finished_at))
                    if chat_id not in seen:  # the chat's first prompt
                        seen.add(chat_id)
                        firsts.append(times[-1])
                wall = (max(row[2] for row in times) - committed).total_seconds()
            finally:
                for proc, _ in workers:
                    proc.terminate()
                for proc, _ in workers:
                    proc.wait(60)
                # what is left (the copies of tasks that found their chat busy, waiting
                # to come back)
                client = redis.Redis.from_url(broker)
                client.delete(*client.scan_iter(match=f"*{queue}*"))
                client.close()
            stats: Counter = Counter()
            for _, path in workers:
                if path.exists():
                    stats.update(json.loads(path.read_text()))
            results.append(
                Layout(processes, per, args.prompts / wall, wall, sent, cpu, times, firsts, stats)
            )
    finally:
        model.terminate()
        model.wait(10)

    bound = min(args.threads, args.chats) / args.latency
    aim = 0.8 * bound
    print(
        f"{args.prompts} prompts over {args.chats} chats, model latency "
        f"{args.latency * 1000:.0f} ms, {args.threads} threads per layout, "
        f"{os.cpu_count()} CPUs"
    )
    print(f"bound by latency: {bound:.0f} replies/s; aim: at least {aim:.0f} replies/s")
    previous = None
    for layout in results:
        rate = layout.rate
        grew = "" if previous is None else f", x{rate / previous:.2f} the layout before"
        print(
            f"{layout.processes} process(es) x {layout.threads} threads: {rate:6.1f} replies/s "
            f"({rate / bound:.2f} of the bound{grew}); end to end p50 "
            f"{layout.ms(2, 0, 50)} ms, p99 {layout.ms(2, 0, 99)} ms"
        )
        if args.details:
            layout.print_details()
        previous = rate
    best = max(layout.rate for layout in results)
    print(f"aim {'met' if best >= aim else 'not met'}: best {best:.1f} replies/s")


if __name__ == "__main__":
    main()
