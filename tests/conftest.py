import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest
from django.db.backends.signals import connection_created

pytest_plugins = ["django_llmchat.testing.pytest_plugin"]

IN_CI = os.environ.get("CI") == "true"


def require_service(env_var: str) -> str:
    """Return the service URL, skip when it is unset (fail instead under CI=true)."""
    url = os.environ.get(env_var)
    if not url:
        if IN_CI:
            pytest.fail(f"{env_var} is not set but CI=true requires it")
        pytest.skip(f"{env_var} not set")
    return url


def unavailable(reason: str) -> NoReturn:
    """A test (or, called at import, a test module) that cannot run here for want of a
    tool or a package (Chromium, node, a dev extra): skipped, except under CI=true, where
    it must run: a failure. Every such skip of the suite goes through here."""
    if IN_CI:
        pytest.fail(f"{reason}, but CI=true requires these tests to run", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def import_or_unavailable(name: str) -> ModuleType:
    """Module ``name``; when it cannot be imported, :func:`unavailable` (``importorskip``
    that fails under CI=true)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        unavailable(f"{name} cannot be imported ({exc})")


@pytest.fixture(autouse=True)
def _media_root(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "media")


def _sqlite_readers_never_wait(sender, connection, **kwargs):
    """The in-memory test database is one shared cache for every thread, where a reader
    meets a writer's table lock at once (no busy timeout, unlike a file database): let the
    tests' background threads and requests read while another thread writes."""
    name = str(connection.settings_dict.get("NAME") or "")
    if connection.vendor == "sqlite" and ("mode=memory" in name or ":memory:" in name):
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA read_uncommitted = 1")


connection_created.connect(_sqlite_readers_never_wait)


def _flush_by_delete() -> None:
    """A transactional test empties every table after it (Django's ``flush``); on
    PostgreSQL that is one ``TRUNCATE`` of all of them, which makes new files for each table
    and index (about 0.1 s here, a thousand times a run), where the few rows a test leaves
    take a ``DELETE`` each (about 0.03 s in all). The foreign keys Django makes are
    deferred, checked at the flush's commit. A flush that resets sequences or cascades
    (``reset_sequences = True``, ``flush --inhibit-post-migrate``...) stays a ``TRUNCATE``."""
    try:
        from django.db.backends.postgresql.operations import DatabaseOperations
    except ImportError:  # no PostgreSQL driver installed
        return
    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade or not tables:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return ["SET CONSTRAINTS ALL DEFERRED;"] + [
            f"DELETE FROM {self.quote_name(table)};" for table in tables
        ]

    DatabaseOperations.sql_flush = sql_flush


_flush_by_delete()
