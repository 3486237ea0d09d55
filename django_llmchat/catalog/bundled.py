"""The capability and price data bundled with the app (``data/models.json``).

A module of its own, importing nothing else of the package, so that both the registry
and the pricing read it.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["bundled_models", "bundled_price_tables"]


@cache
def _bundled_text() -> str:
    return resources.files("django_llmchat").joinpath("data/models.json").read_text("utf-8")


def bundled_models() -> list[dict[str, Any]]:
    """The app's bundled capability data: one dict per model (a fresh copy each call)."""
    return json.loads(_bundled_text())


@cache
def bundled_price_tables() -> dict[tuple[str, str], dict[str, Any]]:
    """The price tables the bundled data sets itself, by ``(provider, model_id)``: the
    prices of models genai-prices does not know (the offline demo model)."""
    return {
        (item["provider"], item["model_id"]): item["pricing"]
        for item in bundled_models()
        if item.get("pricing")
    }
