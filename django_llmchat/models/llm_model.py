from __future__ import annotations

import re
import threading
import time
from typing import Any

from django.core.signals import setting_changed
from django.db import models
from django.db.models.signals import post_delete, post_save

from ..catalog.pricing import PROVIDER_IDS, find_genai_model

_DATE_SUFFIX = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


class AbstractLLMModel(models.Model):
    """One model a provider serves: limits, modalities, capabilities and prices."""

    provider = models.CharField(max_length=64)
    model_id = models.CharField(max_length=255)
    name = models.CharField(max_length=255)
    family = models.CharField(max_length=128, blank=True)
    context_window = models.PositiveIntegerField(null=True, blank=True)
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    modalities = models.JSONField(default=dict, blank=True)
    capabilities = models.JSONField(default=list, blank=True)
    pricing = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True
        verbose_name = "LLM model"
        ordering = ("provider", "model_id")

    def __str__(self) -> str:
        return f"{self.provider}/{self.model_id}"

    def supports(self, capability: str) -> bool:
        return capability in (self.capabilities or [])


class LLMModel(AbstractLLMModel):
    class Meta(AbstractLLMModel.Meta):
        db_table = "llmchat_llm_model"
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "model_id"], name="llmchat_llm_model_provider_model_uniq"
            )
        ]
        indexes = [models.Index(fields=["model_id"], name="llmchat_llm_model_model_idx")]


def _reverse_provider(provider_id: str) -> str | None:
    for ours, theirs in PROVIDER_IDS.items():
        if theirs == provider_id:
            return ours
    return None


def find_model(model_id: str | None, provider: str | None = None) -> LLMModel | None:
    """The ``LLMModel`` row for ``model_id`` (on ``provider`` when given), or ``None``.

    Tries, in order: the exact id, the id without a trailing date
    (``claude-haiku-4-5-20251001`` -> ``claude-haiku-4-5``, ``gpt-4o-2024-08-06`` ->
    ``gpt-4o``), and the id genai-prices resolves the name to. One query.
    """
    if not model_id:
        return None
    candidates = [model_id]

    def add(candidate: str | None) -> None:
        if candidate and candidate not in candidates:
            candidates.append(candidate)

    add(model_id.lower())
    add(_DATE_SUFFIX.sub("", model_id))
    add(_DATE_SUFFIX.sub("", model_id.lower()))
    preferred = provider
    found = find_genai_model(model_id, provider)
    if found is not None:
        add(found[1].id)
        preferred = preferred or _reverse_provider(found[0].id)

    rows = LLMModel.objects.filter(model_id__in=candidates)
    if provider:
        rows = rows.filter(provider=provider)
    best = min(
        rows,
        key=lambda row: (candidates.index(row.model_id), row.provider != preferred, row.provider),
        default=None,
    )
    return best


_LIMITS_TTL = 60.0
_limits: dict[tuple[str, str], tuple[float, int | None, int | None]] = {}
_limits_lock = threading.Lock()


def model_limits(provider: str, model_id: str) -> tuple[int | None, int | None]:
    """``(context_window, max_output_tokens)`` of a model from the registry (``None`` when
    unknown), remembered for a minute (a change to a registry row made in this process is
    seen at once)."""
    key = (provider, model_id)
    found = _limits.get(key)
    now = time.monotonic()
    if found is not None and found[0] > now:
        return found[1], found[2]
    row = find_model(model_id, provider)
    window = row.context_window if row is not None else None
    output = row.max_output_tokens if row is not None else None
    with _limits_lock:
        _limits[key] = (now + _LIMITS_TTL, window, output)
    return window, output


def _forget_limits(sender: Any = None, **kwargs: Any) -> None:
    with _limits_lock:
        _limits.clear()


post_save.connect(_forget_limits, sender=LLMModel, dispatch_uid="llmchat-limits")
post_delete.connect(_forget_limits, sender=LLMModel, dispatch_uid="llmchat-limits-del")
setting_changed.connect(_forget_limits, dispatch_uid="llmchat-limits-settings")
