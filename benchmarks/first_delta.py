"""The delay from a client's POST of a message to the first ``text_delta`` SSE frame
reaching that client, over the REST API served by a real HTTP server process, beside the
fake provider's own first-byte time measured in the same run.

Two paths, each prompt to a fresh chat (so every request sends a one-message transcript):

* **inline**: ``POST chats/{id}/messages/`` with ``Accept: text/event-stream``; the web
  process runs the loop and streams the reply in the response. Timed from just before the
  POST to the ``event: text_delta`` line read from the response.
* **worker**: the client first opens ``GET chats/{id}/events/`` (``: connected`` read, so
  the follower is in place), then ``POST``\\s the same endpoint with JSON (``202``); a real
  Celery worker (threads pool, Redis broker) runs the loop and publishes to the chat's Redis
  Stream (``LLMCHAT["EVENTS_URL"]``), which the web process relays on the open events
  response. Timed from just before the POST to the first ``event: text_delta`` line read
  from the events stream (by a reader thread, so the 202's own round trip does not delay
  the reading). The stream is opened before the POST: what is timed is the server's
  pipeline (request, commit, broker, worker, provider, Redis, relay), not the client's
  second connection; a client that connects after the 202 with the ``events_url`` of its
  body sees the same events, replayed from its ``last_event_id``.
* **provider**: a bare httpx POST (kept-alive client) to the fake server's ``/v1/responses``
  with a body of the shape the app sends, timed to the first SSE ``data:`` line.

The three take turns in each round (their order rotates), so a slow spell of a shared
machine hits them alike. "added" is, per round, the client's delay minus that round's
provider first byte; p50 and p99 are over the rounds. Aims: p50 added under 5 ms inline,
under 15 ms through the worker (printed as met or not).

The web server is ``tests.worker_settings`` (the test app's settings pointed at the bench
database, with the broker and the ``LLMCHAT`` dict from the environment) and
``tests.urls``, under a threaded ``wsgiref`` server (one thread per connection,
``TCP_NODELAY``) in a subprocess; gunicorn is not a dependency. Both the web process and
the worker use a psycopg connection pool. Authentication is DRF token authentication.

Needs PostgreSQL and Redis:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test REDIS_URL=redis://127.0.0.1:6379/15 \\
        .venv/bin/python benchmarks/first_delta.py [--prompts 200]

The database ``llmchat_bench_fd`` is recreated; the broker is database 14 of that Redis.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "llmchat_bench_fd"
MODEL = "gpt-4.1-mini"
TEXT = "Paris is the capital of France, on the Seine; about two million people live there."
AIMS = {"inline": 5.0, "worker": 15.0}  # p50 of the added delay, ms
WARMUP = 5

PROVIDER = """
import sys
from django_llmchat.testing import FakeProviderServer, Reply
reply = Reply(sys.argv[1], chunk_size=8, usage={"input_tokens": 12, "output_tokens": 20})
server = FakeProviderServer(default=reply).start()
print("serving", server.port, flush=True)
import time
while True:
    time.sleep(3600)
