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

Web processes (:class:`WebProcess`) serve the test app (``tests.urls``) on the same
database and settings: ``manage.py runserver``, or gunicorn serving
``tests/integration/wsgi.py``, whose tasks go to the session's broker and queue.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
from django.db import connection
from django.test import override_settings

from tests.conftest import require_service
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
WORKER_START_TIMEOUT = 60.0  # a loaded 2-core CI machine has taken over 30 s
# a loaded machine: a web process's first answer (the URLconf and the app imported) can
# take seconds
WEB_START_TIMEOUT = 90.0


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

    def environment(self, llmchat: dict | None = None, **extra: str) -> dict:
        """The environment of a worker or web process of this session: the test settings
        on the test database, ``llmchat`` as ``LLMCHAT`` (default: the session's), the
        broker and the session's queue (``LLMCHAT_TEST_QUEUE`` in ``extra`` names
        another), this checkout first on the import path; ``extra`` added last."""
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "LLMCHAT_TEST_DB_NAME": self.db_name,
            "LLMCHAT_TEST_SETTINGS": json.dumps(self.llmchat if llmchat is None else llmchat),
            "LLMCHAT_TEST_QUEUE": self.queue,
            "CELERY_BROKER_URL": self.broker_url,
            "PYTHONPATH": str(REPO),
            **extra,
        }
        env.pop("CI", None)
        return env

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
        env = s.environment(
            LLMCHAT_TEST_QUEUE=self.queue,
            LLMCHAT_TEST_READY_FILE=str(ready),
            LLMCHAT_TEST_TASKS_DIR=str(s.tasks_dir),
            **self.extra_env,
        )
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gunicorn_args() -> list[str]:
    """The command line of a gunicorn server before its ``--bind``: one gthread worker
    process, no control socket (gunicorn 25.1 opens one in the home folder by default,
    where two servers would meet)."""
    import gunicorn

    args = [sys.executable, "-m", "gunicorn", "--worker-class", "gthread", "--workers", "1"]
    args += ["--timeout", "120", "--graceful-timeout", "5", "--log-level", "warning"]
    if tuple(int(part) for part in gunicorn.__version__.split(".")[:2]) >= (25, 1):
        args.append("--no-control-socket")
    return args


class WebProcess:
    """A web process of the test app in its own process group, on the test database, its
    providers pointed at the fake server (``llmchat``), sending tasks to the session's
    broker and queue (``LLMCHAT_TEST_QUEUE`` in ``extra_env`` names another):
    ``manage.py runserver`` (``script``: a manage.py of its own, given the command's
    arguments), or with ``gunicorn=True`` gunicorn serving ``tests/integration/wsgi.py``
    on ``threads`` threads."""

    def __init__(
        self,
        services,
        llmchat: dict,
        *,
        script: str | None = None,
        gunicorn: bool = False,
        threads: int = 4,
        **extra_env: str,
    ):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="llmchat-web-", suffix=".log", delete=False)
        address = f"127.0.0.1:{self.port}"
        if gunicorn:
            command = [*gunicorn_args(), "--threads", str(threads), "--bind", address]
            command.append("tests.integration.wsgi:application")
        else:
            command = [sys.executable, script] if script else [sys.executable, "-m", "django"]
            command += ["runserver", "--noreload", address]
        self.proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=services.environment(llmchat, **extra_env),
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # gunicorn's worker process is its child: one group
        )
        self.url = f"http://{address}"
        deadline = time.monotonic() + WEB_START_TIMEOUT
        while True:
            try:
                httpx.get(f"{self.url}/api/models/", timeout=10)
                break
            except httpx.HTTPError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"the web process did not start:\n{self.output()}") from None
                time.sleep(0.1)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL to its process group: no cleanup of any kind."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM (gunicorn shuts down gracefully), SIGKILL after 15 s."""
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
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


__all__ = ["WebProcess", "current_app", "free_port", "wait_until"]
