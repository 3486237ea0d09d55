"""JSON values and request parameters an API user sends: a chat's ``params``, ``tools``
and ``context`` (:mod:`django_llmchat.inputs` lists every rule)."""

from __future__ import annotations

import math
import re
from typing import Any

from ..conf import settings
from ..errors import InputError

MAX_JSON_DEPTH = 16
MAX_TOOLS = 128


def check_json(value: Any, *, field: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """What JSON columns store everywhere: finite numbers, no NUL characters (PostgreSQL),
    nesting at most ``max_depth`` levels."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise InputError(field, f"nested deeper than {max_depth} levels")
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str) or "\x00" in key:
                    raise InputError(field, "keys must be strings without NUL")
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            if "\x00" in item:
                raise InputError(field, "strings must not contain NUL characters")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InputError(field, "numbers must be finite")
        elif item is not None and not isinstance(item, bool | int):
            raise InputError(field, f"unsupported value {type(item).__name__}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_params(params: Any, *, field: str = "params") -> dict[str, Any]:
    """A chat's request parameters: an object; the types of those the providers read
    (``temperature``, ``top_p``, ``max_tokens``, ``stop``, ``thinking``,
    ``parallel_tool_calls``); vendor options under a provider's name, each in that
    provider's allowlist (:func:`django_llmchat.vendor_options.problems`). Every
    problem is a reason."""
    from ..providers import PROVIDERS
    from ..vendor_options import problems

    if not isinstance(params, dict):
        raise InputError(field, "must be an object")
    check_json(params, field=field)
    errors: list[str] = []

    def number(key: str, low: float, high: float) -> None:
        value = params.get(key)
        if value is not None and (not _is_number(value) or not low <= value <= high):
            errors.append(f"{key} must be a number between {low:g} and {high:g}")

    number("temperature", 0, 2)
    number("top_p", 0, 1)
    max_tokens = params.get("max_tokens")
    if max_tokens is not None and (
        type(max_tokens) is not int or not 1 <= max_tokens <= 10_000_000
    ):
        errors.append("max_tokens must be an integer between 1 and 10000000")
    for key in ("stop", "stop_sequences"):
        value = params.get(key)
        if value is not None and not (
            isinstance(value, str)
            or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        ):
            errors.append(f"{key} must be a string or a list of strings")
    thinking = params.get("thinking")
    if thinking is not None and not isinstance(thinking, dict | bool):
        errors.append("thinking must be an object")
    ptc = params.get("parallel_tool_calls")
    if ptc is not None and not isinstance(ptc, bool):
        errors.append("parallel_tool_calls must be a boolean")
    names = sorted(set(PROVIDERS) | set(settings.PROVIDERS or {}))
    for name in names:
        if name in params and not isinstance(params[name], dict):
            errors.append(f"{name} (provider options) must be an object")
    if not errors:
        errors.extend(problems(params, [n for n in names if n in params]))
    if errors:
        raise InputError(field, *errors)
    return params


def check_tools(tools: Any, *, field: str = "tools") -> list[str]:
    """Names of registered tools (never dotted paths) or of the tools of configured MCP
    servers (``mcp:<server>``), at most :data:`MAX_TOOLS`; returned without repeats."""
    from ..tools import registered_tools

    if not isinstance(tools, list) or not all(isinstance(n, str) for n in tools):
        raise InputError(field, "must be a list of tool names")
    if len(tools) > MAX_TOOLS:
        raise InputError(field, f"at most {MAX_TOOLS} tools")
    known = registered_tools()
    unknown = [name for name in tools if name not in known and not _mcp_spec(name)]
    if unknown:
        raise InputError(field, f"unknown tools: {', '.join(repr(n[:64]) for n in unknown[:5])}")
    return list(dict.fromkeys(tools))


_MCP_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def _mcp_spec(name: str) -> bool:
    """``mcp:<server>`` or ``mcp:<server>/<tool>,<tool>`` of a server configured in
    ``LLMCHAT["MCP_SERVERS"]`` (the project's choice, as registered tools are)."""
    if not name.startswith("mcp:"):
        return False
    server, slash, names = name[4:].partition("/")
    if server not in (settings.MCP_SERVERS or {}):
        return False
    return not slash or all(_MCP_TOOL_NAME.fullmatch(n) for n in names.split(","))


def check_context(context: Any, *, field: str = "context") -> dict[str, Any]:
    """A chat's context: an object without the reserved keys (``skills``,
    ``token_usage``)."""
    from ..context import Context

    if not isinstance(context, dict):
        raise InputError(field, "must be an object")
    check_json(context, field=field)
    reserved = sorted(set(context) & set(Context.RESERVED_KEYS))
    if reserved:
        raise InputError(field, f"reserved keys: {', '.join(reserved)}")
    return context
