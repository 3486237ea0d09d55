from __future__ import annotations

from django.conf import settings as django_settings
from django.db import models

from .usage import MONEY

LIMIT_FIELDS = (
    "usd_per_day",
    "usd_per_month",
    "tokens_per_day",
    "runs_per_hour",
    "concurrent_runs",
)


class AbstractLimit(models.Model):
    """A user's own spending limits, over ``LLMCHAT["LIMITS"]`` (and ``LIMITS_FOR``): an
    empty field keeps the value from the settings; ``unlimited`` lifts every limit."""

    usd_per_day = models.DecimalField(**MONEY, help_text="USD per day (empty: the default).")
    usd_per_month = models.DecimalField(**MONEY, help_text="USD per calendar month.")
    tokens_per_day = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Input, output and cache tokens per day."
    )
    runs_per_hour = models.PositiveIntegerField(
        null=True, blank=True, help_text="Runs started in the last hour."
    )
    concurrent_runs = models.PositiveIntegerField(
        null=True, blank=True, help_text="Runs queued or running at once."
    )
    soft = models.DecimalField(
        max_digits=4,
        decimal_places=3,
        null=True,
        blank=True,
        help_text="Fraction of a limit that sends the budget_warning signal and event (e.g. 0.8).",
    )
    unlimited = models.BooleanField(default=False, help_text="No limit at all for this user.")
    note = models.CharField(max_length=255, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"Limits of {self.user}"

    def values(self) -> dict:
        """The limits this row sets (fields left empty are not in it)."""
        out = {n: getattr(self, n) for n in LIMIT_FIELDS if getattr(self, n) is not None}
        if self.soft is not None:
            out["soft"] = self.soft
        return out


class Limit(AbstractLimit):
    user = models.OneToOneField(
        django_settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="llmchat_limit"
    )

    class Meta(AbstractLimit.Meta):
        db_table = "llmchat_limit"
        verbose_name = "spending limit"
