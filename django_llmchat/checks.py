"""System checks for the ``LLMCHAT`` setting. Each message names the key to fix."""

from __future__ import annotations

import importlib
import re
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import Error, Tags, Warning, register

from .conf import DEFAULTS

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
PROVIDER_KEYS = {"api_key", "base_url", "timeout", "max_retries", "api", "class", "options"}
TOKEN_THROTTLES = ("username", "address")
# DRF's rates: a count, then a period DRF reads by its first letter
RATE = re.compile(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)")


def _known_providers() -> set[str]:
    from .providers import PROVIDERS

    return set(PROVIDERS)


def _known_apis() -> set[str]:
    from .providers import APIS

    return set(APIS)


@register(Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list:
    raw = getattr(django_settings, "LLMCHAT", {})
    if not isinstance(raw, dict):
        return [
            Error(
                "LLMCHAT must be a dict.",
                hint=f"Set LLMCHAT = {{...}} in settings; got {type(raw).__name__}.",
                id="llmchat.E001",
            )
        ]
    ignored = " is not a django-llmchat setting and is ignored."
    errors: list = _unknown_keys(raw, DEFAULTS, "LLMCHAT", ignored, "settings", "llmchat.W001")
    merged = {**DEFAULTS, **raw}
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
    errors += _check_idempotency_ttl(merged)
    errors += _check_heartbeat(merged)
    errors += _check_privacy(merged)
    known = _known_providers()
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
        where = f"LLMCHAT['PROVIDERS'][{name!r}]"
        if not isinstance(options, dict):
            errors.append(
                Error(f"{where} must be a dict of options.", id="llmchat.E003", hint=None)
            )
            continue
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
    default = merged["DEFAULT_PROVIDER"]
    if not isinstance(default, str) or (default not in known and default not in providers):
        errors.append(
            Error(
                f"LLMCHAT['DEFAULT_PROVIDER'] is {default!r}, which is not a provider.",
                hint=f"Use one of {', '.join(sorted(known))}.",
                id="llmchat.E007",
            )
        )
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
    errors.extend(_check_registries(merged))
    from .history_policy import history_errors

    for problem in history_errors(merged["HISTORY"]):
        errors.append(
            Error(
                f"LLMCHAT['HISTORY']: {problem}.",
                hint="Use 'window' (the default), 'summarize', 'all', a name in "
                "LLMCHAT['HISTORY_PROCESSORS'] or the dotted path of a history processor, "
                "or a dict of history options with 'strategy'.",
                id="llmchat.E014",
            )
        )
    errors.extend(_check_limits(merged))
    errors.extend(_check_retention(merged))
    errors.extend(_check_search(merged))
    errors.extend(_check_fallbacks(merged))
    errors.extend(_check_double_texting(merged))
    errors.extend(_check_titles(merged, known))
    errors.extend(_check_token_throttles(merged))
    errors.extend(_check_telemetry(merged))
    errors.extend(_check_mcp_servers(merged))
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


def _check_mcp_servers(merged: dict[str, Any]) -> list:
    """``MCP_SERVERS``: each entry's transport, credentials and options; the SDK installed
    when any server is configured."""
    from .mcp import setting_errors

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


def _unknown_keys(given: Any, known: Any, where: str, problem: str, what: str, id: str) -> list:
    """A warning ``id`` for each key of ``given`` that is not in ``known``."""
    hint = f"Known {what}: {', '.join(sorted(known))}."
    return [
        Warning(f"{where}[{key!r}]{problem}", hint=hint, id=id) for key in given if key not in known
    ]


def _missing(module: str, message: str, **kw: Any) -> list:
    """``[Error(message, **kw)]`` when the optional ``module`` cannot be imported, else []."""
    try:
        importlib.import_module(module)
    except ImportError:
        return [Error(message, **kw)]
    return []


def _check_privacy(merged: dict[str, Any]) -> list:
    """``REDACT`` names a callable; ``ENCRYPTION_KEYS`` are Fernet keys (never shown)."""
    from .models.protected import _fernet
    from .providers.redact import load_redactor

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


REGISTRY_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
REGISTRIES = {
    "HISTORY_PROCESSORS": ("llmchat.E023", "a history processor, (messages, window) -> messages"),
    "TOKEN_ESTIMATORS": ("llmchat.E024", "a token estimator, (ProviderMessage) -> int"),
}


def _check_registries(merged: dict[str, Any]) -> list:
    """``HISTORY_PROCESSORS`` and ``TOKEN_ESTIMATORS``: names (what API users send) to
    functions or their dotted paths."""
    from django.utils.module_loading import import_string

    from .history_policy import STRATEGIES

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


def _check_limits(merged: dict[str, Any]) -> list:
    from .limits import validate_setting

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


def _check_search(merged: dict[str, Any]) -> list:
    from .search import setting_errors

    return [
        Error(
            f"LLMCHAT['SEARCH']: {problem}.",
            hint="Set LLMCHAT['SEARCH'] = {'language': 'english'} (a PostgreSQL text "
            "search configuration: SELECT cfgname FROM pg_ts_config), or None.",
            id="llmchat.E063",
        )
        for problem in setting_errors(merged["SEARCH"])
    ]


def _check_fallbacks(merged: dict[str, Any]) -> list:
    """``FALLBACKS``: a dict of lists of model ids (E074), models the registry knows
    (E075)."""
    from .fallbacks import setting_errors

    hint = (
        "Map a model id to the models to try after it, e.g. LLMCHAT['FALLBACKS'] = "
        "{'gpt-4.1': ['gpt-4.1-mini', 'anthropic/claude-sonnet-4-5']} (see the Runs page "
        "of the documentation)."
    )
    return [
        Error(text, hint=hint, id=check_id)
        for check_id, text in setting_errors(merged["FALLBACKS"])
    ]


def _check_double_texting(merged: dict[str, Any]) -> list:
    from .runs.policy import POLICIES, policy_error

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


def _check_titles(merged: dict[str, Any], known: set[str]) -> list:
    from .titles import setting_errors

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


def _check_retention(merged: dict[str, Any]) -> list:
    """``RETENTION``: None or {"days", "action"}; ``RETENTION_FOR``: a callable."""
    from .retention import validate_setting

    return _policy_errors(
        merged,
        "RETENTION",
        validate_setting,
        "Data lifecycle",
        "llmchat.E05",
        'Give a function (user) -> {"days": ..., "action": ...} or None, or its dotted path.',
    )


def _policy_errors(
    merged: dict[str, Any], key: str, validate: Any, page: str, ids: str, hint_for: str
) -> list:
    """``key`` (its problems from ``validate``: ``<ids>0``) and ``<key>_FOR``, a callable or
    an importable dotted path (``<ids>1``)."""
    hint = f"See the {page} page of the documentation."
    errors = [Error(problem, hint=hint, id=f"{ids}0") for problem in validate(merged[key])]
    value = merged[f"{key}_FOR"]
    if not _callable_setting(value):
        message = f"LLMCHAT['{key}_FOR'] is not a callable or an importable dotted path: "
        errors.append(Error(f"{message}{value!r}.", hint=hint_for, id=f"{ids}1"))
    return errors


def _callable_setting(value: Any) -> bool:
    """``None``, a callable, or the dotted path of one."""
    if value is None or callable(value):
        return True
    if not isinstance(value, str):
        return False
    from django.utils.module_loading import import_string

    try:
        return callable(import_string(value))
    except ImportError:
        return False
