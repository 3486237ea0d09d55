"""Tools from MCP servers, through the official ``mcp`` SDK (the ``[mcp]`` extra).

Servers are configured by name in ``LLMCHAT["MCP_SERVERS"]``; a chat takes their tools
with ``chat.with_tools("mcp:<server>")`` (or ``"mcp:<server>/<tool>,<tool>"`` for some of
them), an agent with :class:`MCPTools` in its ``tools``. Each MCP tool becomes an ordinary
:class:`~django_llmchat.tools.Tool`: its schema is the server's ``inputSchema``, and its
calls go through the tool path of every other tool (ToolCall rows, approvals, the tool
timeout, typed error results).

The SDK is asynchronous; the loop is not. Each listing and each call opens its own
session in a fresh event loop (``asyncio.run``, in a helper thread when the calling thread
already runs a loop) and closes it before returning: nothing is shared between threads,
processes or users, at the cost of one connection (and, for stdio, one server process) per
call. Listings are cached per process for ``cache_ttl`` seconds.

The SDK is imported only when a server is used: this module imports without it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import logging
import mimetypes
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .conf import on_change, settings
from .errors import ArgumentError
from .tools import Tool, ToolResult, describe

logger = logging.getLogger(__name__)

PREFIX = "mcp:"
TRANSPORTS = ("url", "command", "server")
KEYS = {
    *TRANSPORTS,
    "args",
    "env",
    "cwd",
    "headers",
    "tools",
    "prefix",
    "requires_approval",
    "timeout",
    "list_timeout",
    "cache_ttl",
    "concurrent",
}
DEFAULT_LIST_TIMEOUT = 10.0
DEFAULT_CACHE_TTL = 300.0
# the most pages of a tools/list walk: a server whose cursor never ends cannot hang a run
MAX_PAGES = 100


# -- settings -----------------------------------------------------------------------------
def entry_errors(name: Any, entry: Any) -> list[str]:
    """What is wrong with ``LLMCHAT["MCP_SERVERS"][name]`` (empty when nothing)."""
    where = f"LLMCHAT['MCP_SERVERS'][{name!r}]"
    if not isinstance(name, str) or not name or "/" in name or ":" in name or "," in name:
        return [f"{where}: a server name is a non-empty string without '/', ':' or ','"]
    if not isinstance(entry, dict):
        return [f"{where} must be a dict with 'url', 'command' or 'server'"]
    problems = []
    given = [k for k in TRANSPORTS if k in entry]
    if len(given) != 1:
        problems.append(
            f"{where} needs exactly one of 'url' (streamable HTTP), 'command' (stdio) or "
            f"'server' (an in-process server), got {given or 'none'}"
        )
    url = entry.get("url")
    if url is not None and (
        not isinstance(url, str) or not url.startswith(("http://", "https://"))
    ):
        problems.append(f"{where}['url'] must be an http:// or https:// URL")
    command = entry.get("command")
    if command is not None and not (
        (isinstance(command, str) and command)
        or (
            isinstance(command, list | tuple)
            and command
            and all(isinstance(c, str) for c in command)
        )
    ):
        problems.append(f"{where}['command'] must be a program or a list of strings")
    args = entry.get("args", [])
    if not isinstance(args, list | tuple) or not all(isinstance(a, str) for a in args):
        problems.append(f"{where}['args'] must be a list of strings")
    server = entry.get("server")
    if isinstance(server, str):
        try:
            import_string(server)
        except ImportError as exc:
            problems.append(f"{where}['server'] cannot be imported: {exc}")
    for key, transport in (("headers", "url"), ("env", "command")):
        value = entry.get(key)
        if value is None:
            continue
        if transport not in entry:
            problems.append(f"{where}[{key!r}] applies only with {transport!r}")
        elif isinstance(value, dict):
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                problems.append(f"{where}[{key!r}] must map strings to strings")
        elif isinstance(value, str):
            try:
                found = import_string(value)
            except ImportError as exc:
                problems.append(f"{where}[{key!r}] cannot be imported: {exc}")
            else:
                if not callable(found):
                    problems.append(f"{where}[{key!r}] is not callable ({value!r})")
        elif not callable(value):
            problems.append(
                f"{where}[{key!r}] must be a dict, a callable or the dotted path of one"
            )
    tools = entry.get("tools")
    if tools is not None and (
        not isinstance(tools, list | tuple) or not all(isinstance(t, str) for t in tools)
    ):
        problems.append(f"{where}['tools'] must be a list of tool names")
    approval = entry.get("requires_approval", False)
    if not isinstance(approval, bool) and not (
        isinstance(approval, list | tuple) and all(isinstance(t, str) for t in approval)
    ):
        problems.append(f"{where}['requires_approval'] must be True, False or a list of tool names")
    prefix = entry.get("prefix", "")
    if not isinstance(prefix, str):
        problems.append(f"{where}['prefix'] must be a string")
    for key in ("timeout", "list_timeout", "cache_ttl"):
        value = entry.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value < 0
        ):
            problems.append(f"{where}[{key!r}] must be a number >= 0")
    if not isinstance(entry.get("concurrent", False), bool):
        problems.append(f"{where}['concurrent'] must be True or False")
    unknown = sorted(str(k) for k in entry if k not in KEYS)
    if unknown:
        problems.append(f"{where}: unknown keys {unknown}; known keys: {sorted(KEYS)}")
    return problems


def setting_errors(value: Any) -> list[str]:
    """What is wrong with ``LLMCHAT["MCP_SERVERS"]`` (empty when nothing)."""
    if not isinstance(value, dict):
        return ["LLMCHAT['MCP_SERVERS'] must be a dict of server name -> options dict"]
    problems = []
    for name, entry in value.items():
        problems.extend(entry_errors(name, entry))
    return problems


def _entry(server: str) -> dict[str, Any]:
    servers = settings.MCP_SERVERS or {}
    entry = servers.get(server) if isinstance(servers, dict) else None
    if entry is None:
        raise ImproperlyConfigured(
            f"no MCP server named {server!r}: add it to LLMCHAT['MCP_SERVERS']"
        )
    problems = entry_errors(server, entry)
    if problems:
        raise ImproperlyConfigured("; ".join(problems))
    return entry


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


# -- tools --------------------------------------------------------------------------------
def _schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The server's input schema as the model sees it: titles dropped, as for Python tools."""
    schema = dict(schema)
    schema.pop("title", None)
    schema.setdefault("type", "object")
    if isinstance(schema.get("properties"), dict):
        schema["properties"] = {
            k: {kk: vv for kk, vv in v.items() if kk != "title"} if isinstance(v, dict) else v
            for k, v in schema["properties"].items()
        }
    return schema


