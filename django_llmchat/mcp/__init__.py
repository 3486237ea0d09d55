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

The setting is read in ``mcp_settings``, sessions and listings live in ``mcp_session``;
this module turns listed tools into :class:`~django_llmchat.tools.Tool` objects.

The SDK is imported only when a server is used: this module imports without it.
"""

from __future__ import annotations

import base64
import binascii
import logging
import mimetypes
from contextlib import AsyncExitStack
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..errors import ArgumentError
from ..tools import Tool, ToolResult, describe
from .session import (
    DEFAULT_CACHE_TTL,
    DEFAULT_LIST_TIMEOUT,
    MAX_PAGES,
    Listed,
    _Connection,
    _failure,
    _run,
    clear_cache,
    list_tools,
)
from .settings import KEYS, TRANSPORTS, _entry, entry_errors, setting_errors

__all__ = [
    "DEFAULT_CACHE_TTL",
    "DEFAULT_LIST_TIMEOUT",
    "KEYS",
    "MAX_PAGES",
    "PREFIX",
    "TRANSPORTS",
    "Listed",
    "MCPTool",
    "MCPTools",
    "clear_cache",
    "entry_errors",
    "list_tools",
    "server_tools",
    "setting_errors",
]

logger = logging.getLogger(__name__)

PREFIX = "mcp:"


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
    (:func:`~django_llmchat.loop.steps.checked_result`)."""
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
