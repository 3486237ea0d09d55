"""The ``LLMCHAT["MCP_SERVERS"]`` setting: what a server entry may hold, and what is wrong
with one (the system check E040 and every use of a server read it here)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ..conf import settings

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


def entry_errors(name: Any, entry: Any) -> list[str]:
    """What is wrong with ``LLMCHAT["MCP_SERVERS"][name]`` (empty when nothing)."""
    where = f"LLMCHAT['MCP_SERVERS'][{name!r}]"
    if not isinstance(name, str) or not name or "/" in name or ":" in name or "," in name:
        return [f"{where}: a server name is a non-empty string without '/', ':' or ','"]
    if not isinstance(entry, dict):
        return [f"{where} must be a dict with 'url', 'command' or 'server'"]
    return [
        *_transport_problems(where, entry),
        *_credential_problems(where, entry),
        *_option_problems(where, entry),
    ]


def _transport_problems(where: str, entry: dict) -> list[str]:
    """Exactly one of ``url``, ``command`` (with its ``args``) or ``server``, each well formed."""
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
    return problems


def _credential_problems(where: str, entry: dict) -> list[str]:
    """``headers`` (with ``url``) and ``env`` (with ``command``): a dict of strings, or a
    callable or its dotted path."""
    problems = []
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
    return problems


def _option_problems(where: str, entry: dict) -> list[str]:
    """The options of any transport, and no unknown keys."""
    problems = []
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
