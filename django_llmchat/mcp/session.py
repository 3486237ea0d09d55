"""Sessions with MCP servers: a user's credentials, one connection per listing or call in
a fresh event loop, safe failure messages, and the per-process cache of tool listings.

The SDK is imported only when a server is used: this module imports without it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ..conf import on_change
from .settings import _entry

DEFAULT_LIST_TIMEOUT = 10.0
DEFAULT_CACHE_TTL = 300.0
# the most pages of a tools/list walk: a server whose cursor never ends cannot hang a run
MAX_PAGES = 100


# -- credentials --------------------------------------------------------------------------
def _resolve(value: Any, *, server: str, chat: Any, context: Any) -> dict[str, str]:
    """Headers or environment: a dict as such, or what a callable (or its dotted path)
    returns for this chat's user. Called for each listing and each call; never stored."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return dict(value)
    func = import_string(value) if isinstance(value, str) else value
    user = None
    if chat is not None and getattr(chat, "user_id", None) is not None:
        user = chat.user
    found = func(server=server, chat=chat, user=user, context=context)
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise TypeError(f"must return a dict, got {type(found).__name__}")
    return {str(k): str(v) for k, v in found.items()}


@dataclass
class _Connection:
    """What one session needs: the server's entry and the credentials of this user."""

    server: str
    entry: dict[str, Any]
    headers: dict[str, str]
    env: dict[str, str]

    @classmethod
    def open(cls, server: str, chat: Any = None, context: Any = None) -> _Connection:
        entry = _entry(server)
        kw = {"server": server, "chat": chat, "context": context}
        return cls(
            server,
            entry,
            headers=_resolve(entry.get("headers"), **kw),
            env=_resolve(entry.get("env"), **kw),
        )

    def fingerprint(self) -> str:
        """Tells apart the credentials of two users without keeping them in the key."""
        material = json.dumps([self.headers, self.env], sort_keys=True)
        return hashlib.sha256(material.encode()).hexdigest()

    async def client(self, stack: AsyncExitStack, timeout: float):
        """An entered ``mcp.Client`` on this server, closed with ``stack``."""
        from mcp import Client, StdioServerParameters

        entry = self.entry
        if "url" in entry:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(timeout or None))
            )
            target: Any = streamable_http_client(entry["url"], http_client=http)
        elif "command" in entry:
            command = entry["command"]
            command = [command] if isinstance(command, str) else list(command)
            target = StdioServerParameters(
                command=command[0],
                args=[*command[1:], *entry.get("args", [])],
                env=self.env or None,
                cwd=entry.get("cwd"),
            )
        else:
            target = entry["server"]
            if isinstance(target, str):
                target = import_string(target)
        return await stack.enter_async_context(Client(target, cache=None))


# -- running the SDK from sync code -------------------------------------------------------
def _run(coroutine_function: Callable[[], Any], limit: float | None) -> Any:
    """Run ``coroutine_function()`` to its end in a fresh event loop, at most ``limit``
    seconds (``TimeoutError`` then). A thread that already runs a loop (an async view
    calling sync code) hands the work to a helper thread."""

    async def main() -> Any:
        if limit:
            return await asyncio.wait_for(coroutine_function(), limit)
        return await coroutine_function()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with ThreadPoolExecutor(1, thread_name_prefix="llmchat-mcp") as pool:
        return pool.submit(asyncio.run, main()).result()


def _failure(server: str, exc: BaseException) -> str:
    """Why a session failed, safe to show: the exception's type (and an HTTP status or a
    protocol error's message), never a URL, header or environment value."""
    from mcp import MCPError

    leaf = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    if isinstance(leaf, MCPError):
        return f"MCP server {server!r} refused the request: {leaf.error.message}"
    if isinstance(leaf, ValueError):  # pydantic's ValidationError, a JSON decode error
        return f"MCP server {server!r} sent a malformed answer ({type(leaf).__name__})"
    status = getattr(getattr(leaf, "response", None), "status_code", None)
    if isinstance(status, int):
        return f"MCP server {server!r} answered HTTP {status}"
    return f"MCP server {server!r} is unavailable ({type(leaf).__name__})"


# -- listing ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Listed:
    """One tool as its server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool | None = None


_cache: dict[tuple[str, str], tuple[float, list[Listed]]] = {}
_cache_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every listing (they are also dropped when ``LLMCHAT`` changes)."""
    with _cache_lock:
        _cache.clear()


on_change(clear_cache)


def list_tools(server: str, *, chat: Any = None, context: Any = None) -> list[Listed]:
    """The tools ``server`` lists for this chat's user, from the per-process cache when a
    listing with the same credentials is younger than the server's ``cache_ttl``.

    Raises :class:`~django.core.exceptions.ImproperlyConfigured` for an unknown server and
    ``ConnectionError`` (its message safe to show) when the server cannot be listed."""
    try:
        connection = _Connection.open(server, chat, context)
    except ImproperlyConfigured:
        raise
    except Exception as exc:  # the project's credentials callable: its type only
        raise ConnectionError(
            f"MCP server {server!r}: credentials failed ({type(exc).__name__})"
        ) from None
    entry = connection.entry
    key = (server, connection.fingerprint())
    ttl = entry.get("cache_ttl", DEFAULT_CACHE_TTL)
    now = time.monotonic()
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None and now - cached[0] < ttl:
        return cached[1]

    async def fetch() -> list[Listed]:
        async with AsyncExitStack() as stack:
            client = await connection.client(stack, limit)
            found: list[Listed] = []
            cursor = None
            for _ in range(MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                for t in page.tools:
                    hints = t.annotations
                    found.append(
                        Listed(
                            name=t.name,
                            description=(t.description or t.title or "").strip(),
                            input_schema=dict(t.input_schema or {"type": "object"}),
                            read_only=hints.read_only_hint if hints is not None else None,
                        )
                    )
                cursor = page.next_cursor
                if cursor is None:
                    break
            return found

    limit = entry.get("list_timeout", DEFAULT_LIST_TIMEOUT)
    try:
        listed = _run(fetch, limit)
    except Exception as exc:
        raise ConnectionError(_failure(server, exc)) from None
    with _cache_lock:
        for k in [k for k, (at, _) in _cache.items() if now - at >= ttl]:
            del _cache[k]
        if ttl:
            _cache[key] = (now, listed)
    return listed
