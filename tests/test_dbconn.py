"""``dbconn.release()``: a thread's pooled connections given back before a long wait
(a pool of ten serving fifty followers: tests/integration/test_pooled_followers.py)."""

from __future__ import annotations

import pytest
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from django_llmchat.db import dbconn

pytestmark = pytest.mark.django_db(transaction=True)


def test_without_a_pool_no_connection_is_looked_at(monkeypatch):
    """No database has a pool (the default): ``release`` returns at once, every reply."""

    def looked(*args, **kwargs):
        raise AssertionError("a connection was looked at")

    monkeypatch.setattr(connections, "all", looked)
    assert dbconn.release() == 0


@pytest.fixture
def pooled(monkeypatch):
    """The default database as if configured with a pool (its connection given back is
    closed: Django's pooled connection goes back to its pool on ``close()``)."""
    configured = {alias: dict(db) for alias, db in connections.settings.items()}
    default = configured[DEFAULT_DB_ALIAS]
    default["OPTIONS"] = {**(default.get("OPTIONS") or {}), "pool": True}
    monkeypatch.setitem(connections.__dict__, "settings", configured)
    monkeypatch.setattr(dbconn, "_pooled", lambda c: c.alias == DEFAULT_DB_ALIAS)
    return connections[DEFAULT_DB_ALIAS]


def test_a_pooled_connection_is_given_back_outside_a_transaction(pooled, monkeypatch):
    closed = []
    pooled.ensure_connection()
    # Django's close(), recorded (an in-memory SQLite test database ignores it)
    monkeypatch.setattr(pooled, "close", lambda: closed.append(pooled.alias))
    assert dbconn.release() == 1
    assert closed == [DEFAULT_DB_ALIAS]


def test_a_pooled_connection_in_a_transaction_is_kept(pooled, monkeypatch):
    monkeypatch.setattr(pooled, "close", lambda: pytest.fail("closed in its transaction"))
    with transaction.atomic():
        pooled.ensure_connection()
        assert dbconn.release() == 0
