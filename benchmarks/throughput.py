"""Replies per second through Celery workers as processes are added: 200 prompts over 50
chats (four each, asked one after another, so a chat's runs wait for each other as they
must), a model with a fixed latency (``--latency``, 200 ms to the first byte), the same
threads in all (``--threads`` 20: one process of 20, two of 10, four of 5), each process
on a psycopg pool smaller than its threads.

Prints, per layout: replies/s, p50 and p99 end to end (a prompt's commit to its reply
stored), and the aim: replies/s at least 0.8 x threads / latency (bounded by the chats'
own order: at most min(threads, chats) runs at once) and growing with processes while
the CPUs last (this machine's count is printed beside).

Needs PostgreSQL and Redis:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/15 \\
        .venv/bin/python benchmarks/throughput.py [--prompts 200] [--chats 50] [--threads 20]

The database ``llmchat_bench`` is recreated; the broker is database 14 of that Redis.
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
from pathlib import Path

from _django import ROOT, setup
from worker_concurrency import percentile, redis_db

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


def start_workers(processes: int, threads: int, env: dict, queue: str) -> list:
    workers = []
    for n in range(processes):
        ready = Path(tempfile.mkdtemp()) / "ready"
        pool = {"min_size": 1, "max_size": max(2, threads // 2), "timeout": 30}
        command = [
            sys.executable, "-m", "celery", "-A", "_celery_worker", "worker",
            "--pool", "threads", "--concurrency", str(threads), "-n", f"bench{n}@%h",
            "-Q", queue, "-l", "warning",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        worker_env = {**env, "BENCH_READY_FILE": str(ready), "BENCH_DB_POOL": json.dumps(pool)}
        workers.append((subprocess.Popen(command, cwd=HERE, env=worker_env), ready))
    deadline = time.monotonic() + 60
    for proc, ready in workers:
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit("a worker did not start")
            time.sleep(0.05)
    return [proc for proc, _ in workers]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--threads", type=int, default=20, help="threads in all, per layout")
    parser.add_argument("--latency", type=float, default=0.2, help="the model's first byte (s)")
    parser.add_argument("--layouts", default="1,2,4", help="processes per layout")
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
    from django.db import connection, transaction
    from django.db.models import F

    from django_llmchat.models import Chat, Message, Run

    broker = redis_db(redis_url, 14)
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
                started = time.perf_counter()
                # prompts in rounds over the chats, a round committed at once (its
                # commit sends the round's tasks)
                for first in range(0, args.prompts, len(chats)):
                    with transaction.atomic():
                        for i in range(first, min(first + len(chats), args.prompts)):
                            chats[i % len(chats)].ask_later(f"question {i}")
                want = args.prompts
                while Message.objects.filter(chat__in=chats, role="assistant").count() < want:
                    time.sleep(0.01)
                wall = time.perf_counter() - started
                ends = [
                    d.total_seconds()
                    for d in Run.objects.filter(chat__in=chats)
                    .annotate(took=F("finished_at") - F("created_at"))
                    .values_list("took", flat=True)
                ]
            finally:
                for proc in workers:
                    proc.terminate()
                for proc in workers:
                    proc.wait(30)
            results.append((processes, per, args.prompts / wall, ends))
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
    for processes, per, rate, ends in results:
        grew = "" if previous is None else f", x{rate / previous:.2f} the layout before"
        print(
            f"{processes} process(es) x {per} threads: {rate:6.1f} replies/s "
            f"({rate / bound:.2f} of the bound{grew}); end to end p50 "
            f"{percentile(ends, 50) * 1000:.0f} ms, p99 {percentile(ends, 99) * 1000:.0f} ms"
        )
        previous = rate
    best = max(rate for _, _, rate, _ in results)
    print(f"aim {'met' if best >= aim else 'not met'}: best {best:.1f} replies/s")


if __name__ == "__main__":
    main()