class MCPTool(Tool):
    """One tool of an MCP server, called through a session of its own."""

    def __init__(
        self,
        server: str,
        listed: Listed,
        *,
        name: str,
        chat: Any = None,
        timeout: float | None = None,
        requires_approval: bool = False,
        concurrent: bool = False,
    ):
        # no Python function to read a signature from: the server gives the schema
        self.server = server
        self.remote_name = listed.name
        self.chat = chat
        self.func = self._call
        self.name = name
        self.description = listed.description
        self.timeout = timeout
        self.requires_approval = requires_approval
        self.concurrent = concurrent
        self.takes_context = True
        self.arguments_model = None
        self.input_schema = listed.input_schema
        self.parameters = _schema(listed.input_schema)

    def __repr__(self) -> str:
        return f"<MCPTool {self.name} of {self.server}>"

    def _invalid(self, arguments: dict[str, Any]) -> str | None:
        import jsonschema

        try:
            validator = jsonschema.validators.validator_for(self.input_schema)(self.input_schema)
            errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        except jsonschema.SchemaError:  # the server's schema is its business
            return None
        if not errors:
            return None
        details = "; ".join(
            f"{'.'.join(str(p) for p in e.path) or 'arguments'}: {e.message}" for e in errors
        )
        return f"invalid arguments for {self.name}: {details}"

    def run(self, arguments: dict[str, Any], context: Any = None, *, timeout: float | None = None):
        """Validate ``arguments`` against the server's schema, then call the tool; every
        failure (the tool's, the server's, the connection's) is a typed error result."""
        arguments = arguments or {}
        problem = self._invalid(arguments)
        if problem is not None:
            return ToolResult.error("validation_error", problem)
        limit = self.timeout if self.timeout is not None else timeout
        try:
            connection = _Connection.open(self.server, self.chat, context)
        except ImproperlyConfigured as exc:
            return ToolResult.error("execution_error", str(exc))
        except Exception as exc:  # the project's credentials callable: its type only
            return ToolResult.error(
                "execution_error",
                f"MCP server {self.server!r}: credentials failed ({type(exc).__name__})",
            )

        async def call():
            async with AsyncExitStack() as stack:
                client = await connection.client(stack, limit)
                return await client.call_tool(self.remote_name, arguments)

        try:
            result = _run(call, limit)
        except TimeoutError:
            return ToolResult.error("timeout_error", f"{self.name} did not finish within {limit} s")
        except Exception as exc:
            logger.warning(
                "MCP tool %s of %s failed: %s", self.name, self.server, type(exc).__name__
            )
            return ToolResult.error("execution_error", _failure(self.server, exc))
        try:
            return _tool_result(result)
        except Exception as exc:  # what the server sent cannot be read: the model hears so
            logger.warning(
                "MCP tool %s of %s: malformed result (%s)",
                self.name,
                self.server,
                type(exc).__name__,
            )
            return ToolResult.error(
                "execution_error",
                f"MCP server {self.server!r} sent a malformed result for {self.name}: "
                f"{describe(exc)}",
            )

    def _call(self, context: Any = None, **arguments: Any) -> Any:
        """``tool(**arguments)`` outside a run: the result's content, or its error payload."""
        return self.run(arguments, context).content


