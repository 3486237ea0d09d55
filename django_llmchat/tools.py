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
import math
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
        try:
            return json.dumps(self.content, ensure_ascii=False, default=str, allow_nan=False)
        except ValueError:  # NaN or an infinity: no JSON reader takes them back
            return json.dumps(_finite(self.content), ensure_ascii=False, default=str)

    @classmethod
    def error(cls, error_type: str, message: str) -> ToolResult:
        payload = {"error": {"type": error_type, "message": message}}
        return cls(content=payload, is_error=True, error_type=error_type)


def _finite(value: Any) -> Any:
    """``value`` with each float JSON cannot carry (NaN, an infinity) as its name."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value).replace("inf", "Infinity").replace("nan", "NaN")
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def describe(exc: BaseException) -> str:
    """``"<type>: <message>"`` of an exception, even one whose message cannot be read."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return type(exc).__name__


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
