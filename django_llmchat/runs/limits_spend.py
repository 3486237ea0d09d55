"""What a user spent, read for the spending limits in ONE query: the user's limit row, the
sums of the usage rows of the day and the month, the reservations of their unfinished runs
and (when a run is about to be queued) the runs of the last hour, those queued or running,
and the size of a chat's last answered request. The month's closed days are summed once per
process and day (:func:`django_llmchat.runs.limits.forget` drops them)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Count, F, IntegerField, Min, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..db.prepared import PreparedQuery, annotation_names
from ..models.limit import LIMIT_FIELDS

# placeholders of the prepared check: a user id within a 32-bit AutoField's range (a
# lookup out of a column's range is never run), moments that never start a window
_USER_ARG = 2_147_480_029
_CHAT_ARG = 2_147_480_037
_MOMENTS = tuple(datetime(2001, 2, 3, 4, 5, 6, n, tzinfo=UTC) for n in (111_111, 222_222, 333_333))

_TEN_PLACES = Decimal("0.0000000001")


def _windows(now: datetime) -> dict[str, tuple[datetime, datetime]]:
    """Start and reset time of each window, in the current time zone's calendar."""
    tz = timezone.get_current_timezone()
    local = timezone.localtime(now, tz)
    day = datetime.combine(local.date(), time.min, tzinfo=tz)
    next_day = datetime.combine(local.date() + timedelta(days=1), time.min, tzinfo=tz)
    month = day.replace(day=1)
    next_month = (month + timedelta(days=32)).replace(day=1)
    return {"day": (day, next_day), "month": (month, next_month)}


def _tokens_sum():
    return Sum(
        Coalesce("input_tokens", Value(0))
        + Coalesce("output_tokens", Value(0))
        + Coalesce("cache_read_tokens", Value(0))
        + Coalesce("cache_write_tokens", Value(0)),
        output_field=IntegerField(),
    )


def spend_annotations(
    user_ref: str = "pk",
    *,
    runs: bool = True,
    now: datetime | None = None,
    month: str = "all",
    bounds: tuple[datetime, datetime, datetime] | None = None,
) -> dict[str, Any]:
    """Subqueries of a user's use, for ``annotate()`` on a queryset whose ``user_ref``
    column is the user's id: ``usd_per_day``, ``usd_per_month``, ``tokens_per_day``,
    ``usd_reserved`` (the reservations of the user's unfinished runs) and, with ``runs``,
    ``runs_per_hour``, ``oldest_run`` and ``concurrent_runs``. ``month``:
    ``"all"`` sums the whole month in ``usd_per_month``; ``"closed"`` sums only its days
    before today, as ``usd_before_today``; ``"none"`` leaves the month out. ``bounds``:
    the starts of the day, the month and the hour, instead of those of ``now``."""
    from ..models import Run, Usage

    if bounds is None:
        now = now or timezone.now()
        windows = _windows(now)
        bounds = (windows["day"][0], windows["month"][0], now - timedelta(hours=1))
    day, month_start, hour = bounds
    usage = Usage.objects.filter(user_id=OuterRef(user_ref)).order_by().values("user_id")
    of_day = usage.filter(created_at__gte=day)
    annotations: dict[str, Any] = {
        "usd_per_day": Subquery(of_day.annotate(v=Sum("total_cost")).values("v")),
        "tokens_per_day": Subquery(of_day.annotate(v=_tokens_sum()).values("v")),
    }
    run_rows = (
        Run.objects.filter(chat__user_id=OuterRef(user_ref)).order_by().values("chat__user_id")
    )
    annotations["usd_reserved"] = Subquery(
        run_rows.filter(status__in=Run.UNFINISHED).annotate(v=Sum("reserved_cost")).values("v")
    )
    of_month = usage.filter(created_at__gte=month_start)
    if month == "all":
        annotations["usd_per_month"] = Subquery(of_month.annotate(v=Sum("total_cost")).values("v"))
    elif month == "closed":
        annotations["usd_before_today"] = Subquery(
            of_month.filter(created_at__lt=day).annotate(v=Sum("total_cost")).values("v")
        )
    if runs:
        recent = run_rows.filter(created_at__gte=hour)
        annotations["runs_per_hour"] = Subquery(recent.annotate(v=Count("pk")).values("v"))
        annotations["oldest_run"] = Subquery(recent.annotate(v=Min("created_at")).values("v"))
        annotations["concurrent_runs"] = Subquery(
            run_rows.filter(status__in=(Run.QUEUED, Run.RUNNING))
            .annotate(v=Count("pk"))
            .values("v")
        )
    return annotations


_ROW_COLUMNS = (*LIMIT_FIELDS, "soft", "unlimited", "id")
_QUERIES: dict[tuple[bool, bool, bool], tuple[PreparedQuery, list[str]]] = {}


