"""Tools the model may call: typed Python functions decorated with ``@tool``.

The JSON Schema of the arguments comes from the signature (through pydantic), the
description from the docstring. A tool may take a ``context`` parameter to receive the
run's :class:`~django_llmchat.context.Context`. Errors never crash a run: they go back to
the model as a typed error result.
"""

from __future__ import annotations

import contextvars
import inspect
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from django.utils.module_loading import import_string
from pydantic import ConfigDict, ValidationError, create_model

from .errors import ArgumentError, InterruptError
from .providers.types import ToolSpec

ERROR_TYPES = (
    "unknown_tool",
    "validation_error",
    "timeout_error",
    "execution_error",
    "denied",
    "cancelled",
    "interrupted",
)

logger = logging.getLogger(__name__)

_registry: dict[str, Tool] = {}
_registry_lock = threading.Lock()
_modules_loaded = False


@dataclass
class ToolResult:
    """What a tool returns when it has more to say than text: content plus attachments
    (``(filename, bytes)`` or ``(filename, bytes, mime_type)``)."""

    content: Any = ""
    attachments: list[tuple] = field(default_factory=list)
    is_error: bool = False
    error_type: str | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return json.dumps(self.content, ensure_ascii=False, default=str)

    @classmethod
    def error(cls, error_type: str, message: str) -> ToolResult:
        payload = {"error": {"type": error_type, "message": message}}
        return cls(content=payload, is_error=True, error_type=error_type)


@dataclass
class CheckedResult:
    """A tool's result as it is stored and sent (:func:`checked_result`): its ``text``,
    the files that passed the upload rules as ``(filename, bytes, type)``, and ``raw``,
    what the tool message records of it (the error, the cut, the files refused)."""

    text: str
    attachments: list[tuple[str, bytes, str]]
    raw: dict[str, Any] | None
    is_error: bool = False
    error_type: str | None = None


def _marked(text: str, limit: int | None) -> tuple[str, dict[str, int] | None]:
    """``text`` cut to ``limit`` characters, followed by a marker saying so."""
    if not limit or len(text) <= limit:
        return text, None
    marker = f"\n[truncated: {len(text):,} characters, {limit:,} kept]"
    return text[:limit] + marker, {"characters": len(text), "kept": limit}


def _storable(text: str) -> str:
    """Text every database stores: NUL characters (PostgreSQL refuses them) and lone
    surrogates (no encoding holds them) become replacement characters."""
    text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _file_shape(item: Any) -> bool:
    return (
        isinstance(item, tuple | list)
        and len(item) in (2, 3)
        and isinstance(item[0], str)
        and isinstance(item[1], bytes | bytearray)
        and (len(item) == 2 or item[2] is None or isinstance(item[2], str))
    )


def checked_result(name: str, result: Any) -> CheckedResult:
    """What the result of tool ``name`` is stored and sent as: the one gate every tool
    result (Python, MCP, an error written by the library) goes through.

    - Its text is at most ``LLMCHAT["TOOL_RESULT_MAX_CHARS"]`` characters: a longer one is
      cut, with a marker the model reads (``[truncated: 10,485,760 characters, 100,000
      kept]``) and ``raw["truncated"]`` on the row; an error keeps its JSON shape, its
      message cut.
    - Its files pass the rules of a user's upload
      (:func:`~django_llmchat.inputs.check_attachment`: sniffed type,
      ``ALLOWED_ATTACHMENT_TYPES``, ``MAX_ATTACHMENT_SIZE``; at most ``MAX_ATTACHMENTS``):
      a refused file is never stored, a line of the text says why
      (``[file evil.html refused: type text/html is not allowed ...]``) and
      ``raw["refused"]`` lists them.
    - A result that cannot be stored (not JSON-serialisable, files that are not
      ``(filename, bytes[, type])``) is an ``execution_error`` result saying so.
    """
    from .conf import settings
    from .errors import InputError
    from .inputs import check_attachment

    if not isinstance(result, ToolResult):
        result = ToolResult(content=result if result is not None else "")
    limit = settings.TOOL_RESULT_MAX_CHARS
    try:
        items = list(result.attachments or [])
        bad = next((n for n, item in enumerate(items, 1) if not _file_shape(item)), None)
        if bad is not None:
            raise TypeError(f"attachment {bad} is not (filename, bytes[, MIME type])")
        if result.is_error:  # an error's text is its JSON payload, its message cut
            if _error_payload(result.content):
                error = dict(result.content["error"])
            else:
                error = {"type": result.error_type or "execution_error", "message": result.text}
            message, cut = _marked(_storable(str(error["message"])), limit)
            error["message"] = message
            text = json.dumps({"error": error}, ensure_ascii=False)
        else:
            error = None
            text, cut = _marked(_storable(result.text), limit)
    except Exception as exc:  # the model hears about it; the run goes on
        logger.warning("tool %s: its result cannot be stored (%s)", name, type(exc).__name__)
        return checked_result(
            name,
            ToolResult.error(
                "execution_error", f"the result of {name} cannot be stored: {describe(exc)}"
            ),
        )
    files: list[tuple[str, bytes, str]] = []
    refused: list[dict[str, str]] = []
    most = settings.MAX_ATTACHMENTS
    for item in items:
        filename = os.path.basename(str(item[0]).replace("\\", "/"))[:200] or "attachment"
        if most is not None and len(files) >= most:
            reason = f"too many files (at most {most})"
        else:
            try:
                files.append(check_attachment(tuple(item)))
                continue
            except InputError as exc:
                reason = exc.reason.removeprefix(f"{filename}: ")
        refused.append({"filename": _storable(filename), "reason": reason})
    raw: dict[str, Any] = {}
    if error is not None:
        raw["error"] = error
    if cut is not None:
        raw["truncated"] = cut
    if refused:
        raw["refused"] = refused
        notes = "\n".join(f"[file {r['filename']} refused: {r['reason']}]" for r in refused)
        if error is not None:
            error["message"] += "\n" + notes
            text = json.dumps({"error": error}, ensure_ascii=False)
        else:
            text = f"{text}\n{notes}" if text else notes
    return CheckedResult(
        text=text,
        attachments=files,
        raw=raw or None,
        is_error=error is not None,
        error_type=error.get("type") if error is not None else None,
    )


