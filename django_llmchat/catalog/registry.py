"""The model registry: ``LLMModel`` rows filled from bundled data and genai-prices.

:func:`sync_models` upserts one row per model: every model genai-prices prices for a
provider in :data:`~django_llmchat.catalog.pricing.PROVIDER_IDS`, plus the app's bundled
capability data (``django_llmchat/data/models.json``), which wins for the fields it sets.
:func:`find_model` looks a row up by model id, dated snapshot ids included.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, TextIO

from django.db import transaction
from django.utils import timezone
from genai_prices.data_snapshot import get_snapshot

from ..models import LLMModel
from ..models.llm_model import find_model
from .bundled import bundled_models, bundled_price_tables
from .pricing import PROVIDER_IDS, find_genai_model, pricing_table

__all__ = [
    "EXCLUDED_MODEL_PREFIXES",
    "SYNCED_FIELDS",
    "bundled_models",
    "bundled_price_tables",
    "find_model",
    "sync_models",
]

SYNCED_FIELDS = (
    "name",
    "family",
    "context_window",
    "max_output_tokens",
    "modalities",
    "capabilities",
    "pricing",
    "metadata",
)
"""The ``LLMModel`` fields :func:`sync_models` may write."""

_BUNDLED_FIELDS = SYNCED_FIELDS[:7]  # pricing too: for models genai-prices does not know

EXCLUDED_MODEL_PREFIXES: dict[str, tuple[str, ...]] = {
    # genai-prices lists Vertex AI's partner models under Google; the Gemini API has none.
    "gemini": ("claude-",),
}
"""Per provider name: genai-prices model ids with these prefixes get no registry row."""

_BATCH_SIZE = 500


def _genai_metadata(provider_id: str, model: Any) -> dict[str, Any]:
    return {"provider": provider_id, "model": model.id, "deprecated": bool(model.deprecated)}


def _genai_entries(at: datetime) -> dict[tuple[str, str], dict[str, Any]]:
    """Registry values of every model genai-prices knows for our providers."""
    providers = {provider.id: provider for provider in get_snapshot().providers}
    entries: dict[tuple[str, str], dict[str, Any]] = {}
    for ours, provider_id in PROVIDER_IDS.items():
        provider = providers.get(provider_id) if provider_id else None
        if provider is None:
            continue
        excluded = EXCLUDED_MODEL_PREFIXES.get(ours, ())
        for model in provider.models:
            key = (ours, model.id)
            if key in entries or model.id.startswith(excluded):
                continue
            entry: dict[str, Any] = {
                "name": model.name or model.id,
                "pricing": pricing_table(model, at=at),
                "metadata": {
                    "sources": ["genai-prices"],
                    "genai_prices": _genai_metadata(provider.id, model),
                },
            }
            if model.context_window:
                entry["context_window"] = model.context_window
            entries[key] = entry
    return entries


def _entries(at: datetime) -> dict[tuple[str, str], dict[str, Any]]:
    """Every row the registry should hold, as field values keyed by (provider, model_id)."""
    entries = _genai_entries(at)
    for item in bundled_models():
        key = (item["provider"], item["model_id"])
        entry = entries.get(key)
        if entry is None:
            entry = {"metadata": {"sources": []}}
            found = find_genai_model(item["model_id"], item["provider"])
            if found is not None:
                provider, model = found
                entry["pricing"] = pricing_table(model, at=at)
                entry["metadata"] = {
                    "sources": ["genai-prices"],
                    "genai_prices": _genai_metadata(provider.id, model),
                }
                if model.context_window:
                    entry["context_window"] = model.context_window
            entries[key] = entry
        for field in _BUNDLED_FIELDS:
            if item.get(field) is not None:
                entry[field] = item[field]
        entry.setdefault("name", item["model_id"])
        entry["metadata"]["sources"] = ["bundled", *entry["metadata"]["sources"]]
    return entries


def _write(stdout: TextIO | None, text: str) -> None:
    if stdout is not None:
        stdout.write(text + "\n")


def sync_models(stdout: TextIO | None = None) -> tuple[int, int]:
    """Create and update ``LLMModel`` rows from genai-prices and the bundled data.

    Returns ``(created, updated)``; a row counts as updated only when a field changed, so
    a second run returns ``(0, 0)``. Fields no source knows are left as they are (a price
    typed in by hand survives), and ``metadata`` keys the sync does not own are kept. Runs
    in one transaction with a handful of queries, whatever the number of models.
    """
    model_class = LLMModel
    now = timezone.now()
    entries = _entries(now)
    created: list[LLMModel] = []
    updated: list[LLMModel] = []
    changed_fields: set[str] = set()
    per_provider: dict[str, list[int]] = {}

    with transaction.atomic():
        providers = {provider for provider, _ in entries}
        existing = {
            (row.provider, row.model_id): row
            for row in model_class.objects.filter(provider__in=providers)
        }
        for (provider, model_id), values in entries.items():
            counts = per_provider.setdefault(provider, [0, 0])
            row = existing.get((provider, model_id))
            if row is None:
                created.append(model_class(provider=provider, model_id=model_id, **values))
                counts[0] += 1
                continue
            changed = False
            for field, value in values.items():
                if field == "metadata":
                    value = {**(row.metadata or {}), **value}
                if getattr(row, field) != value:
                    setattr(row, field, value)
                    changed_fields.add(field)
                    changed = True
            if changed:
                row.updated_at = now
                updated.append(row)
                counts[1] += 1
        if created:
            model_class.objects.bulk_create(created, batch_size=_BATCH_SIZE)
        if updated:
            model_class.objects.bulk_update(
                updated, [*sorted(changed_fields), "updated_at"], batch_size=_BATCH_SIZE
            )

    for provider, (n_created, n_updated) in sorted(per_provider.items()):
        if n_created or n_updated:
            _write(stdout, f"{provider}: {n_created} created, {n_updated} updated")
    return len(created), len(updated)
