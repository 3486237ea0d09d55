import os

import pytest

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
