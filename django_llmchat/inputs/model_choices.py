"""Which model answers, as an API user chooses it: the provider and the model (configured,
allowed by ``ALLOWED_MODELS``), ``max_tokens`` within the model's, and the history policy
with its summary model (:mod:`django_llmchat.inputs` lists every rule)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..conf import settings
from ..errors import InputError
from .json_values import check_json


def configured_providers() -> list[str]:
    """The providers an API user may choose: those in ``LLMCHAT["PROVIDERS"]`` and the
    built-in ones the environment configures (their API key variable, or Ollama's URL),
    narrowed to those ``LLMCHAT["ALLOWED_MODELS"]`` names when it is set."""
    from ..providers import API_KEY_ENV, BASE_URL_ENV, PROVIDERS

    names = set(settings.PROVIDERS or {})
    for name in PROVIDERS:
        envs = (*API_KEY_ENV.get(name, ()), *BASE_URL_ENV.get(name, ()))
        if any(os.environ.get(env) for env in envs):
            names.add(name)
    allowed = settings.ALLOWED_MODELS
    if allowed is not None:
        names &= {entry.split("/", 1)[0] for entry in allowed}
    return sorted(names)


def model_allowed(provider: str, model_id: str) -> bool:
    """Whether ``LLMCHAT["ALLOWED_MODELS"]`` (when set) lists ``provider/model_id`` or
    ``provider/*``."""
    allowed = settings.ALLOWED_MODELS
    if allowed is None:
        return True
    return f"{provider}/{model_id}" in allowed or f"{provider}/*" in allowed


def check_provider(provider: Any, *, field: str = "provider") -> str:
    """A configured provider's name (:func:`configured_providers`)."""
    if not isinstance(provider, str):
        raise InputError(field, "must be a string")
    names = configured_providers()
    if provider not in names:
        raise InputError(
            field,
            f"provider {provider[:64]!r} is not configured; one of: {', '.join(names) or '-'}",
        )
    return provider


def check_model_id(model_id: Any, *, field: str = "model_id") -> str:
    """A model id: a string that is not blank."""
    if not isinstance(model_id, str):
        raise InputError(field, "must be a string")
    if not model_id.strip():
        raise InputError(field, "must not be empty")
    return model_id


def check_model(provider: str, model_id: str, *, field: str = "model_id") -> None:
    """The model ``model_id`` of ``provider``: the provider is configured and
    ``LLMCHAT["ALLOWED_MODELS"]`` allows the model (the reason on ``field``)."""
    if provider not in configured_providers():
        raise InputError(field, f"provider {provider[:64]!r} is not configured")
    if not model_allowed(provider, model_id):
        raise InputError(field, f"model {model_id[:64]!r} of {provider[:64]!r} is not allowed")


def check_default_model(*, field: str = "id") -> None:
    """For a chat an API user makes without choosing its model (``ui/chat`` on first
    use): the project's defaults pass :func:`check_model`. The reason names the settings,
    not their values."""
    provider, model_id = settings.DEFAULT_PROVIDER, settings.DEFAULT_MODEL
    if provider not in configured_providers():
        raise InputError(
            field,
            'a new chat cannot be made: the default provider (LLMCHAT["DEFAULT_PROVIDER"]) '
            "is not configured; use the id of an existing chat",
        )
    if not model_allowed(provider, model_id):
        raise InputError(
            field,
            'a new chat cannot be made: the default model (LLMCHAT["DEFAULT_MODEL"]) is '
            'not in LLMCHAT["ALLOWED_MODELS"]; use the id of an existing chat',
        )


def check_max_tokens(
    params: Mapping[str, Any] | None,
    provider: str,
    model_id: str,
    *,
    field: str = "params",
    kept: bool = False,
) -> None:
    """``params["max_tokens"]`` is at most the model's ``max_output_tokens`` in the model
    registry (when it knows the model). ``kept``: the params are the chat's own, kept
    while its model changes (the reason says to send lower ones)."""
    max_tokens = params.get("max_tokens") if isinstance(params, Mapping) else None
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        return
    from ..models import LLMModel

    info = LLMModel.objects.filter(provider=provider, model_id=model_id).first()
    ceiling = info.max_output_tokens if info is not None else None
    if ceiling and max_tokens > ceiling:
        reason = f"max_tokens must be at most {ceiling} for {model_id[:64]}"
        if kept:
            reason += f" (the chat's is {max_tokens}: send params with the new model)"
        raise InputError(field, reason)


def _name_problem(kind: str, value: Any, builtin: tuple[str, ...], registered: dict) -> str | None:
    """Why ``value`` is not a name an API user may give (``None`` when it is, or when it
    is absent)."""
    if value is None or (isinstance(value, str) and (value in builtin or value in registered)):
        return None
    known = ", ".join([*builtin, *sorted(registered)]) or "none registered"
    if not isinstance(value, str) or not value:
        return f"{kind} must be a name (one of: {known})"
    if "." in value:
        return (
            f"{kind} {value[:64]!r}: dotted paths are not accepted; give a registered "
            f"name (one of: {known})"
        )
    return f"{kind} {value[:64]!r} is not registered (one of: {known})"


def _check_summary(data: dict[str, Any], provider: str, model_id: str, field: str) -> None:
    """The summary model runs on a configured provider, and is an allowed model of it
    (when the policy chooses either)."""
    summary_provider = data.get("summary_provider")
    summary_model = data.get("summary_model")
    if not summary_provider and not summary_model:
        return
    if isinstance(summary_provider, str) and summary_provider:
        names = configured_providers()
        if summary_provider not in names:
            raise InputError(
                f"{field}.summary_provider",
                f"provider {summary_provider[:64]!r} is not configured; one of: "
                f"{', '.join(names) or '-'}",
            )
    on = summary_provider if isinstance(summary_provider, str) and summary_provider else provider
    model = summary_model if isinstance(summary_model, str) and summary_model else model_id
    if not model_allowed(on, model):
        key = "summary_model" if summary_model else "summary_provider"
        raise InputError(f"{field}.{key}", f"model {model[:64]!r} of {on[:64]!r} is not allowed")


def check_history(
    value: Any,
    *,
    provider: str | None = None,
    model_id: str | None = None,
    field: str = "history",
) -> Any:
    """A chat's history policy (``None``: the agent's or the project's): a built-in
    strategy or a name in ``LLMCHAT["HISTORY_PROCESSORS"]``, or an object of history
    options whose ``strategy`` is one and whose ``estimator`` is a name in
    ``LLMCHAT["TOKEN_ESTIMATORS"]``: names, never dotted paths (nothing is imported). The
    summary model, with the chat's ``provider`` and ``model_id`` (the defaults when not
    given), obeys :func:`check_model`. A problem of one option is reported on
    ``history.<option>``."""
    from ..loop.history_policy import STRATEGIES, history_problems, registered_estimators
    from ..loop.history_policy import registered_processors as processors

    if value is None:
        return None
    check_json(value, field=field)
    if not isinstance(value, str | dict):
        raise InputError(field, f"must be a strategy or an object, got {type(value).__name__}")
    if isinstance(value, dict):  # a whole number of tokens may be written 600.0 (JSON's 600)
        value = {
            key: int(item)
            if key in ("margin", "summary_max_tokens")
            and isinstance(item, float)
            and item.is_integer()
            and item >= 0
            else item
            for key, item in value.items()
        }
    data = {"strategy": value} if isinstance(value, str) else value
    where = field if isinstance(value, str) else f"{field}.strategy"
    found = _name_problem("strategy", data.get("strategy"), STRATEGIES, processors())
    if found:
        raise InputError(where, found)
    found = _name_problem("estimator", data.get("estimator"), (), registered_estimators())
    if found:
        raise InputError(f"{field}.estimator", found)
    problems = history_problems(value)
    if problems:
        key, sentence = problems[0]
        raise InputError(f"{field}.{key}" if key and isinstance(value, dict) else field, sentence)
    if isinstance(value, dict):
        _check_summary(
            value,
            provider or settings.DEFAULT_PROVIDER,
            model_id or settings.DEFAULT_MODEL,
            field,
        )
    return value
