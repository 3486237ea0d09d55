"""What the admin pages share (``admin/base.py``): money and counts as text, a text cut
on a word, the model shown as ``provider/model_id``, view-only pages."""

from __future__ import annotations

from decimal import Decimal

import pytest

from django_llmchat.admin.base import (
    _column_fields,
    _count,
    _model_html,
    _money,
    _short,
    _ViewOnly,
)
from django_llmchat.models import Usage


def test_money_and_counts():
    assert _money(None) == "—" and _count(None) == "—"
    assert _money(Decimal("0.0012345678")) == "$0.001235"
    assert _money(Decimal("2")) == "$2"
    assert _count(1234567) == "1,234,567" and _count(0) == "0"


@pytest.mark.parametrize(
    "text, limit, expected",
    [
        ("short", 40, "short"),
        ("  many\n  spaces\there ", 40, "many spaces here"),
        ("", 40, ""),
        (None, 40, ""),
        ("The quick brown fox jumps over the lazy dog", 20, "The quick brown…"),
        ("Thequickbrownfoxjumpsoverthelazydog", 10, "Thequickb…"),
        ("one, two, three, four", 12, "one, two…"),
        ("x" * 40, 40, "x" * 40),
    ],
)
def test_short(text, limit, expected):
    assert _short(text, limit) == expected
    assert len(_short(text, limit)) <= limit


def test_model_html_dims_the_provider_and_escapes():
    usage = Usage(provider="openai", model_id="<gpt> " + "long " * 20)
    html = _model_html(usage, 12)
    assert html.startswith('<span class="llmchat-meta">openai/</span>')
    assert "&lt;gpt&gt;" in html and "<gpt>" not in html and html.endswith("…")


def test_view_only_pages_show_every_column_read_only():
    class Page(_ViewOnly):
        model = Usage

    page = Page()
    assert page.get_readonly_fields(None) == _column_fields(Usage)
    assert "id" in _column_fields(Usage) and "total_cost" in _column_fields(Usage)
    assert page.has_add_permission(None) is False and page.has_change_permission(None) is False
