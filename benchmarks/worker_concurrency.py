"""One Celery worker process (threads pool, concurrency 50) answering 50 chats at once,
each reply a ~3-second stream from the loopback server.

Prints:

* the wall time of the 50 replies (from the commit that queues their 50 tasks to the last
  reply stored)
  over one 3-second stream read alone with httpx (target: at most 1.3);
* the worker's peak memory (resident set, ``VmHWM``);
* the delay from the worker's publish of an event to its receipt by a follower reading
  the chat's Redis Stream (p50 and p99 over every event; target p50 under 10 ms), each
  chat followed by its own thread, as SSE views do.

Needs PostgreSQL and Redis (a worker process cannot share SQLite's throwaway database):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/15 \\
        .venv/bin/python benchmarks/worker_concurrency.py [--chats 50] [--seconds 3]

The database ``llmchat_bench`` is recreated; the broker is database 14 of that Redis.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from _django import ROOT, setup

HERE = Path(__file__).resolve().parent
SERVER = """
import sys
from django_llmchat.testing import FakeProviderServer, Reply
reply = Reply("Streaming tokens from a fake model, one small piece at a time. " * 4,
              chunk_size=8, usage={"input_tokens": 12, "output_tokens": 64})
FakeProviderServer(port=int(sys.argv[1]), default=reply, chunk_delay=float(sys.argv[2])).start()
print("serving", flush=True)
import time
while True:
    time.sleep(3600)