def _last_request(chat_id):
    """The tokens of the chat's last answered request and its reply: what its next
    request sends before the new prompt."""
    from ..models import Usage

    rows = Usage.objects.filter(chat_id=chat_id, status=Usage.SUCCEEDED, operation="chat")
    total = _tokens_sum().source_expressions[0]
    return Subquery(rows.order_by("-id").annotate(v=total).values("v")[:1])


def _query(runs: bool, closed: bool, chat: bool = False) -> tuple[PreparedQuery, list[str]]:
    """The check's statement, compiled once (:class:`~django_llmchat.db.prepared.
    PreparedQuery`), and the names of its columns in order. ``closed``: it also sums the
    month's days before today; ``chat``: it also reads the size of a chat's last answered
    request (``last_request``)."""
    found = _QUERIES.get((runs, closed, chat))
    if found is None:
        month = "closed" if closed else "none"

        def build(user_id, day, *more):
            month_start = more[0] if closed else day
            hour = more[int(closed)] if runs else day
            annotations = spend_annotations(runs=runs, month=month, bounds=(day, month_start, hour))
            if chat:
                annotations["last_request"] = _last_request(more[-1])
            for name in _ROW_COLUMNS:
                annotations[f"row_{name}"] = F(f"llmchat_limit__{name}")
            return get_user_model().objects.filter(pk=user_id).annotate(**annotations)

        placeholders = [_USER_ARG, *_MOMENTS[: 1 + closed + runs], *([_CHAT_ARG] if chat else [])]
        names = annotation_names(build(*placeholders))
        query = PreparedQuery(lambda *a: build(*a).values_list(*names), placeholders)
        found = _QUERIES[(runs, closed, chat)] = (query, names)
    return found


def spend(
    user_id: int,
    *,
    runs: bool = True,
    now: datetime | None = None,
    chat_id: int | None = None,
) -> dict[str, Any]:
    """The user's limit row and use, in ONE query: ``usd_per_day``, ``usd_per_month``,
    ``tokens_per_day``, ``usd_reserved`` (the reservations of their unfinished runs; what
    the USD limits count beside the first two) (and with ``runs``: ``runs_per_hour``,
    ``concurrent_runs``, ``oldest_run``), plus ``row`` (the Limit row's values, ``None``
    without one); with ``chat_id``, ``last_request``: the tokens of that chat's last
    answered request and its reply (0 without one)."""
    now = now or timezone.now()
    windows = _windows(now)
    day, month_start = windows["day"][0], windows["month"][0]
    key = (user_id, day)
    closed = _closed_days.get(key)
    query, names = _query(runs, closed is None, chat_id is not None)
    args = [user_id, day]
    if closed is None:
        args.append(month_start)
    if runs:
        args.append(now - timedelta(hours=1))
    if chat_id is not None:
        args.append(chat_id)
    rows = query.rows(*args)
    if not rows:
        return {"row": None}
    values = dict(zip(names, rows[0], strict=True))
    out = {name: values[name] for name in names if not name.startswith("row_")}
    out["row"] = (
        {name: values[f"row_{name}"] for name in _ROW_COLUMNS if name != "id"}
        if values["row_id"] is not None
        else None
    )
    if out["row"] is not None:
        out["row"]["unlimited"] = bool(out["row"]["unlimited"])  # SQLite says 0 or 1
        for name in ("usd_per_day", "usd_per_month", "soft"):
            if out["row"][name] is not None:
                out["row"][name] = Decimal(str(out["row"][name]))
    # the columns' ten places, whatever the database's sum returns
    out["usd_per_day"] = _money(out["usd_per_day"])
    if closed is None:
        closed = _money(out.pop("usd_before_today"))
        if len(_closed_days) >= _CLOSED_DAYS_KEPT:
            _closed_days.clear()
        _closed_days[key] = closed
    out["usd_per_month"] = closed + out["usd_per_day"]
    out["usd_reserved"] = _money(out["usd_reserved"])
    for name in ("tokens_per_day", "runs_per_hour", "concurrent_runs", "last_request"):
        if name in out:
            out[name] = int(out[name] or 0)
    if out.get("oldest_run") is not None and not isinstance(out["oldest_run"], datetime):
        out["oldest_run"] = _datetime(out["oldest_run"])
    out["now"] = now
    out["windows"] = windows
    return out


def _money(value: Any) -> Decimal:
    return Decimal(str(value or 0)).quantize(_TEN_PLACES)


def _datetime(value: Any) -> datetime:
    """A datetime a backend returned as text (SQLite), aware in UTC."""
    from django.utils.dateparse import parse_datetime

    found = parse_datetime(str(value))
    if found is not None and timezone.is_naive(found):
        found = timezone.make_aware(found, UTC)
    return found


# USD of each user's month before a given day, by (user id, that day's start): the rows
# of closed days do not change, so a check sums them once per process and day, and then
# reads only the day's rows (a few hundred for a heavy user, not the month's thousands).
_closed_days: dict[tuple[int, datetime], Decimal] = {}
_CLOSED_DAYS_KEPT = 50_000
