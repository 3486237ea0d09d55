"""Per-chat locks: exclusive across threads and processes, gone when the holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from django.db import connection

from django_llmchat.locks import ChatLock, _file_lock

REPO = Path(__file__).resolve().parent.parent


def test_one_holder_per_chat_in_a_process(db):
    first, second, other = ChatLock(1), ChatLock(1), ChatLock(2)
    assert first.acquire()
    assert not second.acquire(wait=0.1)
    assert other.acquire()
    first.release()
    assert second.acquire()
    second.release()
    other.release()
    with ChatLock(1) as held:
        assert held.held
    assert not held.held


def test_threads_take_turns(db):
    order = []

    def work(name):
        with ChatLock(3):
            order.append((name, "in"))
            order.append((name, "out"))
        connection.close()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # no two holders overlapped: every "in" is followed by its own "out"
    assert all(order[i][0] == order[i + 1][0] for i in range(0, len(order), 2))


def hold_in_a_process(code: str, env: dict | None = None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_file_lock_dies_with_its_process(tmp_path):
    database = f"sqlite:{tmp_path / 'db.sqlite3'}"
    holder = hold_in_a_process(
        f"""
        import time
        from django_llmchat.locks import _file_lock
        assert _file_lock({database!r}, "chat", 9) is not None
        print("locked", flush=True)
        time.sleep(60)
        """
    )
    try:
        assert _file_lock(database, "chat", 9) is None
        release = _file_lock(database, "chat", 10)
        assert release is not None
        release()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    release = _file_lock(database, "chat", 9)
    assert release is not None
    assert _file_lock(database, "chat", 9) is None  # exclusive inside a process too
    release()


@pytest.mark.django_db(transaction=True)
def test_an_advisory_lock_dies_with_its_process():
    if connection.vendor != "postgresql":
        pytest.skip("advisory locks are PostgreSQL's (DATABASE_URL)")
    holder = hold_in_a_process(
        """
        import time
        import django
        django.setup()
        from django_llmchat.locks import ChatLock
        assert ChatLock(77).acquire()
        print("locked", flush=True)
        time.sleep(60)
        """,
        {
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "LLMCHAT_TEST_DB_NAME": connection.settings_dict["NAME"],
        },
    )
    lock, other = ChatLock(77), ChatLock(78)
    try:
        assert not lock.acquire(wait=0.2)
        assert other.acquire()
    finally:
        other.release()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert lock.acquire(wait=5)  # the server dropped the dead session's locks
    lock.release()