"""


def redis_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one stream")
    parser.add_argument("--pool", action="store_true", help="psycopg pool in the worker")
    args = parser.parse_args()

    database_url, redis_url = os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL")
    if not database_url or not redis_url:
        sys.exit("set DATABASE_URL (PostgreSQL) and REDIS_URL to run this benchmark")

    from django_llmchat.testing import FakeProviderServer, Fault, Reply

    text = "Streaming tokens from a fake model, one small piece at a time. " * 4
    reply = Reply(text, chunk_size=8, usage={"input_tokens": 12, "output_tokens": 64})
    frames = 40  # about len(text) / 8 deltas plus the envelope of the Responses API
    server = FakeProviderServer(default=reply)
    server.start()
    port = server.port
    prefix = f"llmchat-bench-{uuid.uuid4().hex[:8]}"
    llmchat = {
        "DEFAULT_PROVIDER": "openai",
        "DEFAULT_MODEL": "gpt-4.1-mini",
        "PROVIDERS": server.provider_settings(api_key="bench-key"),
        "EVENTS_URL": redis_url,
        "EVENTS_KEY_PREFIX": prefix,
        "EVENTS_TTL": 600,
    }
    setup(llmchat)
    import httpx
    from celery import Celery
    from django.db import connection, transaction

    from django_llmchat import streams
    from django_llmchat.models import Chat, Message

    # calibrate the delay between frames so one stream lasts --seconds
    def one_stream(delay: float) -> float:
        server.script(Fault(chunk_delay=delay, reply=reply))
        started = time.perf_counter()
        with httpx.stream(
            "POST",
            server.base_url("openai") + "/responses",
            json={"model": "gpt-4.1-mini", "input": "hi", "stream": True},
            timeout=60,
        ) as response:
            for _ in response.iter_bytes():
                pass
        return time.perf_counter() - started

    delay = args.seconds / frames
    measured = one_stream(delay)
    delay *= args.seconds / measured
    baseline = one_stream(delay)
    server.stop()
    # the model runs in its own process, so the followers here do not slow its pacing
    model = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), repr(delay)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert model.stdout.readline().strip() == "serving"

    queue = f"llmchat-bench-{uuid.uuid4().hex[:8]}"
    broker = redis_db(redis_url, 14)
    ready = Path(tempfile.mkdtemp()) / "ready"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "_celery_worker",
        "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
        "BENCH_DB_NAME": connection.settings_dict["NAME"],
        "BENCH_LLMCHAT": json.dumps(llmchat),
        "BENCH_BROKER_URL": broker,
        "BENCH_QUEUE": queue,
        "BENCH_READY_FILE": str(ready),
    }
    if args.pool:
        env["BENCH_DB_POOL"] = json.dumps({"min_size": 4, "max_size": args.concurrency})
    command = [
        sys.executable, "-m", "celery", "-A", "_celery_worker", "worker",
        "--pool", "threads", "--concurrency", str(args.concurrency),
        "-Q", queue, "-l", "warning",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    worker = subprocess.Popen(command, cwd=HERE, env=env)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if worker.poll() is not None or time.monotonic() > deadline:
                sys.exit("the worker did not start")
            time.sleep(0.05)

        sender = Celery("bench-sender", broker=broker, set_as_current=False)
        sender.conf.task_default_queue = queue
        sender.set_current()

        # warm up: replies through the worker (imports, connections, clients)
        warm = [Chat.objects.create() for _ in range(4)]
        for chat in warm:
            chat.ask_later("warm up")
        while Message.objects.filter(chat__in=warm, role="assistant").count() < len(warm):
            time.sleep(0.05)

        chats = [Chat.objects.create() for _ in range(args.chats)]
        delays: list[float] = []
        delays_lock = threading.Lock()
        run_starts: list[float] = []
        start_ids = {chat.pk: streams.last_id(chat.pk) for chat in chats}

        def follow(chat_id: int) -> None:
            client = streams.client()
            key = streams.stream_key(chat_id)
            cursor = start_ids[chat_id]
            mine = []
            end = time.monotonic() + 60
            while time.monotonic() < end:
                response = client.xread({key: cursor}, count=200, block=1000)
                now = time.time()
                if not response:
                    continue
                finished = False
                for entry_id, fields in response[0][1]:
                    cursor = entry_id
                    mine.append(now - float(fields["ts"]))
                    event = streams.decode(fields)
                    if event.type == "run_started":
                        run_starts.append(float(fields["ts"]))
                    finished = finished or event.type == "run_finished"
                if finished:
                    break
            with delays_lock:
                delays.extend(mine)

        followers = [threading.Thread(target=follow, args=(c.pk,)) for c in chats]
        for thread in followers:
            thread.start()
        time.sleep(0.2)
        cpu_before = cpu_seconds(worker.pid)
        # the prompts are saved in one transaction: its commit sends the 50 tasks at once
        with transaction.atomic():
            for i, chat in enumerate(chats):
                chat.ask_later(f"Tell me something ({i})")
            started = time.perf_counter()
            started_at = time.time()
        while Message.objects.filter(chat__in=chats, role="assistant").count() < len(chats):
            time.sleep(0.01)
        wall = time.perf_counter() - started
        for thread in followers:
            thread.join(30)
        peak = peak_rss_mib(worker.pid)
        cpu = cpu_seconds(worker.pid) - cpu_before
        from django_llmchat.models import Usage

        streamed = [
            ms / 1000
            for ms in Usage.objects.filter(chat__in=chats).values_list("duration_ms", flat=True)
        ]
    finally:
        worker.terminate()
        worker.wait(30)
        model.terminate()
        model.wait(10)
        client = streams.client()
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
        broker_client = client.from_url(broker)
        keys = list(broker_client.scan_iter(match=f"*{queue}*", count=1000))
        if keys:
            broker_client.delete(*keys)

    ms = [d * 1000 for d in delays]
    print(f"worker: threads pool, concurrency {args.concurrency}, {args.chats} chats")
    print(f"one stream alone (httpx):    {baseline:6.2f} s")
    print(f"{args.chats} replies through the worker: {wall:6.2f} s")
    print(f"ratio (target <= 1.3):        {wall / baseline:6.2f}")
    waits = [t - started_at for t in run_starts]
    print(
        f"  runs started "
        f"{min(waits):.2f}..{max(waits):.2f} s after the first; provider streams lasted "
        f"{min(streamed):.2f}..{max(streamed):.2f} s (median {statistics.median(streamed):.2f})"
    )
    print(
        f"  worker CPU time for the {args.chats} runs: {cpu:.2f} s; "
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    print(f"worker peak RSS:              {peak:6.1f} MiB")
    print(
        f"publish -> follower delay:    p50 {statistics.median(ms):.2f} ms, "
        f"p99 {percentile(ms, 99):.2f} ms over {len(ms)} events (target p50 < 10 ms)"
    )


if __name__ == "__main__":
    main()