def _decoded(data: Any, what: str) -> bytes:
    """The bytes of a base64 block; raises ``ValueError`` naming the block when it is not
    valid base64 (never decoded leniently: what the server meant is unknown)."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise ValueError(f"{what} is not valid base64") from None


def _tool_result(result: Any) -> ToolResult:
    """A ``CallToolResult`` as a :class:`ToolResult`: text blocks joined (else the
    structured content), images, audio and blobs as attachments. Raises when a block
    cannot be read (invalid base64): :meth:`MCPTool.run` makes that an error result. The
    files then pass the upload rules where every tool result is stored
    (:func:`~django_llmchat.steps.checked_result`)."""
    texts: list[str] = []
    attachments: list[tuple] = []
    for number, block in enumerate(result.content or [], start=1):
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(block.text)
        elif kind in ("image", "audio"):
            extension = mimetypes.guess_extension(block.mime_type) or ""
            data = _decoded(block.data, f"the {kind} of block {number}")
            attachments.append((f"{kind}-{number}{extension}", data, block.mime_type))
        elif kind == "resource":
            resource = block.resource
            if getattr(resource, "text", None) is not None:
                texts.append(resource.text)
            else:
                filename = resource.uri.rstrip("/").rpartition("/")[2] or f"resource-{number}"
                data = _decoded(resource.blob, f"the resource of block {number}")
                attachments.append((filename, data, resource.mime_type or None))
        elif kind == "resource_link":
            texts.append(f"{block.name}: {block.uri}")
    attachments = [a if a[2] else a[:2] for a in attachments]
    if result.is_error:
        return ToolResult.error("execution_error", "\n".join(texts) or "the tool failed")
    if texts:
        content: Any = "\n".join(texts)
    else:
        content = result.structured_content if result.structured_content is not None else ""
    return ToolResult(content=content, attachments=attachments)


class MCPTools:
    """The tools of one configured MCP server, for an agent's ``tools`` (or
    ``chat.with_tools``, which stores :attr:`name`).

    ``only`` keeps some of the server's tools (by the server's names); ``requires_approval``
    (``True``, ``False`` or a list of the server's tool names), ``prefix``, ``timeout`` and
    ``concurrent`` override the server's entry in ``LLMCHAT["MCP_SERVERS"]``."""

    def __init__(
        self,
        server: str,
        only: list[str] | tuple[str, ...] | None = None,
        *,
        requires_approval: bool | list[str] | None = None,
        prefix: str | None = None,
        timeout: float | None = None,
        concurrent: bool | None = None,
    ):
        if not isinstance(server, str) or not server or any(c in server for c in "/:,"):
            raise ArgumentError(f"not an MCP server name: {server!r}")
        self.server = server
        self.only = list(only) if only is not None else None
        self.requires_approval = requires_approval
        self.prefix = prefix
        self.timeout = timeout
        self.concurrent = concurrent

    @classmethod
    def parse(cls, spec: str) -> MCPTools:
        """``"mcp:files"`` or ``"mcp:files/read_file,write_file"``."""
        if not spec.startswith(PREFIX):
            raise ArgumentError(f"not an MCP tool spec: {spec!r}")
        server, _, names = spec[len(PREFIX) :].partition("/")
        only = [n for n in names.split(",") if n] if names else None
        return cls(server, only)

    @property
    def name(self) -> str:
        """How a chat stores this selection (the overrides stay with the object)."""
        return PREFIX + self.server + ("/" + ",".join(self.only) if self.only else "")

    def __repr__(self) -> str:
        return f"<MCPTools {self.name}>"

    def tools_for(self, chat: Any = None, context: Any = None) -> list[Tool]:
        """The server's tools for this chat, as :class:`MCPTool` objects. A server that
        cannot be listed, or is not configured, gives no tools (a logged warning or error
        names the server and why, never its credentials)."""
        try:
            listed = list_tools(self.server, chat=chat, context=context)
        except ImproperlyConfigured as exc:
            logger.error("%s: no tools from it in this run", exc)
            return []
        except ConnectionError as exc:
            logger.warning("%s: no tools from it in this run", exc)
            return []
        entry = _entry(self.server)
        allowed = entry.get("tools")
        approval = entry.get("requires_approval", False)
        if self.requires_approval is not None:
            approval = self.requires_approval
        prefix = self.prefix if self.prefix is not None else entry.get("prefix", "")
        timeout = self.timeout if self.timeout is not None else entry.get("timeout")
        concurrent = self.concurrent if self.concurrent is not None else entry.get("concurrent")
        tools: list[Tool] = []
        for item in listed:
            if allowed is not None and item.name not in allowed:
                continue
            if self.only is not None and item.name not in self.only:
                continue
            needs = approval if isinstance(approval, bool) else item.name in approval
            tools.append(
                MCPTool(
                    self.server,
                    item,
                    name=prefix + item.name,
                    chat=chat,
                    timeout=timeout,
                    requires_approval=needs,
                    concurrent=bool(concurrent),
                )
            )
        return tools


def server_tools(spec: str, *, chat: Any = None, context: Any = None) -> list[Tool]:
    """The tools a ``"mcp:..."`` string on ``chat.tools`` stands for."""
    return MCPTools.parse(spec).tools_for(chat, context)
