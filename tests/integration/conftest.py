"""Real Celery workers in other processes, on Redis, against the test database.

Every test here needs ``REDIS_URL`` (the event streams, in its own database; the broker is
its database 14 unless ``LLMCHAT_TEST_BROKER_URL`` names another, such as RabbitMQ's
``amqp://guest:guest@127.0.0.1:5672//`` in CI's rabbitmq cell) and a database a worker
process can share: PostgreSQL (``DATABASE_URL``).
On the default in-memory SQLite the tests are skipped with that reason (a worker process
cannot open another process's in-memory database); CI's PostgreSQL pass runs them all.

Workers are ``python -m celery -A tests.celery_app worker --pool threads`` subprocesses
(settings: ``tests/worker_settings.py``), reading the test database's name, the broker,
the queue and the ``LLMCHAT`` dict (providers pointed at this session's fake server) from
their environment. Each session uses its own queue and stream key prefix, so concurrent
runs on one Redis do not meet.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection
from django.test import override_settings

from tests.conftest import require_service
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
WORKER_START_TIMEOUT = 60.0  # a loaded 2-core CI machine has taken over 30 s


def redis_db_url(url: str, db: int) -> str:
    """``url`` with its database number replaced."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


def shared_database_or_skip() -> None:
    name = str(connection.settings_dict.get("NAME") or "")
    if connection.vendor == "sqlite" and (not name or ":memory:" in name or "mode=memory" in name):
        pytest.skip(
            "worker-process tests need a database another process can open; the test "
            "database is in-memory SQLite: set DATABASE_URL to PostgreSQL to run them"
        )


@dataclass
class Services:
    broker_url: str
    events_url: str
    queue: str
    prefix: str
    db_name: str
    llmchat: dict
    workers: list = field(default_factory=list)
    tasks_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="llmchat-tasks-")))

    def task_ended(self, task_id: str) -> str | None:
        """How task ``task_id`` ended in a worker (``"SUCCESS <outcome>"``, ``"FAILURE
        <error>"``), ``None`` while it has not (a retry is not an end)."""
        try:
            lines = (self.tasks_dir / task_id).read_text().splitlines()
        except FileNotFoundError:
            return None
        final = [line for line in lines if not line.startswith("RETRY")]
        return final[-1] if final else None

    def wait_task_ended(self, task_id: str, timeout: float = 30.0) -> str:
        """Wait for task ``task_id`` to end in a worker; returns how it ended."""
        return wait_until(
            lambda: self.task_ended(task_id),
            timeout=timeout,
            message=f"task {task_id} did not end within {timeout}s",
        )

    def sender(self, queue: str | None = None):
        """A Celery app sending to ``queue`` (default: the session's queue)."""
        from celery import Celery

        app = Celery("tests-sender", broker=self.broker_url, set_as_current=False)
        app.conf.update(
            task_default_queue=queue or self.queue,
            broker_transport_options={"visibility_timeout": 5},
        )
        return app

    def worker(self, *, queue: str | None = None, concurrency: int = 8, **env) -> Worker:
        worker = Worker(self, queue or self.queue, concurrency, env)
        self.workers.append(worker)
        return worker.start()


