"""The usage dashboard's figures: spend and tokens over time and by model, provider, user,
status and chat, aggregated in the database.

:func:`usage_summary` runs FIVE queries whatever the number of usage rows (the periods, the
models, the users, the chats: each a ``GROUP BY`` over the rows of the date range, the
``llmchat_usage_created_idx`` index, the names of the top users and chats read for those
rows alone; and the ratings given in the range, by the rated reply's model): their time
follows the rows of the range, not the size of the tables. Everything else (provider and
status totals, cache savings, empty periods) is worked out from those few grouped rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.db.models import Count, F, Max, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import TruncDay, TruncMonth, TruncWeek
from django.utils import timezone

from ..catalog.pricing import model_pricing
from ..models import Chat, Feedback, Usage

__all__ = ["PERIODS", "DashboardFilters", "UsageSummary", "usage_summary"]

PERIODS = {"day": TruncDay, "week": TruncWeek, "month": TruncMonth}
"""The time buckets of the charts."""

DEFAULT_DAYS = 30
"""The date range shown when none is asked for: the last 30 days, today included."""

_MILLION = Decimal(1_000_000)
_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


class DashboardFilters(forms.Form):
    """The dashboard's query string: ``start`` and ``end`` dates (inclusive) and ``period``."""

    start = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    period = forms.ChoiceField(
        choices=[(name, name) for name in PERIODS], required=False, initial="day"
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        end = data.get("end") or timezone.localdate()
        start = data.get("start") or end - timedelta(days=DEFAULT_DAYS - 1)
        if start > end:
            raise forms.ValidationError({"start": "The start date is after the end date."})
        if (end - start).days > 366 * 5:
            raise forms.ValidationError({"start": "At most five years at once."})
        data.update(start=start, end=end, period=data.get("period") or "day")
        return data


@dataclass
class UsageSummary:
    """What the dashboard shows; money in USD ``Decimal``, ``None`` sums read as 0."""

    start: date
    end: date
    period: str
    totals: dict[str, Any]
    series: list[dict[str, Any]]
    by_model: list[dict[str, Any]]
    by_provider: list[dict[str, Any]]
    by_status: list[dict[str, Any]]
    by_user: list[dict[str, Any]]
    top_chats: list[dict[str, Any]]
    ratings: list[dict[str, Any]] = field(default_factory=list)
    """Per model of the rated replies: ``up`` and ``down`` (how many thumbs), ``rated``
    (their sum) and ``share_up`` (0 to 1), most rated first."""

    def chart_data(self) -> dict[str, Any]:
        """The figures the charts draw, as JSON-ready numbers."""
        return {
            "period": self.period,
            "labels": [row["start"].isoformat() for row in self.series],
            "cost": [float(row["cost"]) for row in self.series],
            "failed": [row["failed"] for row in self.series],
            "attempts": [row["attempts"] for row in self.series],
            "tokens": {name: [row[name] for row in self.series] for name in _TOKENS},
            "models": [f"{row['provider']}/{row['model_id']}" for row in self.by_model],
            "model_cost": [float(row["cost"]) for row in self.by_model],
            "statuses": [row["status"] for row in self.by_status],
            "status_attempts": [row["attempts"] for row in self.by_status],
        }


def _sums() -> dict[str, Any]:
    return {
        "attempts": Count("id"),
        "failed": Count("id", filter=Q(status=Usage.FAILED)),
        "cancelled": Count("id", filter=Q(status=Usage.CANCELLED)),
        "succeeded": Count("id", filter=Q(status=Usage.SUCCEEDED)),
        "lost": Count("id", filter=Q(status=Usage.LOST)),
        "unpriced": Count("id", filter=Q(total_cost__isnull=True, input_tokens__isnull=False)),
        "cost": Sum("total_cost"),
        "cache_read_cost": Sum("cache_read_cost"),
        **{name: Sum(name) for name in _TOKENS},
    }


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    for name in ("cost", "cache_read_cost"):
        row[name] = row.get(name) or Decimal(0)
    for name in _TOKENS:
        row[name] = row.get(name) or 0
    row["tokens"] = sum(row[name] for name in _TOKENS)
    return row


def _input_rate(model_id: str, provider: str) -> Decimal | None:
    """The model's input price per million tokens (the base of a tiered price), or None."""
    table = model_pricing(model_id, provider or None) or {}
    value = table.get("input_mtok")
    if isinstance(value, dict):
        value = value.get("base")
    try:
        return Decimal(str(value)) if value is not None else None
    except ArithmeticError:
        return None


def _period_starts(start: date, end: date, period: str) -> list[date]:
    if period == "month":
        current = start.replace(day=1)
    elif period == "week":
        current = start - timedelta(days=start.weekday())
    else:
        current = start
    starts = []
    while current <= end:
        starts.append(current)
        if period == "month":
            current = (current.replace(day=28) + timedelta(days=4)).replace(day=1)
        else:
            current += timedelta(days=7 if period == "week" else 1)
    return starts


def _add(target: dict[str, Any], row: dict[str, Any]) -> None:
    for name in ("attempts", "failed", "cancelled", "succeeded", "unpriced", "cost", "tokens"):
        target[name] = target.get(name, 0) + row[name]
    for name in (*_TOKENS, "cache_read_cost", "cache_savings"):
        target[name] = target.get(name, 0) + row.get(name, 0)


def usage_summary(
    start: date,
    end: date,
    period: str = "day",
    *,
    queryset: QuerySet | None = None,
    top: int = 10,
) -> UsageSummary:
    """The dashboard's figures for usage rows created from ``start`` to ``end`` (dates in
    the current time zone, both included), bucketed by ``period`` (day, week or month).
    ``queryset`` narrows the rows (default: every ``Usage`` row; the ratings then count
    only replies whose usage rows it holds). Five queries."""
    if period not in PERIODS:
        raise ValueError(f"period must be one of {', '.join(PERIODS)}, not {period!r}")
    tz = timezone.get_current_timezone()
    since = datetime.combine(start, time.min, tzinfo=tz)
    until = datetime.combine(end + timedelta(days=1), time.min, tzinfo=tz)
    rows = (queryset if queryset is not None else Usage.objects.all()).filter(
        created_at__gte=since, created_at__lt=until
    )
    rows = rows.order_by()

    # 1. over time
    bucket = PERIODS[period]("created_at", tzinfo=tz)
    found: dict[date, dict[str, Any]] = {}
    for row in rows.annotate(bucket=bucket).values("bucket").annotate(**_sums()):
        when = row.pop("bucket")
        when = timezone.localtime(when, tz).date() if isinstance(when, datetime) else when
        found[when] = _clean(row)
    empty = _clean({"attempts": 0, "failed": 0, "cancelled": 0, "succeeded": 0, "unpriced": 0})
    series = [
        {"start": when, **found.get(when, dict(empty))}
        for when in _period_starts(start, end, period)
    ]

    # 2. by model (and from it: providers, statuses, totals, cache savings)
    by_model = []
    for row in rows.values("provider", "model_id").annotate(**_sums()):
        row = _clean(row)
        rate = _input_rate(row["model_id"], row["provider"]) if row["cache_read_tokens"] else None
        # what the cache reads would have cost as ordinary input, less what they cost
        row["cache_savings"] = (
            row["cache_read_tokens"] * rate / _MILLION - row["cache_read_cost"]
            if rate is not None
            else Decimal(0)
        )
        by_model.append(row)
    by_model.sort(key=lambda r: (-r["cost"], -r["tokens"], r["provider"], r["model_id"]))

    providers: dict[str, dict[str, Any]] = {}
    totals: dict[str, Any] = {}
    for row in by_model:
        _add(providers.setdefault(row["provider"], {"provider": row["provider"]}), row)
        _add(totals, row)
    if not totals:
        _add(totals, {**empty, "cache_savings": Decimal(0)})
    totals["cost"] = Decimal(totals["cost"])
    by_provider = sorted(providers.values(), key=lambda r: (-r["cost"], r["provider"]))
    by_status = [
        {"status": status, "attempts": totals[status]}
        for status in ("succeeded", "failed", "cancelled", "lost")
        if status != "lost" or totals.get("lost")
    ]
    pending = totals["attempts"] - sum(s["attempts"] for s in by_status)
    if pending:
        by_status.append({"status": "pending", "attempts": pending})

    # 3. by user: the rows' own user id (the ledger's), whether the user is still there
    # the names are subqueries: PostgreSQL reads them for the ``top`` rows alone, after the
    # sort, not by joining every user (or, below, every chat) to the rows of the range
    users = get_user_model()._default_manager.filter(pk=OuterRef("user")).order_by()
    by_user = [
        {"user_id": row["user"], "username": row["username"], **_clean(row)}
        for row in rows.values("user")
        .annotate(**_sums())
        .annotate(username=Subquery(users.values(get_user_model().USERNAME_FIELD)[:1]))
        .order_by(F("cost").desc(nulls_last=True), "user")[:top]
    ]

    # 4. the most expensive chats, deleted ones with the title their rows kept
    chats = Chat.objects.filter(pk=OuterRef("chat")).order_by()
    top_chats = [
        {
            "chat_id": row["chat"],
            "title": row["live_title"] if row["live_title"] is not None else row["kept_title"],
            "deleted": row["live_title"] is None,
            **_clean(row),
        }
        for row in rows.values("chat")
        .annotate(kept_title=Max("chat_title"), **_sums())
        .annotate(live_title=Subquery(chats.values("title")[:1]))
        .order_by(F("cost").desc(nulls_last=True), "-chat")[:top]
    ]
    # 5. ratings given in the range, by the model of the rated reply
    feedback = Feedback.objects.filter(created_at__gte=since, created_at__lt=until)
    if queryset is not None:
        feedback = feedback.filter(message_id__in=rows.values("message_id"))
    ratings = []
    for row in (
        feedback.order_by()
        .values(provider=F("message__provider"), model_id=F("message__model_id"))
        .annotate(up=Count("id", filter=Q(rating=1)), down=Count("id", filter=Q(rating=-1)))
    ):
        row["rated"] = row["up"] + row["down"]
        row["share_up"] = row["up"] / row["rated"] if row["rated"] else 0.0
        ratings.append(row)
    ratings.sort(key=lambda r: (-r["rated"], r["provider"], r["model_id"]))
    return UsageSummary(
        start=start,
        end=end,
        period=period,
        totals=totals,
        series=series,
        by_model=by_model,
        by_provider=by_provider,
        by_status=by_status,
        by_user=by_user,
        top_chats=top_chats,
        ratings=ratings,
    )
