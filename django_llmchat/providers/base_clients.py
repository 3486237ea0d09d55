"""The pooled httpx clients of the providers: one per configuration and process, shared
SSL context, dropped after a fork and by :func:`close_clients`."""

from __future__ import annotations

import os
import threading
from typing import Any

import httpx

from .. import __version__

USER_AGENT = f"django-llmchat/{__version__} httpx/{httpx.__version__}"

DEFAULT_TIMEOUT = 120.0
CONNECT_TIMEOUT = 10.0
"""Longest wait for a TCP/TLS connection, whatever the (read) timeout is."""

# Many concurrent streams share one pool per configuration; each holds a connection.
POOL_LIMITS = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=30.0)


class _ProviderCookies(httpx.Cookies):
    """The cookie jar of a provider's client: an answer without ``Set-Cookie`` (nearly all
    of a provider API's) is not handed to :mod:`http.cookiejar`, which parses every
    response's headers again (about a tenth of an httpx request's CPU); one with it is
    stored as by any :class:`httpx.Cookies` (a load balancer's affinity cookie)."""

    def extract_cookies(self, response: httpx.Response) -> None:
        if "set-cookie" in response.headers:
            super().extract_cookies(response)


class ProviderClient(httpx.Client):
    """The providers' pooled :class:`httpx.Client`: the same client, its jar a
    :class:`_ProviderCookies` (httpx reads and writes the jar through the public
    ``cookies`` property, which this class keeps)."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.cookies = kwargs.get("cookies")

    @property
    def cookies(self) -> httpx.Cookies:
        return self._provider_cookies

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        self._provider_cookies = _ProviderCookies(cookies)


_CLIENT_LOCK = threading.Lock()
_SYNC_CLIENTS: dict[tuple, ProviderClient] = {}
_SSL_CONTEXT: Any = None
_GENERATION = 0
"""Bumped when pooled clients are dropped (fork, close_clients): instances re-fetch theirs."""


def _ssl_context() -> Any:
    # Building a verifying SSL context is most of a client's construction cost: share one.
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = httpx.create_ssl_context()
    return _SSL_CONTEXT


def close_clients() -> None:
    """Close and forget every pooled client."""
    global _GENERATION
    with _CLIENT_LOCK:
        clients = list(_SYNC_CLIENTS.values())
        _SYNC_CLIENTS.clear()
        _GENERATION += 1
    for client in clients:
        client.close()


def _forget_clients_after_fork() -> None:
    # A forked worker must not share the parent's sockets; it builds its own clients.
    global _CLIENT_LOCK, _GENERATION
    _CLIENT_LOCK = threading.Lock()
    _SYNC_CLIENTS.clear()
    _GENERATION += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_clients_after_fork)
