"""System checks of the policies in ``LLMCHAT``: privacy (``REDACT``, ``ENCRYPTION_KEYS``),
spending limits and allowed models, retention, search and double texting."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error

from .base import _policy_errors


def _check_privacy(merged: dict[str, Any]) -> list:
    """``REDACT`` names a callable; ``ENCRYPTION_KEYS`` are Fernet keys (never shown)."""
    from ..models.protected import _fernet
    from ..providers.redact import load_redactor

    errors: list = []
    try:
        load_redactor(merged["REDACT"])
    except Exception as exc:
        errors.append(
            Error(
                f"LLMCHAT['REDACT'] is not usable: {type(exc).__name__}: {exc}.",
                hint="Give a callable redact(text, *, field, chat=None) -> str, or its "
                "dotted path, or None.",
                id="llmchat.E060",
            )
        )
    if not isinstance(merged["REDACT_STORED"], bool):
        errors.append(
            Error(
                f"LLMCHAT['REDACT_STORED'] is {merged['REDACT_STORED']!r}.",
                hint="Use True (LLMCHAT['REDACT'] also runs before storing) or False.",
                id="llmchat.E061",
            )
        )
    elif merged["REDACT_STORED"] and merged["REDACT"] is None:
        errors.append(
            Error(
                "LLMCHAT['REDACT_STORED'] is True but LLMCHAT['REDACT'] is not set.",
                hint="Set LLMCHAT['REDACT'] to the redaction hook, or REDACT_STORED to False.",
                id="llmchat.E061",
            )
        )
    keys = merged["ENCRYPTION_KEYS"]
    if isinstance(keys, str | bytes):
        keys = [keys]
    if not isinstance(keys, list | tuple):
        errors.append(
            Error(
                f"LLMCHAT['ENCRYPTION_KEYS'] must be a list of Fernet keys, got "
                f"{type(keys).__name__}.",
                hint="For example LLMCHAT['ENCRYPTION_KEYS'] = [os.environ['LLMCHAT_KEY']].",
                id="llmchat.E062",
            )
        )
    elif keys:
        try:
            _fernet(tuple(keys))
        except Exception as exc:  # the message names the key's index, never the key
            errors.append(
                Error(
                    str(exc),
                    hint="Generate one with: python -c 'from cryptography.fernet import "
                    "Fernet; print(Fernet.generate_key().decode())'.",
                    id="llmchat.E062",
                )
            )
    return errors


def _check_limits(merged: dict[str, Any]) -> list:
    from ..runs.limits import validate_setting

    errors = _policy_errors(
        merged,
        "LIMITS",
        validate_setting,
        "Limits",
        "llmchat.E02",
        "Give a function (user) -> dict of limits, or its dotted path.",
    )
    allowed = merged["ALLOWED_MODELS"]
    if allowed is not None and (
        not isinstance(allowed, list | tuple)
        or not all(isinstance(v, str) and v.count("/") >= 1 for v in allowed)
    ):
        errors.append(
            Error(
                "LLMCHAT['ALLOWED_MODELS'] must be a list of 'provider/model_id' strings "
                "(or 'provider/*').",
                hint="For example ['openai/gpt-4.1-mini', 'anthropic/*'].",
                id="llmchat.E022",
            )
        )
    return errors


def _check_retention(merged: dict[str, Any]) -> list:
    """``RETENTION``: None or {"days", "action"}; ``RETENTION_FOR``: a callable."""
    from ..chats.retention import validate_setting

    return _policy_errors(
        merged,
        "RETENTION",
        validate_setting,
        "Data lifecycle",
        "llmchat.E05",
        'Give a function (user) -> {"days": ..., "action": ...} or None, or its dotted path.',
    )


def _check_search(merged: dict[str, Any]) -> list:
    from ..chats.search import setting_errors

    return [
        Error(
            f"LLMCHAT['SEARCH']: {problem}.",
            hint="Set LLMCHAT['SEARCH'] = {'language': 'english'} (a PostgreSQL text "
            "search configuration: SELECT cfgname FROM pg_ts_config), or None.",
            id="llmchat.E063",
        )
        for problem in setting_errors(merged["SEARCH"])
    ]


def _check_double_texting(merged: dict[str, Any]) -> list:
    from ..runs.policy import POLICIES, policy_error

    value = merged["DOUBLE_TEXTING"]
    problem = policy_error(value)
    if problem is None:
        return []
    return [
        Error(
            f"LLMCHAT['DOUBLE_TEXTING'] {problem}.",
            hint=f"Set LLMCHAT['DOUBLE_TEXTING'] to one of {', '.join(POLICIES)} "
            "(default 'enqueue').",
            id="llmchat.E071" if isinstance(value, str) else "llmchat.E070",
        )
    ]
