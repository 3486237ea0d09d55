"""Pytest fixtures around :class:`~django_llmchat.testing.FakeProviderServer`.

Register it in your root ``conftest.py`` (or a test module)::

    pytest_plugins = ["django_llmchat.testing.pytest_plugin"]

Fixtures:

* ``fake_llm_server`` (session): one running server for the whole test session;
* ``fake_llm`` (function): that server, with its script, recorded requests and responder
  reset before and after each test, plus :meth:`FakeLLM.settings` and
  :meth:`FakeLLM.configure` to point ``LLMCHAT`` at it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .server import FakeProviderServer

__all__ = ["FakeLLM", "fake_llm", "fake_llm_server"]


class FakeLLM:
    """A test's handle on the shared server: every server attribute (``script``,
    ``requests``, ``url``, ``base_url``...) is available on it."""

    def __init__(self, server: FakeProviderServer):
        self.server = server
        self._overrides: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.server, name)

    def __repr__(self) -> str:
        return f"<FakeLLM {self.server!r}>"

    def settings(
        self, provider: str | None = None, *, api_key: str = "test-key", **options: Any
    ) -> dict[str, dict[str, Any]]:
        """An ``LLMCHAT["PROVIDERS"]`` dict pointing every built-in provider's
        ``base_url`` at the server with a dummy ``api_key``. ``provider`` adds that name
        if it is not built in (a custom connection); ``options`` (e.g.
        ``api="chat_completions"``) go to ``provider``'s entry, or to every entry when no
        provider is named."""
        value = self.server.provider_settings(api_key=api_key)
        if provider is not None:
            entry = value.setdefault(
                provider, {"api_key": api_key, "base_url": self.server.base_url(provider)}
            )
            entry.update(options)
        else:
            for entry in value.values():
                entry.update(options)
        return value

    def configure(self, provider: str = "openai", model: str | None = None, **llmchat: Any):
        """Point the ``LLMCHAT`` setting at the server until the test ends: every provider
        configured, ``provider`` (and ``model``) the defaults, retries without waiting;
        ``llmchat`` keys are merged on top. Returns the ``LLMCHAT`` dict in effect."""
        from django.test import override_settings

        value = self.server.llmchat_settings(provider, model, **llmchat)
        override = override_settings(LLMCHAT=value)
        override.enable()
        self._overrides.append(override)
        return value

    def restore(self) -> None:
        """Undo :meth:`configure` and reset the server (the fixture does this after each
        test)."""
        while self._overrides:
            self._overrides.pop().disable()
        self.server.reset()


@pytest.fixture(scope="session")
def fake_llm_server() -> Iterator[FakeProviderServer]:
    """One fake provider server for the whole session."""
    server = FakeProviderServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fake_llm(fake_llm_server: FakeProviderServer) -> Iterator[FakeLLM]:
    """The session's fake provider server, reset for this test."""
    fake_llm_server.reset()
    handle = FakeLLM(fake_llm_server)
    try:
        yield handle
    finally:
        handle.restore()
