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