def describe(exc: BaseException) -> str:
    """``"<type>: <message>"`` of an exception, even one whose message cannot be read."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return type(exc).__name__


def _error_payload(content: Any) -> bool:
    return (
        isinstance(content, dict)
        and set(content) == {"error"}
        and isinstance(content["error"], dict)
        and "message" in content["error"]
    )


class Tool:
    """A callable the model may request, with its name, description and JSON Schema."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        requires_approval: bool = False,
        concurrent: bool = False,
    ):
        self.func = func
        self.name = name or func.__name__
        self.description = (description or inspect.getdoc(func) or "").strip()
        self.timeout = timeout
        self.requires_approval = requires_approval
        self.concurrent = concurrent
        signature = inspect.signature(func)
        try:
            hints = get_type_hints(func)
        except Exception:  # unresolved forward references: fall back to Any
            hints = {}
        self.takes_context = "context" in signature.parameters
        fields: dict[str, Any] = {}
        for pname, param in signature.parameters.items():
            if pname == "context" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            annotation = hints.get(pname, Any)
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[pname] = (annotation, default)
        self.arguments_model = create_model(
            f"{self.name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )
        schema = self.arguments_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        self.parameters = schema

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def run(self, arguments: dict[str, Any], context: Any = None, *, timeout: float | None = None):
        """Validate ``arguments`` and call the function; every failure becomes a typed error
        result. ``InterruptError`` propagates (it stops the run on purpose)."""
        try:
            validated = self.arguments_model.model_validate(arguments or {})
        except ValidationError as exc:
            details = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            return ToolResult.error(
                "validation_error", f"invalid arguments for {self.name}: {details}"
            )
        kwargs = {
            k: getattr(validated, k)
            for k in validated.model_fields_set | set(type(validated).model_fields)
        }
        if self.takes_context:
            kwargs["context"] = context
        limit = self.timeout if self.timeout is not None else timeout
        try:
            if limit:
                value = _call_with_timeout(self.name, self.func, kwargs, limit)
            else:
                value = self.func(**kwargs)
        except InterruptError:
            raise
        except Exception as exc:  # the model hears about it; the run goes on
            return ToolResult.error("execution_error", f"{type(exc).__name__}: {exc}")
        if isinstance(value, ToolResult):
            return value
        return ToolResult(content=value if value is not None else "")


# Timed calls: each one runs in a fresh daemon thread of its own, so a tool that hangs
# keeps only that thread and can never hold up another call, run or chat. Python cannot
# kill a thread: when the limit passes the caller gets a ``timeout_error`` and the thread
# is abandoned; if it ever ends, it closes its own DB connections and its result is dropped.
_abandoned_lock = threading.Lock()
_abandoned = 0


def abandoned_tool_threads() -> int:
    """How many tool threads passed their time limit and are still running."""
    with _abandoned_lock:
        return _abandoned


class _TimedCall:
    """The outcome of one timed call, shared by the caller and the tool's thread."""

    __slots__ = ("done", "value", "error", "abandoned")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.abandoned = False

    def finish(self) -> None:
        global _abandoned
        with _abandoned_lock:
            if self.abandoned:  # nobody waits any more: drop the late outcome
                _abandoned -= 1
                self.value = self.error = None
            self.done.set()

    def abandon(self) -> bool:
        """Give up on the call; ``False`` when it finished in the meantime."""
        global _abandoned
        with _abandoned_lock:
            if self.done.is_set():
                return False
            self.abandoned = True
            _abandoned += 1
            return True


def _call_with_timeout(
    name: str, func: Callable[..., Any], kwargs: dict[str, Any], limit: float
) -> Any:
    """``func(**kwargs)`` in its own daemon thread, waiting at most ``limit`` seconds.

    Returns the value, a ``timeout_error`` result when the limit passes, or an
    ``execution_error`` result for a ``BaseException`` that is not an ``Exception``
    (``SystemExit``, ``KeyboardInterrupt``: they end the tool, never the process);
    re-raises the tool's own exceptions (``InterruptError`` among them) in the caller."""
    from django.db import connections

    call = _TimedCall()

    def body() -> None:
        try:
            call.value = func(**kwargs)
        except BaseException as exc:  # reported to the caller, never raised in this thread
            call.error = exc
        finally:
            try:
                connections.close_all()  # this thread's connections
            except Exception:
                logger.exception("tool %s: closing its database connections failed", name)
            finally:
                call.finish()

    context = contextvars.copy_context()  # the tool sees the caller's context variables
    threading.Thread(
        target=context.run, args=(body,), name=f"llmchat-tool-{name}", daemon=True
    ).start()
    if not call.done.wait(limit) and call.abandon():
        # the name only: the arguments may hold secrets
        logger.warning(
            "tool %s did not finish within %s s; its thread is abandoned "
            "(%d abandoned tool threads still running)",
            name,
            limit,
            abandoned_tool_threads(),
        )
        return ToolResult.error("timeout_error", f"{name} did not finish within {limit} s")
    error, value = call.error, call.value
    call.error = call.value = None
    if error is None:
        return value
    if isinstance(error, Exception):
        try:
            raise error
        finally:
            del error
    return ToolResult.error("execution_error", f"{type(error).__name__}: {error}")


def tool(
    func: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    requires_approval: bool = False,
    concurrent: bool = False,
):
    """Turn a typed function into a :class:`Tool` and register it by name.

    ``timeout`` (seconds) overrides ``LLMCHAT["TOOL_TIMEOUT"]``; ``requires_approval``
    pauses the run until ``chat.approve(call_id)`` / ``chat.deny(call_id)``;
    ``concurrent=True`` lets several calls of one response run at the same time.
    """

    def wrap(f: Callable[..., Any]) -> Tool:
        t = Tool(
            f,
            name=name,
            description=description,
            timeout=timeout,
            requires_approval=requires_approval,
            concurrent=concurrent,
        )
        register(t)
        return t

    return wrap(func) if func is not None else wrap


def register(t: Tool) -> Tool:
    with _registry_lock:
        _registry[t.name] = t
    return t


def _load_modules() -> None:
    global _modules_loaded
    if _modules_loaded:
        return
    from importlib import import_module

    from .conf import settings

    for module in settings.TOOL_MODULES:
        import_module(module)
    _modules_loaded = True


def get_tool(name_or_tool: Any) -> Tool | None:
    """A registered tool by name (importing ``LLMCHAT["TOOL_MODULES"]`` first), a tool
    passed as such, or a dotted path to one. ``None`` when unknown."""
    if isinstance(name_or_tool, Tool):
        return name_or_tool
    if callable(name_or_tool):
        return Tool(name_or_tool)
    if not isinstance(name_or_tool, str):
        raise ArgumentError(f"not a tool: {name_or_tool!r}")
    _load_modules()
    found = _registry.get(name_or_tool)
    if found is None and "." in name_or_tool:
        try:
            obj = import_string(name_or_tool)
        except ImportError:
            return None
        found = obj if isinstance(obj, Tool) else Tool(obj)
    return found


# Tool sources: a string ``"<scheme>:<spec>"`` on ``chat.tools`` stands for the tools a
# function (by dotted path, imported on first use) returns for it. The MCP module
# imports this one, so it is named here, not imported.
TOOL_SOURCES = {"mcp": "django_llmchat.mcp.server_tools"}


def get_tools(item: Any, *, chat: Any = None, context: Any = None) -> list[Tool]:
    """The tools one entry of ``chat.tools`` or ``Agent.tools`` stands for: a tool (see
    :func:`get_tool`), or several from a tool source: a ``"mcp:<server>"`` string or an
    object with ``tools_for(chat, context)`` (:class:`~django_llmchat.mcp.MCPTools`).
    Empty when unknown."""
    if isinstance(item, str) and ":" in item:
        scheme = item.partition(":")[0]
        if scheme in TOOL_SOURCES:
            return list(import_string(TOOL_SOURCES[scheme])(item, chat=chat, context=context))
    tools_for = getattr(item, "tools_for", None)
    if tools_for is not None and not isinstance(item, Tool):
        return list(tools_for(chat, context))
    found = get_tool(item)
    return [found] if found is not None else []


def registered_tools() -> dict[str, Tool]:
    _load_modules()
    return dict(_registry)