class Worker:
    """One ``celery worker --pool threads`` subprocess."""

    def __init__(self, services: Services, queue: str, concurrency: int, env: dict):
        self.services = services
        self.queue = queue
        self.concurrency = concurrency
        self.extra_env = env
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(
            prefix="llmchat-worker-", suffix=".log", delete=False
        )

    def start(self) -> Worker:
        s = self.services
        ready = Path(tempfile.mkdtemp(prefix="llmchat-worker-")) / "ready"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "LLMCHAT_TEST_DB_NAME": s.db_name,
            "LLMCHAT_TEST_SETTINGS": json.dumps(s.llmchat),
            "LLMCHAT_TEST_QUEUE": self.queue,
            "LLMCHAT_TEST_READY_FILE": str(ready),
            "LLMCHAT_TEST_TASKS_DIR": str(s.tasks_dir),
            "CELERY_BROKER_URL": s.broker_url,
            "PYTHONPATH": str(REPO),
            **self.extra_env,
        }
        env.pop("CI", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tests.celery_app",
                "worker",
                "--pool",
                "threads",
                "-c",
                str(self.concurrency),
                "-Q",
                self.queue,
                "-l",
                "warning",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"llmchat-test-{uuid.uuid4().hex[:8]}@%h",
            ],
            cwd=REPO,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + WORKER_START_TIMEOUT
        while not ready.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the worker exited at start:\n{self.output()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"the worker did not start in time:\n{self.output()}")
            time.sleep(0.05)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no cleanup, no acknowledgement, connections dropped by the kernel."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGQUIT)  # cold shutdown: do not wait for tasks
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()


@pytest.fixture(scope="session")
def services(fake_llm_server, django_db_setup, django_db_blocker):
    url = require_service("REDIS_URL")
    shared_database_or_skip()
    session = uuid.uuid4().hex[:10]
    prefix = f"llmchat-test-{session}"
    llmchat = fake_llm_server.llmchat_settings(
        "openai",
        "gpt-4.1-mini",
        EVENTS_URL=url,
        EVENTS_KEY_PREFIX=prefix,
        EVENTS_TTL=600,
        # no in-request retries: retryable errors retry the task
        MAX_RETRIES=0,
        TASK_RETRY_MAX_WAIT=5.0,
        # a killed worker's runs are taken over two seconds after its last renewal
        RUN_LEASE=2.0,
        TOOL_MODULES=["tests.integration.tools"],
    )
    found = Services(
        broker_url=os.environ.get("LLMCHAT_TEST_BROKER_URL") or redis_db_url(url, 14),
        events_url=url,
        queue=f"llmchat-test-{session}",
        prefix=prefix,
        db_name=str(connection.settings_dict["NAME"]),
        llmchat=llmchat,
    )
    try:
        yield found
    finally:
        for worker in found.workers:
            worker.stop()
        _cleanup_redis(found)
        shutil.rmtree(found.tasks_dir, ignore_errors=True)


def _cleanup_redis(found: Services) -> None:
    import redis

    events = redis.Redis.from_url(found.events_url)
    keys = list(events.scan_iter(match=f"{found.prefix}:*", count=1000))
    if keys:
        events.delete(*keys)
    if not found.broker_url.startswith(("redis://", "rediss://")):
        _cleanup_queues(found)
        return
    broker = redis.Redis.from_url(found.broker_url)
    # this session's queues (all named after found.queue) and kombu's bindings of them
    keys = list(broker.scan_iter(match=f"*{found.queue}*", count=1000))
    if keys:
        broker.delete(*keys)


def _cleanup_queues(found: Services) -> None:
    """Delete this session's queues on an AMQP broker (every one is named after
    ``found.queue``; a test may add a suffix)."""
    names = {found.queue, *(worker.queue for worker in found.workers)}
    with found.sender().connection_for_write() as conn:
        channel = conn.default_channel
        for name in names:
            channel.queue_delete(name)


@pytest.fixture(scope="session")
def worker(services):
    """The session's worker (threads pool, 8 threads) on the session's queue."""
    return services.worker()


@contextmanager
def current_app(app):
    """Make ``app`` the current Celery app, so ``complete_chat.delay`` sends through it."""
    from celery import _state

    previous = _state.get_current_app()
    app.set_current()
    try:
        yield app
    finally:
        previous.set_current()


@pytest.fixture
def llm(services, fake_llm, transactional_db):
    """The fake provider (reset for the test), ``LLMCHAT`` as the workers have it, and
    ``ask_later`` sending to the session's queue."""
    with override_settings(LLMCHAT=services.llmchat), current_app(services.sender()):
        yield fake_llm


__all__ = ["current_app", "wait_until"]
