"""Model fallback: ``LLMCHAT["FALLBACKS"]`` names the models a provider call moves on to
when its model keeps failing.

``{"gpt-4.1": ["gpt-4.1-mini", "anthropic/claude-sonnet-4-5"]}``: a call to ``gpt-4.1``
that ends on a retryable error (a 429, a 5xx, an ``overloaded`` stream event) after its
provider's own retries (``MAX_RETRIES``) tries ``gpt-4.1-mini``, then the Anthropic model.
A key or an entry is spelled as in ``ALLOWED_MODELS``, ``provider/model_id``, or as a bare
model id: a key then matches that model on any provider, an entry is a model of the
failing call's own provider. A string is read as ``provider/model_id`` only when the part
before its first ``/`` is a provider's name (built in or in ``LLMCHAT["PROVIDERS"]``), so
an OpenRouter model is ``openrouter/openai/gpt-4.1``.

Which errors are retryable is the error's own ``retryable`` (decided where the provider
error is made); a non-retryable one (a 400, a refused key) never falls back. The attempt
itself (its usage row, the allowed-models and budget checks before it) is
:meth:`~django_llmchat.loop.attempts.ProviderAttempts._call`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..conf import settings
from ..errors import ProviderError

__all__ = ["Target", "falls_back", "fallbacks_for", "parse", "setting_errors"]


@dataclass(frozen=True)
class Target:
    """One model a call may be made to: ``provider`` (a provider name) and ``model_id``."""

    provider: str
    model_id: str

    def __str__(self) -> str:
        return f"{self.provider}/{self.model_id}"


def _provider_names() -> set[str]:
    from ..providers import PROVIDERS

    return {*PROVIDERS, *(settings.PROVIDERS or {})}


def parse(entry: str, provider: str, names: set[str] | None = None) -> Target:
    """``entry`` (``provider/model_id`` or a bare model id of ``provider``) as a
    :class:`Target`."""
    names = _provider_names() if names is None else names
    head, sep, rest = entry.partition("/")
    if sep and rest and head in names:
        return Target(head, rest)
    return Target(provider, entry)


def fallbacks_for(provider: str, model_id: str) -> list[Target]:
    """The models a failing call to ``model_id`` of ``provider`` falls back to, in order:
    the entry keyed ``provider/model_id``, else the one keyed ``model_id``; the model
    itself and repeats left out."""
    table = settings.FALLBACKS or {}
    if not isinstance(table, dict):
        return []
    entries = table.get(f"{provider}/{model_id}")
    if entries is None:
        entries = table.get(model_id)
    if not isinstance(entries, list | tuple):
        return []
    names = _provider_names()
    seen = {Target(provider, model_id)}
    found: list[Target] = []
    for entry in entries:
        if not isinstance(entry, str) or not entry.strip():
            continue
        target = parse(entry, provider, names)
        if target not in seen:
            seen.add(target)
            found.append(target)
    return found


def falls_back(error: BaseException) -> bool:
    """Whether a call that ended on ``error`` (its retries used up) moves on to its
    fallbacks: a provider error its provider counts as retryable."""
    return isinstance(error, ProviderError) and bool(error.retryable)


def _known(target: Target) -> bool | None:
    """Whether the registry's sources (the bundled data, genai-prices) know ``target``;
    ``None`` when they cannot tell (a provider they do not price: Ollama, a custom
    connection, any OpenAI-compatible server)."""
    from ..catalog.bundled import bundled_models
    from ..catalog.pricing import GUESS_PROVIDER, PROVIDER_IDS, find_genai_model

    mapped = PROVIDER_IDS.get(target.provider)
    if mapped is None or mapped == GUESS_PROVIDER:
        return None
    if any(
        item.get("provider") == target.provider and item.get("model_id") == target.model_id
        for item in bundled_models()
    ):
        return True
    return find_genai_model(target.model_id, target.provider) is not None


def setting_errors(value: Any) -> list[tuple[str, str]]:
    """The problems of a ``FALLBACKS`` value, as ``(check id, text)``: ``llmchat.E074``
    for its shape (not a dict of lists of model id strings, a model falling back to
    itself), ``llmchat.E075`` for a model the registry's sources do not know."""
    if value is None:
        return []
    name = "LLMCHAT['FALLBACKS']"
    if not isinstance(value, dict):
        return [("llmchat.E074", f"{name} must be a dict, not {type(value).__name__}.")]
    names = _provider_names()
    problems: list[tuple[str, str]] = []
    for key, entries in value.items():
        if not isinstance(key, str) or not key.strip():
            problems.append(("llmchat.E074", f"{name} has a key that is not a model id: {key!r}."))
            continue
        where = f"{name}[{key!r}]"
        if not isinstance(entries, list | tuple):
            problems.append(
                ("llmchat.E074", f"{where} must be a list of model ids, not {entries!r}.")
            )
            continue
        keyed = parse(key, "", names)
        for entry in entries:
            if not isinstance(entry, str) or not entry.strip():
                problems.append(
                    ("llmchat.E074", f"{where} has an entry that is not a model id: {entry!r}.")
                )
                continue
            target = parse(entry, keyed.provider, names)
            if entry == key or (keyed.provider and target == keyed):
                problems.append(("llmchat.E074", f"{where} falls back to itself ({entry!r})."))
                continue
            if target.provider and _known(target) is False:
                problems.append(
                    (
                        "llmchat.E075",
                        f"{where} names {entry!r}, a model {target.provider} does not have "
                        "as far as the model registry knows.",
                    )
                )
        if keyed.provider and _known(keyed) is False:
            problems.append(
                (
                    "llmchat.E075",
                    f"{name} has the key {key!r}, a model {keyed.provider} does not have "
                    "as far as the model registry knows.",
                )
            )
    return problems