"""


# -- the web server (run as ``first_delta.py --serve`` in a subprocess) --------------------
def serve() -> None:
    """The test app (``tests.worker_settings``, ``tests.urls``) under a threaded wsgiref
    server on a free loopback port; prints ``serving <port>``."""
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.worker_settings"
    import django

    django.setup()
    from django.core.wsgi import get_wsgi_application

    import tests.celery_app  # noqa: F401  the current Celery app: the 202 path queues to Redis

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        request_queue_size = 64

    class Handler(WSGIRequestHandler):
        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format, *args) -> None:
            pass

    httpd = make_server("127.0.0.1", 0, get_wsgi_application(), Server, Handler)
    print("serving", httpd.server_address[1], flush=True)
    httpd.serve_forever()


# -- helpers ---------------------------------------------------------------------------------
def redis_db(url: str, db: int) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def start(command: list[str], env: dict, what: str) -> tuple[subprocess.Popen, int]:
    """A subprocess that prints ``serving <port>`` once ready."""
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline().split()
    if len(line) != 2 or line[0] != "serving":
        process.kill()
        sys.exit(f"the {what} did not start")
    return process, int(line[1])


def stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def setup_database(database_url: str, llmchat: dict) -> None:
    """Configure Django in this process like the test app and recreate ``DB_NAME``."""
    import dj_database_url
    import django
    from django.conf import settings

    import tests.settings as base

    database = dj_database_url.parse(database_url)
    database["TEST"] = {"NAME": DB_NAME}
    conf = {name: getattr(base, name) for name in dir(base) if name.isupper()}
    conf.update(DATABASES={"default": database}, LLMCHAT=llmchat)
    settings.configure(**conf)
    django.setup()
    from django.db import connection

    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)


# -- one measurement of each side -------------------------------------------------------------
def time_inline(client, url: str, chat_id: int, prompt: str) -> float:
    started = time.perf_counter()
    first = None
    with client.stream(
        "POST",
        f"{url}/api/chats/{chat_id}/messages/",
        json={"content": prompt},
        headers={"Accept": "text/event-stream"},
    ) as response:
        if response.status_code != 200:
            response.read()
            raise RuntimeError(f"inline POST: {response.status_code} {response.text[:300]}")
        for line in response.iter_lines():  # to the end, so the run finishes normally
            if first is None and line == "event: text_delta":
                first = time.perf_counter()
    if first is None:
        raise RuntimeError("inline: no text_delta in the response")
    return first - started


def time_worker(client, url: str, chat_id: int, prompt: str) -> tuple[float, float]:
    """(POST -> first text_delta on the events stream, POST -> 202)."""
    connected = threading.Event()
    seen: dict[str, float] = {}
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            with client.stream(
                "GET",
                f"{url}/api/chats/{chat_id}/events/",
                headers={"Accept": "text/event-stream"},
            ) as response:
                if response.status_code != 200:
                    response.read()
                    raise RuntimeError(f"events: {response.status_code} {response.text[:300]}")
                for line in response.iter_lines():
                    if line == ": connected":
                        connected.set()
                    elif line == "event: text_delta":
                        seen.setdefault("delta", time.perf_counter())
                    elif line == "event: run_finished":
                        break
        except BaseException as exc:
            failure.append(exc)
        finally:
            connected.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    connected.wait(30)
    if failure:
        raise failure[0]
    started = time.perf_counter()
    response = client.post(f"{url}/api/chats/{chat_id}/messages/", json={"content": prompt})
    accepted = time.perf_counter()
    if response.status_code != 202:
        raise RuntimeError(f"worker POST: {response.status_code} {response.text[:300]}")
    reader.join(60)
    if failure:
        raise failure[0]
    if "delta" not in seen:
        raise RuntimeError("worker: no text_delta on the events stream")
    return seen["delta"] - started, accepted - started


def time_provider(client, url: str, prompt: str) -> tuple[float, float]:
    """(first SSE data line, first text-delta data line) of a bare streaming POST."""
    body = {
        "model": MODEL,
        "input": [{"role": "user", "content": prompt}],
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    started = time.perf_counter()
    first = delta = None
    with client.stream("POST", f"{url}/v1/responses", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data:"):
                now = time.perf_counter()
                first = first or now
                if delta is None and '"response.output_text.delta"' in line:
                    delta = now
    if first is None or delta is None:
        raise RuntimeError("provider: no data line")
    return first - started, delta - started


# -- main -------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=200, help="timed rounds")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return

    database_url, redis_url = os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL")
    if not database_url or not redis_url:
        sys.exit("set DATABASE_URL (PostgreSQL) and REDIS_URL to run this benchmark")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}

    processes: list[subprocess.Popen] = []
    prefix = f"llmchat-bench-fd-{uuid.uuid4().hex[:8]}"
    queue = f"llmchat-bench-fd-{uuid.uuid4().hex[:8]}"
    broker = redis_db(redis_url, 14)
    try:
        command = [sys.executable, "-c", PROVIDER, TEXT]
        provider, provider_port = start(command, env, "fake provider")
        processes.append(provider)
        provider_url = f"http://127.0.0.1:{provider_port}"
        llmchat = {
            "DEFAULT_PROVIDER": "openai",
            "DEFAULT_MODEL": MODEL,
            "PROVIDERS": {"openai": {"api_key": "bench-key", "base_url": provider_url + "/v1"}},
            "MAX_RETRY_WAIT": 0.0,
            "EVENTS_URL": redis_url,
            "EVENTS_KEY_PREFIX": prefix,
            "EVENTS_TTL": 600,
        }
        setup_database(database_url, llmchat)
        from django.contrib.auth import get_user_model
        from rest_framework.authtoken.models import Token

        from django_llmchat.models import Chat

        user = get_user_model().objects.create_user("bench", password="bench")
        token = Token.objects.create(user=user).key
        rounds = WARMUP + args.prompts

        def chats() -> list[int]:
            return [
                Chat.objects.create(user=user, provider="openai", model_id=MODEL).pk
                for _ in range(rounds)
            ]

        inline_chats, worker_chats = chats(), chats()

        ready = Path(tempfile.mkdtemp()) / "ready"
        app_env = {
            **env,
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "LLMCHAT_TEST_DB_NAME": DB_NAME,
            "LLMCHAT_TEST_DB_POOL": json.dumps({"min_size": 4, "max_size": 16}),
            "LLMCHAT_TEST_SETTINGS": json.dumps(llmchat),
            "CELERY_BROKER_URL": broker,
            "LLMCHAT_TEST_QUEUE": queue,
            "LLMCHAT_TEST_READY_FILE": str(ready),
        }
        web, web_port = start(
            [sys.executable, str(Path(__file__).resolve()), "--serve"], app_env, "web server"
        )
        processes.append(web)
        web_url = f"http://127.0.0.1:{web_port}"
        command = [
            sys.executable, "-m", "celery", "--quiet", "-A", "tests.celery_app", "worker",
            "--pool", "threads", "--concurrency", "4", "-Q", queue, "-l", "warning",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]  # fmt: skip
        worker = subprocess.Popen(command, cwd=ROOT, env=app_env, stdout=subprocess.DEVNULL)
        processes.append(worker)
        deadline = time.monotonic() + 60
        while not ready.exists():
            if worker.poll() is not None or time.monotonic() > deadline:
                sys.exit("the worker did not start")
            time.sleep(0.05)

        import httpx

        timeout = httpx.Timeout(30.0)
        api = httpx.Client(headers={"Authorization": f"Token {token}"}, timeout=timeout)
        bare = httpx.Client(headers={"Authorization": "Bearer bench-key"}, timeout=timeout)
        results: dict[str, list[float]] = {
            "inline": [], "worker": [], "accepted": [], "provider": [], "provider_delta": [],
        }  # fmt: skip

        def run_side(side: str, i: int) -> None:
            prompt = f"What is the capital of France? ({i})"
            if side == "inline":
                value = time_inline(api, web_url, inline_chats[i], prompt)
                results["inline"].append(value)
            elif side == "worker":
                value, accepted = time_worker(api, web_url, worker_chats[i], prompt)
                results["worker"].append(value)
                results["accepted"].append(accepted)
            else:
                first, delta = time_provider(bare, provider_url, prompt)
                results["provider"].append(first)
                results["provider_delta"].append(delta)

        sides = ["inline", "worker", "provider"]
        for i in range(rounds):
            if i == WARMUP:
                for values in results.values():
                    values.clear()
            shift = i % len(sides)
            for side in sides[shift:] + sides[:shift]:
                run_side(side, i)
        api.close()
        bare.close()
    finally:
        for process in reversed(processes):
            stop(process)
        try:
            import redis

            for url, pattern in ((redis_url, f"{prefix}:*"), (broker, f"*{queue}*")):
                client = redis.Redis.from_url(url)
                keys = list(client.scan_iter(match=pattern, count=1000))
                if keys:
                    client.delete(*keys)
        except Exception as exc:  # cleanup only
            print(f"(redis cleanup failed: {exc})", file=sys.stderr)

    ms = {name: [v * 1000 for v in values] for name, values in results.items()}
    provider_ms = ms["provider"]
    n = len(provider_ms)
    print(f"first delta over {n} prompts (inline / worker / bare provider take turns)")
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; web: threaded "
        f"wsgiref, worker: Celery threads pool, PostgreSQL + Redis"
    )
    print(f"{'':38}{'p50':>9}{'p99':>9}")

    def row(label: str, values: list[float], tail: str = "") -> None:
        p50, p99 = percentile(values, 50), percentile(values, 99)
        print(f"{label:38}{p50:6.2f} ms{p99:6.2f} ms{tail}")

    row("provider: POST -> first data line", provider_ms)
    row("provider: POST -> first text delta", ms["provider_delta"])
    for side, label in (("inline", "inline: POST -> first text_delta"),
                        ("worker", "worker: POST -> first text_delta")):  # fmt: skip
        row(label, ms[side])
        added = [a - b for a, b in zip(ms[side], provider_ms, strict=True)]
        p50 = percentile(added, 50)
        verdict = "met" if p50 < AIMS[side] else "not met"
        aim = f"   aim p50 < {AIMS[side]:g} ms: {verdict}"
        row("  added (minus provider first byte)", added, aim)
        if side == "worker":
            row("  worker: POST -> 202", ms["accepted"])


if __name__ == "__main__":
    main()
