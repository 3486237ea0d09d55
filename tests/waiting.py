"""Waiting on a condition in tests: poll for a positive signal until a deadline, never
sleep a fixed time and hope."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float = 15.0, interval: float = 0.02, message: str = ""):
    """Call ``predicate`` until it returns a true value (returned), failing the test after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(message or f"timed out after {timeout}s")
        time.sleep(interval)
