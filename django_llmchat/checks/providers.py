"""System checks of the providers in ``LLMCHAT``: ``PROVIDERS`` and ``DEFAULT_PROVIDER``,
and the settings that name providers or models (``TITLES``, ``FALLBACKS``,
``MCP_SERVERS``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error

from .base import _missing, _unknown_keys

PROVIDER_KEYS = {"api_key", "base_url", "timeout", "max_retries", "api", "class", "options"}


def _known_providers() -> set[str]:
    from ..providers import PROVIDERS

    return set(PROVIDERS)


def _known_apis() -> set[str]:
    from ..providers import APIS

    return set(APIS)


def _check_providers(merged: dict[str, Any], known: set[str]) -> list:
    """``PROVIDERS`` (E003-E006, W002) and ``DEFAULT_PROVIDER`` (E007)."""
    errors: list = []
    providers = merged["PROVIDERS"]
    if not isinstance(providers, dict):
        errors.append(
            Error(
                "LLMCHAT['PROVIDERS'] must be a dict of provider name -> options dict.",
                hint='For example LLMCHAT["PROVIDERS"] = {"openai": {"api_key": "..."}}.',
                id="llmchat.E003",
            )
        )
        providers = {}
    for name, options in providers.items():
        errors += _provider_errors(name, options, known)
    default = merged["DEFAULT_PROVIDER"]
    if not isinstance(default, str) or (default not in known and default not in providers):
        errors.append(
            Error(
                f"LLMCHAT['DEFAULT_PROVIDER'] is {default!r}, which is not a provider.",
                hint=f"Use one of {', '.join(sorted(known))}.",
                id="llmchat.E007",
            )
        )
    return errors


def _provider_errors(name: Any, options: Any, known: set[str]) -> list:
    """One entry of ``PROVIDERS``: its wire protocol or class, URL, key and option names."""
    where = f"LLMCHAT['PROVIDERS'][{name!r}]"
    if not isinstance(options, dict):
        return [Error(f"{where} must be a dict of options.", id="llmchat.E003", hint=None)]
    errors: list = []
    api = options.get("api")
    if api is not None and api not in _known_apis():
        errors.append(
            Error(
                f"{where}['api'] is {api!r}, which is not a wire protocol.",
                hint=f"Use one of {', '.join(sorted(_known_apis()))}.",
                id="llmchat.E004",
            )
        )
    elif name not in known and "class" not in options and api is None:
        errors.append(
            Error(
                f"{where}: unknown provider {name!r}.",
                hint=f"Use one of {', '.join(sorted(known))}, or give an 'api' "
                "(a wire protocol, with a 'base_url') or a 'class' (dotted path of a "
                "Provider subclass).",
                id="llmchat.E004",
            )
        )
    base_url = options.get("base_url")
    if base_url is not None and (
        not isinstance(base_url, str) or not base_url.startswith(("http://", "https://"))
    ):
        errors.append(
            Error(
                f"{where}['base_url'] must be an http:// or https:// URL.",
                hint=f"Fix {where}['base_url'].",
                id="llmchat.E005",
            )
        )
    api_key = options.get("api_key")
    if api_key is not None and not isinstance(api_key, str):
        errors.append(
            Error(
                f"{where}['api_key'] must be a string.",
                hint=f"Fix {where}['api_key'] (read it from the environment).",
                id="llmchat.E006",
            )
        )
    problem = " is not a provider option."
    errors += _unknown_keys(options, PROVIDER_KEYS, where, problem, "options", "llmchat.W002")
    return errors


def _check_fallbacks(merged: dict[str, Any]) -> list:
    """``FALLBACKS``: a dict of lists of model ids (E074), models the registry knows
    (E075)."""
    from ..loop.fallbacks import setting_errors

    hint = (
        "Map a model id to the models to try after it, e.g. LLMCHAT['FALLBACKS'] = "
        "{'gpt-4.1': ['gpt-4.1-mini', 'anthropic/claude-sonnet-4-5']} (see the Runs page "
        "of the documentation)."
    )
    return [
        Error(text, hint=hint, id=check_id)
        for check_id, text in setting_errors(merged["FALLBACKS"])
    ]


def _check_titles(merged: dict[str, Any], known: set[str]) -> list:
    from ..chats.titles import setting_errors

    providers = merged["PROVIDERS"] if isinstance(merged["PROVIDERS"], dict) else {}
    hint = (
        "Set LLMCHAT['TITLES'] = True (titles from the first prompt), a model id, "
        "{'model': ..., 'provider': ...} (a provider in LLMCHAT['PROVIDERS'] or a built-in "
        "one), or False."
    )
    return [
        Error(f"{problem}.", hint=hint, id=id)
        for id, problem in setting_errors(merged["TITLES"], known | set(providers))
    ]


def _check_mcp_servers(merged: dict[str, Any]) -> list:
    """``MCP_SERVERS``: each entry's transport, credentials and options; the SDK installed
    when any server is configured."""
    from ..mcp import setting_errors

    servers = merged["MCP_SERVERS"]
    errors: list = [
        Error(
            f"{problem}.",
            hint="See the MCP page of the documentation for the keys of a server entry.",
            id="llmchat.E040",
        )
        for problem in setting_errors(servers)
    ]
    if isinstance(servers, dict) and servers:
        errors += _missing(
            "mcp",
            "LLMCHAT['MCP_SERVERS'] is set but the MCP SDK is not installed.",
            hint='Install the extra: pip install "django-llmchat[mcp]".',
            id="llmchat.E041",
        )
    return errors
