"""``manage.py llmchat_sync_models``: fill the model registry (``LLMModel`` rows)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from django_llmchat.catalog.registry import sync_models


class Command(BaseCommand):
    help = (
        "Create and update LLMModel rows from genai-prices and the app's bundled capability "
        "data. Safe to run repeatedly."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        details = self.stdout if options["verbosity"] >= 2 else None
        created, updated = sync_models(stdout=details)
        self.stdout.write(f"{created} created, {updated} updated")
