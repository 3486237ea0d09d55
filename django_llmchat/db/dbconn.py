"""Database connections across long waits.

A thread waiting on a provider's reply or on a Redis stream needs no database connection
meanwhile. With a connection pool (PostgreSQL's ``OPTIONS={"pool": ...}``), such a thread
gives its connection back before the wait: the next query takes one again, so a pool of
ten serves fifty SSE followers or twenty worker threads waiting on a model. Without a pool
nothing changes (closing would cost a new connection per wait).
"""

from __future__ import annotations

from django.db import connections

__all__ = ["release"]


def _pooled(connection) -> bool:
    options = connection.settings_dict.get("OPTIONS") or {}
    return connection.vendor == "postgresql" and bool(options.get("pool"))


def release() -> int:
    """Give this thread's pooled connections back to their pool (those outside a
    transaction); returns how many. Cheap when there is nothing to give back."""
    if not any((db.get("OPTIONS") or {}).get("pool") for db in connections.settings.values()):
        return 0  # no database has a pool: nothing to look at
    released = 0
    for connection in connections.all(initialized_only=True):
        if connection.connection is None or connection.in_atomic_block:
            continue
        if _pooled(connection):
            connection.close()
            released += 1
    return released
