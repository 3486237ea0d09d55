"""The model registry and the spending limits in the admin."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.defaultfilters import truncatechars
from django.utils.html import format_html, format_html_join

from ..models import Limit, LLMModel
from ..models.limit import LIMIT_FIELDS
from .base import _Styled

CAPABILITY_CHOICES = (
    ("streaming", "streaming"),
    ("tools", "tools"),
    ("vision", "vision (images in)"),
    ("pdf", "PDF in"),
    ("thinking", "thinking"),
    ("structured_output", "structured output"),
    ("prompt_caching", "prompt caching"),
)
MODALITY_CHOICES = (
    ("text", "text"),
    ("image", "image"),
    ("pdf", "PDF"),
    ("audio", "audio"),
    ("video", "video"),
)
PRICE_FIELDS = {
    "input_mtok": "input",
    "output_mtok": "output",
    "cache_read_mtok": "cache read",
    "cache_write_mtok": "cache write",
}


def _with_current(choices: tuple, values: Any) -> list[tuple[str, str]]:
    """``choices`` plus any stored value they do not list (kept, never dropped)."""
    known = [value for value, _ in choices]
    extra = [(v, v) for v in (values or []) if isinstance(v, str) and v not in known]
    return [*choices, *extra]


def _price_field(label: str) -> forms.DecimalField:
    return forms.DecimalField(
        label=f"{label} (USD / 1M tokens)",
        required=False,
        min_value=Decimal(0),
        decimal_places=6,
        max_digits=16,
    )


class LLMModelForm(forms.ModelForm):
    """Capabilities and modalities as checkboxes, the four token prices as numbers (USD per
    million tokens). Tiered prices and other price keys are shown, and kept as they are."""

    capabilities = forms.MultipleChoiceField(
        choices=CAPABILITY_CHOICES, widget=forms.CheckboxSelectMultiple, required=False
    )
    input_modalities = forms.MultipleChoiceField(
        label="input", choices=MODALITY_CHOICES, widget=forms.CheckboxSelectMultiple,
        required=False,
    )  # fmt: skip
    output_modalities = forms.MultipleChoiceField(
        label="output", choices=MODALITY_CHOICES, widget=forms.CheckboxSelectMultiple,
        required=False,
    )  # fmt: skip

    input_mtok = _price_field("input")
    output_mtok = _price_field("output")
    cache_read_mtok = _price_field("cache read")
    cache_write_mtok = _price_field("cache write")

    class Meta:
        model = LLMModel
        exclude = ("modalities", "pricing")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        pricing = self.instance.pricing or {}
        modalities = self.instance.modalities or {}
        self.fields["capabilities"].choices = _with_current(
            CAPABILITY_CHOICES, self.instance.capabilities
        )
        for side in ("input", "output"):
            field = self.fields[f"{side}_modalities"]
            field.choices = _with_current(MODALITY_CHOICES, modalities.get(side))
            self.initial.setdefault(f"{side}_modalities", modalities.get(side) or [])
        for key in PRICE_FIELDS:
            value = pricing.get(key)
            if isinstance(value, dict):  # tiered: shown as text below, kept as it is
                self.fields[key].disabled = True
                self.fields[key].help_text = "tiered: " + _tiers_text(value)
                value = value.get("base")
            self.initial.setdefault(key, value)

    def save(self, commit: bool = True) -> LLMModel:
        model = self.instance
        data = self.cleaned_data
        model.capabilities = list(data.get("capabilities") or [])
        modalities = dict(model.modalities or {})
        modalities["input"] = list(data.get("input_modalities") or [])
        modalities["output"] = list(data.get("output_modalities") or [])
        model.modalities = modalities
        pricing = dict(model.pricing or {})
        for key in PRICE_FIELDS:
            if self.fields[key].disabled:
                continue
            value = data.get(key)
            if value is None:
                pricing.pop(key, None)
            else:
                pricing[key] = format(value.normalize(), "f")
        model.pricing = pricing
        return super().save(commit)


def _price_text(value: Any) -> str:
    if isinstance(value, dict):
        return f"${value.get('base')}" + (f" ({_tiers_text(value)})" if value.get("tiers") else "")
    return f"${value}"


def _tiers_text(value: dict) -> str:
    return ", ".join(
        f"${tier.get('price')} above {tier.get('start'):,} prompt tokens"
        for tier in value.get("tiers") or ()
        if isinstance(tier.get("start"), int)
    )


@admin.register(LLMModel)
class LLMModelAdmin(_Styled, admin.ModelAdmin):
    form = LLMModelForm
    list_display = (
        "model_id",
        "provider",
        "name",
        "context_window",
        "max_output_tokens",
        "input_price",
        "output_price",
        "cache_read_price",
        "capabilities_display",
    )
    list_filter = ("provider", "family")
    search_fields = ("model_id", "name", "family")
    readonly_fields = ("pricing_display", "metadata_display", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": (("provider", "model_id"), ("name", "family"))}),
        ("Limits", {"fields": (("context_window", "max_output_tokens"),)}),
        ("Capabilities", {"fields": ("capabilities",)}),
        ("Modalities", {"fields": (("input_modalities", "output_modalities"),)}),
        (
            "Prices",
            {
                "fields": (
                    ("input_mtok", "output_mtok"),
                    ("cache_read_mtok", "cache_write_mtok"),
                    "pricing_display",
                )
            },
        ),
        ("Sources", {"fields": ("metadata_display", "created_at", "updated_at")}),
    )

    @staticmethod
    def _price(obj: LLMModel, key: str) -> str:
        value = (obj.pricing or {}).get(key)
        if isinstance(value, dict):
            value = value.get("base")
        return "—" if value is None else f"${value}/M"

    @admin.display(description="input")
    def input_price(self, obj: LLMModel) -> str:
        return self._price(obj, "input_mtok")

    @admin.display(description="output")
    def output_price(self, obj: LLMModel) -> str:
        return self._price(obj, "output_mtok")

    @admin.display(description="cache read")
    def cache_read_price(self, obj: LLMModel) -> str:
        return self._price(obj, "cache_read_mtok")

    @admin.display(description="capabilities")
    def capabilities_display(self, obj: LLMModel) -> str:
        return format_html_join(
            " ", '<span class="llmchat-chip">{}</span>', ((c,) for c in obj.capabilities or ())
        )

    @admin.display(description="all prices (USD)")
    def pricing_display(self, obj: LLMModel) -> str:
        rows = sorted((obj.pricing or {}).items())
        if not rows:
            return "no price known: costs of this model show as unknown"
        return format_html(
            '<table class="llmchat-kv">{}</table>',
            format_html_join(
                "",
                "<tr><th>{}</th><td>{}</td></tr>",
                ((key.replace("_", " "), _price_text(value)) for key, value in rows),
            ),
        )

    @admin.display(description="sources")
    def metadata_display(self, obj: LLMModel) -> str:
        meta = obj.metadata or {}
        sources = ", ".join(meta.get("sources") or ()) or "entered by hand"
        genai = meta.get("genai_prices") or {}
        if genai:
            sources += f" (genai-prices: {genai.get('provider')}/{genai.get('model')})"
        return truncatechars(sources, 200)


@admin.register(Limit)
class LimitAdmin(_Styled, admin.ModelAdmin):
    """Each user's own spending limits (empty fields keep ``LLMCHAT["LIMITS"]``), with
    what they used today, this month and this hour against the limit in effect."""

    list_display = (
        "user",
        "usd_today",
        "usd_this_month",
        "tokens_today",
        "runs_last_hour",
        "open_runs",
        "unlimited",
        "note",
    )
    list_filter = ("unlimited",)
    search_fields = ("note",)
    raw_id_fields = ("user",)
    list_select_related = ("user",)
    readonly_fields = ("in_effect", "updated_at")
    fieldsets = (
        (None, {"fields": ("user", "unlimited", "note")}),
        (
            "Limits (empty: the default of the settings)",
            {
                "fields": (
                    "usd_per_day",
                    "usd_per_month",
                    "tokens_per_day",
                    "runs_per_hour",
                    "concurrent_runs",
                    "soft",
                )
            },
        ),
        ("Use", {"fields": ("in_effect", "updated_at")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        from ..runs.limits import spend_annotations

        names = spend_annotations("user_id")
        return super().get_queryset(request).annotate(**{f"_{k}": v for k, v in names.items()})

    @staticmethod
    def _in_effect(obj: Limit) -> dict[str, Any]:
        from ..runs.limits import limits_for

        row = {name: getattr(obj, name) for name in (*LIMIT_FIELDS, "soft", "unlimited")}
        return limits_for(obj.user, row)

    def _against(self, obj: Limit, name: str, *, money: bool = False) -> str:
        used = getattr(obj, f"_{name}", None) or 0
        allowed = self._in_effect(obj).get(name)
        shown = f"${used:.4f}" if money else str(used)
        if allowed is None:
            return f"{shown} (no limit)"
        limit = f"${allowed:.2f}" if money else str(allowed)
        share = f" ({float(used) / float(allowed):.0%})" if allowed else ""
        return f"{shown} of {limit}{share}"

    @admin.display(description="USD today", ordering="_usd_per_day")
    def usd_today(self, obj: Limit) -> str:
        return self._against(obj, "usd_per_day", money=True)

    @admin.display(description="USD this month", ordering="_usd_per_month")
    def usd_this_month(self, obj: Limit) -> str:
        return self._against(obj, "usd_per_month", money=True)

    @admin.display(description="tokens today", ordering="_tokens_per_day")
    def tokens_today(self, obj: Limit) -> str:
        return self._against(obj, "tokens_per_day")

    @admin.display(description="runs last hour")
    def runs_last_hour(self, obj: Limit) -> str:
        return self._against(obj, "runs_per_hour")

    @admin.display(description="queued or running")
    def open_runs(self, obj: Limit) -> str:
        return self._against(obj, "concurrent_runs")

    @admin.display(description="limits in effect")
    def in_effect(self, obj: Limit) -> str:
        if obj.pk is None:
            return "—"
        found = self._in_effect(obj)
        if not found:
            return "no limit"
        return ", ".join(f"{name}: {value}" for name, value in found.items())
