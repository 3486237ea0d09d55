"""Helpers the admin pages share: money and counts as text, the admin stylesheet."""

from __future__ import annotations

from typing import Any

from django.template.defaultfilters import floatformat
from django.utils.html import format_html


def _money(value: Any) -> str:
    return "—" if value is None else f"${floatformat(value, -6)}"


def _count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _short(text: str, limit: int = 40) -> str:
    """``text`` on one line, cut at a word boundary to at most ``limit`` characters."""
    text = " ".join((text or "").split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:-") + "…"


class _Styled:
    class Media:
        css = {"all": ("django_llmchat/admin.css",)}


class _ViewOnly:
    """Rows shown, never added or saved (no SAVE button): every column read-only."""

    def get_readonly_fields(self, request, obj=None):
        return _column_fields(self.model)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj: Any = None) -> bool:
        return False


def _model_html(obj: Any, limit: int) -> str:
    """``provider/model_id``, the provider dimmed, the id cut at ``limit`` characters."""
    return format_html(
        '<span class="llmchat-meta">{}/</span>{}', obj.provider, _short(obj.model_id, limit)
    )


def _column_fields(model) -> list[str]:
    """The names of the model's own columns, in declaration order."""
    return [f.name for f in model._meta.get_fields() if f.concrete and not f.many_to_many]
