import os

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
