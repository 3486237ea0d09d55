"""System checks of the ``LLMCHAT`` settings that are plain values: numbers, URLs, flags,
lists, the named registries, the history, token throttles and telemetry."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import Error

from ..conf import DEFAULTS
from .base import _missing

NUMBERS = {
    "MAX_STEPS": (int, 1),
    "TOOL_TIMEOUT": ((int, float), 0),
    "TOOL_RESULT_MAX_CHARS": (int, 1),
    "MAX_RETRIES": (int, 0),
    "MAX_RETRY_WAIT": ((int, float), 0),
    "EVENTS_MAXLEN": (int, 1),
    "EVENTS_TTL": (int, 1),
    "EVENTS_PUBLISH_TIMEOUT": ((int, float), 0.01),
    "MAX_CONTENT_LENGTH": (int, 1),
    "MAX_ATTACHMENTS": (int, 0),
    "MAX_ATTACHMENT_SIZE": (int, 1),
    "TASK_MAX_RETRIES": (int, 0),
    "TASK_RETRY_MAX_WAIT": ((int, float), 0),
    "RUN_LEASE": ((int, float), 1),
    "RUN_MAX_ATTEMPTS": (int, 1),
    "RECOVER_QUEUED_AFTER": ((int, float), 1),
}
TOKEN_THROTTLES = ("username", "address")
# DRF's rates: a count, then a period DRF reads by its first letter
RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")

REGISTRY_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
REGISTRIES = {
    "HISTORY_PROCESSORS": ("llmchat.E023", "a history processor, (messages, window) -> messages"),
    "TOKEN_ESTIMATORS": ("llmchat.E024", "a token estimator, (ProviderMessage) -> int"),
}


def _check_idempotency_ttl(merged: dict[str, Any]) -> list:
    """``IDEMPOTENCY_TTL``: seconds a key is remembered, at least one, at most a year."""
    value = merged["IDEMPOTENCY_TTL"]
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 1 <= value <= 366 * 86400
    ):
        return [
            Error(
                f"LLMCHAT['IDEMPOTENCY_TTL'] must be a number of seconds from 1 to "
                f"{366 * 86400} (a year), got {value!r}.",
                hint="How long an Idempotency-Key is remembered; the default is 86400 (24 hours).",
                id="llmchat.E025",
            )
        ]
    return []


def _check_heartbeat(merged: dict[str, Any]) -> list:
    """``EVENTS_HEARTBEAT``: seconds between a follower's keep-alives, from 0.05 to 30 (a
    Redis read blocks this long, below the 60 s socket timeout)."""
    value = merged["EVENTS_HEARTBEAT"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.05 <= value <= 30:
        return [
            Error(
                f"LLMCHAT['EVENTS_HEARTBEAT'] must be a number of seconds from 0.05 to 30, "
                f"got {value!r}.",
                hint="How often events/ sends a keep-alive comment; the default is 3.0.",
                id="llmchat.E017",
            )
        ]
    return []


def _check_registries(merged: dict[str, Any]) -> list:
    """``HISTORY_PROCESSORS`` and ``TOKEN_ESTIMATORS``: names (what API users send) to
    functions or their dotted paths."""
    from django.utils.module_loading import import_string

    from ..loop.history_policy import STRATEGIES

    errors: list = []
    for key, (check_id, what) in REGISTRIES.items():
        registry = merged[key]
        if not isinstance(registry, dict):
            errors.append(
                Error(
                    f"LLMCHAT[{key!r}] must be a dict of name -> dotted path.",
                    hint=f'For example LLMCHAT[{key!r}] = {{"my_name": "myapp.module.function"}}.',
                    id=check_id,
                )
            )
            continue
        for name, target in registry.items():
            where = f"LLMCHAT[{key!r}][{name!r}]"
            if not isinstance(name, str) or not REGISTRY_NAME.match(name):
                errors.append(
                    Error(
                        f"{where}: a name is 1-64 letters, digits, '_' or '-' (no dots: "
                        "API users send it, and a dotted path is never one).",
                        hint=f"Rename the entry in LLMCHAT[{key!r}].",
                        id=check_id,
                    )
                )
                continue
            if key == "HISTORY_PROCESSORS" and name in STRATEGIES:
                errors.append(
                    Error(
                        f"{where}: {name!r} is a built-in strategy.",
                        hint=f"Give the processor another name in LLMCHAT[{key!r}].",
                        id=check_id,
                    )
                )
                continue
            try:
                found = import_string(target) if isinstance(target, str) else target
            except ImportError as exc:
                found, problem = None, f"cannot be imported: {exc}"
            else:
                problem = "is not callable"
            if not callable(found):
                errors.append(
                    Error(
                        f"{where} {problem} ({target!r}).",
                        hint=f"Give the dotted path of {what} (or the function itself).",
                        id=check_id,
                    )
                )
    return errors


def _check_token_throttles(merged: dict[str, Any]) -> list:
    """``TOKEN_THROTTLE_RATES``, and DRF's ``NUM_PROXIES``, which says whose address
    the token throttle counts."""
    errors: list = []
    rates = merged["TOKEN_THROTTLE_RATES"]
    if rates is not None and (
        not isinstance(rates, dict)
        or not set(rates) <= set(TOKEN_THROTTLES)
        or not all(v is None or (isinstance(v, str) and RATE.fullmatch(v)) for v in rates.values())
    ):
        errors.append(
            Error(
                "LLMCHAT['TOKEN_THROTTLE_RATES'] must be a dict of 'username' and 'address' "
                f"to a rate such as '20/hour' (or None), got {rates!r}.",
                hint="For example {'username': '20/hour', 'address': '100/hour'}; None turns "
                "a throttle off.",
                id="llmchat.E015",
            )
        )
    rest = getattr(django_settings, "REST_FRAMEWORK", None)
    proxies = rest.get("NUM_PROXIES") if isinstance(rest, dict) else None
    if proxies is not None and (
        isinstance(proxies, bool) or not isinstance(proxies, int) or proxies < 0
    ):
        errors.append(
            Error(
                "REST_FRAMEWORK['NUM_PROXIES'] must be None or a whole number >= 0, got "
                f"{proxies!r}.",
                hint="The number of reverse proxies in front of the site whose "
                "X-Forwarded-For the throttles trust; leave it unset (None) to count "
                "REMOTE_ADDR.",
                id="llmchat.E016",
            )
        )
    return errors


def _check_telemetry(merged: dict[str, Any]) -> list:
    """``OPENTELEMETRY`` and ``OPENTELEMETRY_CONTENT``: booleans; on, the API installed."""
    errors = []
    for key in ("OPENTELEMETRY", "OPENTELEMETRY_CONTENT"):
        if not isinstance(merged[key], bool):
            errors.append(
                Error(
                    f"LLMCHAT[{key!r}] must be True or False, got {merged[key]!r}.",
                    hint="See the Observability page of the documentation.",
                    id="llmchat.E031",
                )
            )
    if merged["OPENTELEMETRY"] is True:
        errors += _missing(
            "opentelemetry.trace",
            "LLMCHAT['OPENTELEMETRY'] is True but opentelemetry-api is not installed.",
            hint="pip install 'django-llmchat[otel]' (or set it to False).",
            id="llmchat.E030",
        )
    return errors


def _check_numbers(merged: dict[str, Any]) -> list:
    """The numeric settings of ``NUMBERS``: each a number at least its minimum (E002)."""
    errors: list = []
    for key, (types, minimum) in NUMBERS.items():
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, types) or value < minimum:
            errors.append(
                Error(
                    f"LLMCHAT[{key!r}] must be a number >= {minimum}, got {value!r}.",
                    hint=f"Fix LLMCHAT[{key!r}] in settings (default {DEFAULTS[key]!r}).",
                    id="llmchat.E002",
                )
            )
    return errors


def _check_values(merged: dict[str, Any]) -> list:
    """``DEFAULT_MODEL``, ``EVENTS_URL``, ``TASKS_EAGER_WITHOUT_BROKER``,
    ``ADMISSION_SYNCHRONOUS_COMMIT``, ``CANCEL_ON_DISCONNECT``, ``EVENTS_KEY_PREFIX`` and
    the lists of strings (E008-E013, E026)."""
    errors: list = []
    if not isinstance(merged["DEFAULT_MODEL"], str) or not merged["DEFAULT_MODEL"]:
        errors.append(
            Error(
                "LLMCHAT['DEFAULT_MODEL'] must be a non-empty model id.",
                hint="For example LLMCHAT['DEFAULT_MODEL'] = 'gpt-4.1-mini'.",
                id="llmchat.E008",
            )
        )
    url = merged["EVENTS_URL"]
    if url is not None and (
        not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://"))
    ):
        errors.append(
            Error(
                "LLMCHAT['EVENTS_URL'] must be a Redis URL (redis://, rediss:// or unix://).",
                hint="Set LLMCHAT['EVENTS_URL'] = 'redis://127.0.0.1:6379/0', or None.",
                id="llmchat.E009",
            )
        )
    cluster = merged["EVENTS_CLUSTER"]
    if not isinstance(cluster, bool) or (
        cluster and isinstance(url, str) and not url.startswith(("redis://", "rediss://"))
    ):
        errors.append(
            Error(
                f"LLMCHAT['EVENTS_CLUSTER'] is {cluster!r} with EVENTS_URL {url!r}.",
                hint="Use False (one Redis server), or True with EVENTS_URL naming a node of "
                "the cluster as redis:// or rediss:// (a cluster has no unix:// address).",
                id="llmchat.E018",
            )
        )
    eager = merged["TASKS_EAGER_WITHOUT_BROKER"]
    if eager not in (True, False, "inline"):
        errors.append(
            Error(
                f"LLMCHAT['TASKS_EAGER_WITHOUT_BROKER'] is {eager!r}.",
                hint="Use True (a background thread), 'inline' or False.",
                id="llmchat.E011",
            )
        )
    if not isinstance(merged["ADMISSION_SYNCHRONOUS_COMMIT"], bool):
        errors.append(
            Error(
                "LLMCHAT['ADMISSION_SYNCHRONOUS_COMMIT'] is "
                f"{merged['ADMISSION_SYNCHRONOUS_COMMIT']!r}.",
                hint="Use False (an admission its own process answers commits without "
                "waiting for the disk, on PostgreSQL) or True (every admission waits).",
                id="llmchat.E026",
            )
        )
    if not isinstance(merged["CANCEL_ON_DISCONNECT"], bool):
        errors.append(
            Error(
                f"LLMCHAT['CANCEL_ON_DISCONNECT'] is {merged['CANCEL_ON_DISCONNECT']!r}.",
                hint="Use False (a run whose client left finishes and is stored) or True "
                "(it is cancelled).",
                id="llmchat.E013",
            )
        )
    prefix = merged["EVENTS_KEY_PREFIX"]
    if not isinstance(prefix, str) or not prefix:
        errors.append(
            Error(
                "LLMCHAT['EVENTS_KEY_PREFIX'] must be a non-empty string.",
                hint="It prefixes the Redis keys of the event streams, e.g. 'llmchat'.",
                id="llmchat.E012",
            )
        )
    for key in ("ALLOWED_ATTACHMENT_TYPES", "TOOL_MODULES"):
        value = merged[key]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            errors.append(
                Error(
                    f"LLMCHAT[{key!r}] must be a list of strings.",
                    hint=f"Fix LLMCHAT[{key!r}] in settings.",
                    id="llmchat.E010",
                )
            )
    return errors


def _check_history(merged: dict[str, Any]) -> list:
    """``HISTORY``: a strategy, a registered processor or its options (E014)."""
    from ..loop.history_policy import history_errors

    return [
        Error(
            f"LLMCHAT['HISTORY']: {problem}.",
            hint="Use 'window' (the default), 'summarize', 'all', a name in "
            "LLMCHAT['HISTORY_PROCESSORS'] or the dotted path of a history processor, "
            "or a dict of history options with 'strategy'.",
            id="llmchat.E014",
        )
        for problem in history_errors(merged["HISTORY"])
    ]
