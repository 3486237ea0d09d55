"""System checks for the ``LLMCHAT`` setting. Each message names the key to fix.

:func:`check_settings` is the registered check; it runs the checks of each area in turn:
plain values (``checks_settings``), providers and what names them (``checks_providers``),
policies (``checks_policies``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.checks import Error, Tags, register

from ..conf import DEFAULTS
from .base import _unknown_keys
from .policies import (
    _check_double_texting,
    _check_limits,
    _check_privacy,
    _check_retention,
    _check_search,
)
from .providers import (
    PROVIDER_KEYS,
    _check_fallbacks,
    _check_mcp_servers,
    _check_providers,
    _check_titles,
    _known_providers,
)
from .settings import (
    NUMBERS,
    RATE,
    REGISTRIES,
    REGISTRY_NAME,
    TOKEN_THROTTLES,
    _check_heartbeat,
    _check_history,
    _check_idempotency_ttl,
    _check_numbers,
    _check_registries,
    _check_telemetry,
    _check_token_throttles,
    _check_values,
)

__all__ = [
    "NUMBERS",
    "PROVIDER_KEYS",
    "RATE",
    "REGISTRIES",
    "REGISTRY_NAME",
    "TOKEN_THROTTLES",
    "check_settings",
]


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
    known = _known_providers()
    errors += _check_numbers(merged)
    errors += _check_idempotency_ttl(merged)
    errors += _check_heartbeat(merged)
    errors += _check_privacy(merged)
    errors += _check_providers(merged, known)
    errors += _check_values(merged)
    errors += _check_registries(merged)
    errors += _check_history(merged)
    errors += _check_limits(merged)
    errors += _check_retention(merged)
    errors += _check_search(merged)
    errors += _check_fallbacks(merged)
    errors += _check_double_texting(merged)
    errors += _check_titles(merged, known)
    errors += _check_token_throttles(merged)
    errors += _check_telemetry(merged)
    errors += _check_mcp_servers(merged)
    return errors
