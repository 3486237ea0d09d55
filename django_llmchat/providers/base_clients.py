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

_CLIENT_LOCK = threading.Lock()
_SYNC_CLIENTS: dict[tuple, httpx.Client] = {}
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
