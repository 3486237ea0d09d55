"""Waiting on a condition in tests: poll for a positive signal until a deadline, never
sleep a fixed time and hope."""

from __future__ import annotations

import os
import time

# Deadlines only bound how long a failing wait takes; on a busy machine (CI runs the suite
# on two cores, with Celery workers beside it) every deadline is stretched by this factor.
SCALE = float(os.environ.get("LLMCHAT_TEST_WAIT_SCALE", "3"))


def wait_until(predicate, timeout: float = 15.0, interval: float = 0.02, message: str = ""):
    """Call ``predicate`` until it returns a true value (returned), failing the test after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout * SCALE
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(message or f"timed out after {timeout * SCALE}s")
        time.sleep(interval)


def when_unlocked(action, timeout: float = 15.0):
    """Run ``action()`` (a write), again while the test database answers "table is locked":
    in-memory SQLite shared between threads refuses a write beside another thread's
    transaction at once (it has no busy timeout), where a server database waits."""
    from django.db import OperationalError, connection

    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except OperationalError as exc:
            if connection.vendor != "sqlite" or "locked" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
