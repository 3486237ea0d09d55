"""Spending limits (``django_llmchat/runs/limits.py``) at their edges: the hard limit reached
exactly, the soft fraction reached exactly, the first and last moments of each window
(day, month, hour) in the current time zone, where each limit comes from (the default,
``LIMITS_FOR``, the user's row, ``unlimited``), the sums one check reads, the signals and
the setting's checks, word for word.

Written to kill the mutants ``make mutation`` found alive (docs/testing.md, "Mutation
testing"): each test names in its docstring the behaviour it pins.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth import get_user_model
from django.core.signals import setting_changed
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_llmchat import signals
from django_llmchat.errors import BudgetExceededError
from django_llmchat.models import Chat, Limit, Run, Usage
from django_llmchat.runs import limits, limits_spend

pytestmark = pytest.mark.django_db(transaction=True)

# a moment far from any window's edge in UTC and in the zones used below
NOON = datetime(2024, 5, 15, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _fresh_month_sums():
    limits.forget()
    yield
    limits.forget()


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("spender", password="pw")


@pytest.fixture
def chat(user):
    return Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")


@pytest.fixture
def configure(settings):
    def configure(limit=None, **more):
        settings.LLMCHAT = {"LIMITS": None if limit is None else {"default": limit}, **more}

    return configure


def used(chat, usd="0", when=None, *, user=None, **tokens) -> Usage:
    row = Usage.objects.create(
        chat=chat,
        user=user if user is not None else chat.user,
        provider="openai",
        model_id="gpt-4.1-mini",
        status=Usage.SUCCEEDED,
        total_cost=None if usd is None else Decimal(usd),
        **tokens,
    )
    if when is not None:
        Usage.objects.filter(pk=row.pk).update(created_at=when)
    return row


def run_at(chat, when, status="succeeded", reserved="0") -> Run:
    run = Run.objects.create(chat=chat, status=status, reserved_cost=Decimal(reserved))
    Run.objects.filter(pk=run.pk).update(created_at=when)
    return run


# -- where the limits come from --------------------------------------------------------------
def by_username(user):
    return {"usd_per_day": "1.50", "concurrent_runs": "3"} if user.username == "spender" else {}


def by_pk(user):
    return {"runs_per_hour": user.pk}


def test_limits_off_and_the_default_converted_to_numbers(configure, user):
    """Limits off: none. The default's values become Decimals (money, soft) and ints
    (counts); unknown keys are dropped."""
    configure()
    assert limits.limits_for(user) == {}
    configure({"usd_per_day": "2.00", "tokens_per_day": "100", "soft": 0.5, "made_up": 1})
    found = limits.limits_for(user)
    assert found == {"usd_per_day": Decimal("2.00"), "tokens_per_day": 100, "soft": Decimal("0.5")}
    assert type(found["tokens_per_day"]) is int and type(found["soft"]) is Decimal
    assert str(found["usd_per_day"]) == "2.00"
    configure({"usd_per_month": Decimal("7.25"), "runs_per_hour": None})
    assert limits.limits_for(user) == {"usd_per_month": Decimal("7.25"), "runs_per_hour": None}


def test_limits_for_overrides_the_default_and_the_row_overrides_both(configure, user):
    """default < LIMITS_FOR(user) (a dotted path or a callable) < the user's row (its
    empty fields keep what is above); ``unlimited`` lifts everything."""
    configure(
        {"usd_per_day": "10", "usd_per_month": "100", "tokens_per_day": 5},
        LIMITS_FOR="tests.runs.test_limits_mutants.by_username",
    )
    assert limits.limits_for(user) == {
        "usd_per_day": Decimal("1.50"),
        "usd_per_month": Decimal("100"),
        "tokens_per_day": 5,
        "concurrent_runs": 3,
    }
    row = {"usd_per_day": None, "usd_per_month": Decimal("20"), "tokens_per_day": None}
    row.update(runs_per_hour=None, concurrent_runs=1, soft=Decimal("0.900"), unlimited=False)
    assert limits.limits_for(user, row) == {
        "usd_per_day": Decimal("1.50"),
        "usd_per_month": Decimal("20"),
        "tokens_per_day": 5,
        "concurrent_runs": 1,
        "soft": Decimal("0.900"),
    }
    assert limits.limits_for(user, {**row, "unlimited": True}) == {}
    configure({"usd_per_day": "10"}, LIMITS_FOR=by_username)
    assert limits.limits_for(user)["usd_per_day"] == Decimal("1.50")
    configure({"usd_per_day": "10"}, LIMITS_FOR=lambda user: None)
    assert limits.limits_for(user) == {"usd_per_day": Decimal("10")}


def test_limits_for_receives_the_chats_user_read_only_when_asked(configure, chat, user):
    """The ``LIMITS_FOR`` callable gets the chat's user: the cached one as it is, else a
    stand-in whose ``pk`` and ``id`` cost no query and whose other attributes are the
    user row's (read once)."""
    seen = []

    def record(found):
        seen.append(found)
        return {"runs_per_hour": found.pk, "concurrent_runs": found.id}

    configure({"usd_per_day": "10"}, LIMITS_FOR=record)
    fresh = Chat.objects.get(pk=chat.pk)  # its user not loaded
    with CaptureQueriesContext(connection) as ctx:
        verdict = limits.admit(fresh)
    assert len(ctx.captured_queries) == 1
    assert verdict.limits["runs_per_hour"] == user.pk == verdict.limits["concurrent_runs"]
    configure({"usd_per_day": "10"}, LIMITS_FOR="tests.runs.test_limits_mutants.by_username")
    verdict = limits.check(Chat.objects.get(pk=chat.pk))
    assert verdict.limits["usd_per_day"] == Decimal("1.50")
    configure({"usd_per_day": "10"}, LIMITS_FOR=record)
    limits.check(chat)  # chat.user was loaded by the fixture
    assert seen[-1] is chat.user


def test_the_stand_in_user_reads_the_row_once():
    """Attributes of the stand-in user come from one read of the user row."""
    model = get_user_model()
    user = model.objects.create_user("lazy")
    lazy = limits._LazyUser(user.pk)
    assert (lazy.pk, lazy.id) == (user.pk, user.pk)
    with CaptureQueriesContext(connection) as ctx:
        assert lazy.username == "lazy" and lazy.is_active is True
        assert lazy.get_username() == "lazy"
    assert len(ctx.captured_queries) == 1


# -- the hard limit and the soft fraction, exactly at the edge --------------------------------
@pytest.mark.parametrize(
    "limit, allowed, under, at",
    [
        ("usd_per_day", "1.00", {"usd": "0.99"}, {"usd": "1.00"}),
        ("usd_per_month", "1.00", {"usd": "0.99"}, {"usd": "1.00"}),
        ("tokens_per_day", 100, {"input_tokens": 99}, {"input_tokens": 100}),
    ],
)
def test_a_spending_limit_is_reached_at_exactly_the_limit(
    configure, chat, limit, allowed, under, at
):
    """``used >= allowed`` stops: one cent (one token) under passes, the limit itself is
    refused, with the amounts, the window's end and the limit's message."""
    configure({limit: allowed})
    row = used(chat, **under)
    verdict = limits.check(chat)
    assert verdict.used[limit] == (Decimal(under["usd"]) if "usd" in under else 99)
    Usage.objects.filter(pk=row.pk).delete()
    used(chat, **at)
    limits.forget()
    with pytest.raises(BudgetExceededError) as info:
        limits.check(chat)
    exc = info.value
    assert exc.limit == limit
    assert exc.used == exc.allowed == limits.limits_for(chat.user)[limit]
    assert (
        exc.message
        == {
            "usd_per_day": "The daily spending limit is reached.",
            "usd_per_month": "The monthly spending limit is reached.",
            "tokens_per_day": "The daily token limit is reached.",
        }[limit]
    )
    windows = limits._windows(timezone.now())
    assert exc.resets_at == windows["month" if limit == "usd_per_month" else "day"][1]


@pytest.mark.parametrize(
    "limit, allowed, under, at",
    [
        ("usd_per_day", "1.00", {"usd": "0.49"}, {"usd": "0.50"}),
        ("usd_per_month", "1.00", {"usd": "0.49"}, {"usd": "0.50"}),
        ("tokens_per_day", 100, {"output_tokens": 49}, {"output_tokens": 50}),
    ],
)
def test_the_soft_fraction_warns_from_exactly_its_amount(
    configure, chat, limit, allowed, under, at
):
    """``used >= allowed * soft`` warns (still under the limit): just under the fraction
    no warning, at it one ``SoftLimitReached`` with the amounts and the window's end."""
    configure({limit: allowed, "soft": "0.5"})
    row = used(chat, **under)
    assert limits.check(chat).warnings == []
    Usage.objects.filter(pk=row.pk).delete()
    used(chat, **at)
    limits.forget()
    verdict = limits.check(chat)
    windows = limits._windows(timezone.now())
    resets = windows["month" if limit == "usd_per_month" else "day"][1]
    amount = Decimal(at["usd"]) if "usd" in at else 50
    assert verdict.warnings == [
        limits.SoftLimitReached(limit, amount, limits.limits_for(chat.user)[limit], resets)
    ]
    assert verdict.resets_at[limit] == resets and verdict.used[limit] == amount


def test_no_soft_fraction_no_warning(configure, chat):
    """Without ``soft`` (the default) nothing warns, even a cent under the limit."""
    configure({"usd_per_day": "1.00"})
    used(chat, "0.99")
    assert limits.check(chat).warnings == []


def test_the_soft_fraction_of_the_row_overrides_the_default(configure, chat, user):
    configure({"usd_per_day": "1.00", "soft": "0.9"})
    used(chat, "0.60")
    assert limits.check(chat).warnings == []
    Limit.objects.create(user=user, soft=Decimal("0.5"))
    assert [w.limit for w in limits.check(chat).warnings] == ["usd_per_day"]


def test_runs_limits_are_checked_when_a_run_is_queued_and_never_warn(configure, chat):
    """runs_per_hour and concurrent_runs are checked by ``admit`` only (a run is about to
    be queued), at exactly the limit, and never warn at the soft fraction."""
    configure({"runs_per_hour": 2, "concurrent_runs": 2, "soft": "0.5"})
    run_at(chat, timezone.now(), status="queued")
    verdict = limits.admit(chat)
    assert verdict.warnings == []
    assert verdict.used == {"runs_per_hour": 1, "concurrent_runs": 1}
    assert verdict.resets_at["concurrent_runs"] is None
    run_at(chat, timezone.now(), status="running")
    with pytest.raises(BudgetExceededError) as info:
        limits.admit(chat)
    assert info.value.limit == "runs_per_hour" and info.value.used == 2
    assert info.value.message == "Too many runs were started in the last hour."
    verdict = limits.check(chat)  # before a provider call: the spending limits only
    assert verdict.used == {} and verdict.warnings == []
    configure({"concurrent_runs": 2})
    with pytest.raises(BudgetExceededError) as info:
        limits.admit(chat)
    assert (info.value.limit, info.value.used, info.value.allowed) == ("concurrent_runs", 2, 2)
    assert info.value.resets_at is None
    assert info.value.message == "Too many runs are queued or running at once."


def test_the_hourly_window_frees_up_an_hour_after_its_oldest_run(configure, chat):
    """runs_per_hour resets an hour after the oldest run of the last hour."""
    configure({"runs_per_hour": 2})
    now = timezone.now()
    oldest = run_at(chat, now - timedelta(minutes=50))
    run_at(chat, now - timedelta(minutes=10))
    run_at(chat, now - timedelta(minutes=70))  # out of the window
    with pytest.raises(BudgetExceededError) as info:
        limits.admit(chat)
    assert info.value.resets_at == Run.objects.get(pk=oldest.pk).created_at + timedelta(hours=1)
    configure({"runs_per_hour": 0})
    Run.objects.filter(chat=chat).delete()
    with pytest.raises(BudgetExceededError) as info:
        limits.admit(chat)
    assert info.value.resets_at is None and info.value.used == 0


def test_admit_and_check_say_nothing_when_limits_are_off_or_no_user(configure, chat):
    """Limits off, or a chat with no user: no verdict (``None``); an unlimited user: a
    verdict with no limit and nothing used."""
    configure()
    assert limits.admit(chat) is None and limits.check(chat) is None
    configure({"usd_per_day": "0"})
    anonymous = Chat.objects.create()
    assert limits.admit(anonymous) is None and limits.check(anonymous) is None
    Limit.objects.create(user=chat.user, unlimited=True)
    verdict = limits.admit(chat)
    assert (verdict.user_id, verdict.limits, verdict.used, verdict.warnings) == (
        chat.user_id,
        {},
        {},
        [],
    )


def test_the_signals_carry_the_whole_verdict(configure, chat):
    """``budget_exceeded`` (admit and check) and ``budget_warning`` (warn) are sent by the
    chat's class with the chat, its user, the limit, the amounts and the window's end."""
    configure({"usd_per_day": "1.00", "soft": "0.5"})
    used(chat, "0.50")
    seen = []

    def receiver(signal, sender, **kw):
        seen.append((signal, sender, kw))

    signals.budget_warning.connect(receiver)
    signals.budget_exceeded.connect(receiver)
    try:
        verdict = limits.check(chat)
        limits.warn(chat, verdict.warnings[0])
        used(chat, "0.50")
        for call in (limits.check, limits.admit):
            with pytest.raises(BudgetExceededError):
                call(chat)
    finally:
        signals.budget_warning.disconnect(receiver)
        signals.budget_exceeded.disconnect(receiver)
    resets = limits._windows(timezone.now())["day"][1]
    common = {"chat": chat, "user_id": chat.user_id, "limit": "usd_per_day"}
    assert seen == [
        (
            signals.budget_warning,
            Chat,
            {**common, "used": Decimal("0.50"), "allowed": Decimal("1.00"), "resets_at": resets},
        ),
        (
            signals.budget_exceeded,
            Chat,
            {**common, "used": Decimal("1.00"), "allowed": Decimal("1.00"), "resets_at": resets},
        ),
        (
            signals.budget_exceeded,
            Chat,
            {**common, "used": Decimal("1.00"), "allowed": Decimal("1.00"), "resets_at": resets},
        ),
    ]


# -- the windows ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "zone, moment, day, next_day, month, next_month",
    [
        # late evening in Auckland is the next day there
        (
            "Pacific/Auckland",
            datetime(2024, 1, 31, 11, 30, tzinfo=UTC),
            (2024, 2, 1),
            (2024, 2, 2),
            (2024, 2, 1),
            (2024, 3, 1),
        ),
        (
            "America/New_York",
            datetime(2024, 3, 1, 3, 0, tzinfo=UTC),
            (2024, 2, 29),
            (2024, 3, 1),
            (2024, 2, 1),
            (2024, 3, 1),
        ),
        (
            "UTC",
            datetime(2023, 12, 31, 23, 59, 59, tzinfo=UTC),
            (2023, 12, 31),
            (2024, 1, 1),
            (2023, 12, 1),
            (2024, 1, 1),
        ),
        (
            "UTC",
            datetime(2024, 7, 1, 0, 0, tzinfo=UTC),
            (2024, 7, 1),
            (2024, 7, 2),
            (2024, 7, 1),
            (2024, 8, 1),
        ),
    ],
)
def test_windows_start_at_local_midnight_and_the_first_of_the_month(
    zone, moment, day, next_day, month, next_month
):
    """Day and month windows in the current time zone's calendar: the day from local
    midnight to the next, the month from its first to the next month's (over a year's
    end and a leap day too)."""
    tz = ZoneInfo(zone)
    with timezone.override(tz):
        windows = limits._windows(moment)
    assert windows == {
        "day": (datetime(*day, tzinfo=tz), datetime(*next_day, tzinfo=tz)),
        "month": (datetime(*month, tzinfo=tz), datetime(*next_month, tzinfo=tz)),
    }


def test_spend_counts_each_row_in_the_windows_it_falls_in(chat, django_user_model):
    """spend sums the rows of the day from its first microsecond, of the month from its
    first microsecond (the days before today as well), the tokens of every kind (empty
    columns as 0), the runs of the last hour from exactly an hour ago and the user's
    queued and running runs, the reservations of their unfinished runs (queued, running,
    awaiting approval); never another user's."""
    now = datetime(2024, 5, 15, 12, 0, tzinfo=UTC)
    day = datetime(2024, 5, 15, tzinfo=UTC)
    month = datetime(2024, 5, 1, tzinfo=UTC)
    micro = timedelta(microseconds=1)
    used(
        chat,
        "1.00",
        day,
        input_tokens=1,
        output_tokens=10,
        cache_read_tokens=100,
        cache_write_tokens=1000,
    )
    used(chat, "2.00", day - micro, input_tokens=5)
    used(chat, "4.00", month)
    used(chat, "8.00", month - micro)
    used(chat, None, day + micro, output_tokens=20000)
    used(chat, "0.25", now, cache_write_tokens=300000)
    other = Chat.objects.create(user=django_user_model.objects.create_user("other"))
    used(other, "16.00", now, input_tokens=7)
    run_at(chat, now - timedelta(hours=1), reserved="0.80")
    run_at(chat, now - timedelta(hours=1) - micro, status="cancelled", reserved="3.20")
    run_at(chat, now - timedelta(minutes=5), status="queued", reserved="0.10")
    run_at(chat, now - timedelta(hours=3), status="running", reserved="0.20")
    run_at(chat, now, status="awaiting_approval", reserved="0.40")
    run_at(other, now, status="queued", reserved="1.60")
    with timezone.override(UTC):
        found = limits.spend(chat.user_id, now=now)
    assert found["usd_per_day"] == Decimal("1.25")
    assert found["usd_per_month"] == Decimal("7.25")
    assert found["tokens_per_day"] == 1111 + 20000 + 300000
    assert found["runs_per_hour"] == 3 and found["concurrent_runs"] == 2
    assert found["oldest_run"] == now - timedelta(hours=1)
    assert found["row"] is None and found["now"] == now
    assert found["windows"]["day"] == (day, day + timedelta(days=1))
    assert found["usd_reserved"] == Decimal("0.70") and "last_request" not in found
    with timezone.override(UTC):
        found = limits.spend(chat.user_id, now=now, runs=False)
    assert set(found) == {
        "usd_per_day",
        "usd_per_month",
        "tokens_per_day",
        "usd_reserved",
        "row",
        "now",
        "windows",
    }
    assert found["usd_reserved"] == Decimal("0.70")


def test_spend_without_a_run_or_usage_is_zero(chat):
    """Nothing used: zeros (not ``None``), no oldest run."""
    found = limits.spend(chat.user_id)
    assert (found["usd_per_day"], found["usd_per_month"], found["tokens_per_day"]) == (0, 0, 0)
    assert (found["runs_per_hour"], found["concurrent_runs"], found["oldest_run"]) == (0, 0, None)
    assert str(found["usd_per_day"]) == str(found["usd_reserved"]) == "0E-10"
    assert limits.spend(10**9) == {"row": None}


def test_spend_reads_the_users_limit_row(chat, user):
    """The Limit row comes back with the same query, money and soft as Decimals and
    ``unlimited`` as a bool."""
    Limit.objects.create(
        user=user,
        usd_per_day=Decimal("2.5"),
        tokens_per_day=9,
        soft=Decimal("0.75"),
        unlimited=True,
    )
    row = limits.spend(user.pk)["row"]
    assert row == {
        "usd_per_day": Decimal("2.5"),
        "usd_per_month": None,
        "tokens_per_day": 9,
        "runs_per_hour": None,
        "concurrent_runs": None,
        "soft": Decimal("0.75"),
        "unlimited": True,
    }
    assert row["unlimited"] is True and isinstance(row["usd_per_day"], Decimal)
    assert isinstance(row["soft"], Decimal)


def test_the_months_closed_days_are_kept_for_a_bounded_number_of_users(
    chat, monkeypatch, django_user_model
):
    """The sums of closed days are kept per user and day, up to _CLOSED_DAYS_KEPT entries:
    the next one clears them first."""
    monkeypatch.setattr(limits_spend, "_CLOSED_DAYS_KEPT", 2)
    others = [django_user_model.objects.create_user(f"u{n}") for n in range(2)]
    limits.spend(chat.user_id, now=NOON)
    limits.spend(others[0].pk, now=NOON)
    assert len(limits._closed_days) == 2
    limits.spend(others[1].pk, now=NOON)
    assert list(limits._closed_days) == [(others[1].pk, limits._windows(NOON)["day"][0])]


def test_the_month_sums_are_forgotten_when_the_time_zone_or_llmchat_changes(chat):
    """A change of TIME_ZONE or LLMCHAT forgets the kept sums (another setting does not)."""
    for setting, forgotten in (("DEBUG", False), ("TIME_ZONE", True), ("LLMCHAT", True)):
        limits.spend(chat.user_id, now=NOON)
        assert limits._closed_days
        setting_changed.send(sender=None, setting=setting, value=None, enter=True)
        assert (not limits._closed_days) is forgotten


def test_spend_annotations_sum_each_users_use(chat, user, django_user_model):
    """The annotations the admin lists users with: each user's day, month (or its closed
    days only, or none), tokens and runs, from ``now`` or given window starts."""
    now = timezone.now()
    windows = limits._windows(now)
    used(chat, "1.00", now, input_tokens=3)
    used(chat, "2.00", windows["day"][0] - timedelta(microseconds=1))
    run_at(chat, now, status="queued")
    run_at(chat, now - timedelta(minutes=61))
    model = get_user_model()
    row = model.objects.annotate(**limits.spend_annotations()).get(pk=user.pk)
    same_month = windows["day"][0] != windows["month"][0]
    assert row.usd_per_day == Decimal("1.00") and row.tokens_per_day == 3
    assert row.usd_per_month == (Decimal("3.00") if same_month else Decimal("1.00"))
    assert (row.runs_per_hour, row.concurrent_runs) == (1, 1)
    row = model.objects.annotate(**limits.spend_annotations(now=now, month="closed")).get(
        pk=user.pk
    )
    assert row.usd_before_today == (Decimal("2.00") if same_month else None)
    assert not hasattr(row, "usd_per_month")
    found = limits.spend_annotations(runs=False, month="none")
    assert set(found) == {"usd_per_day", "tokens_per_day", "usd_reserved"}
    bounds = (now - timedelta(days=400), now - timedelta(days=400), now - timedelta(hours=2))
    by_chat = Chat.objects.annotate(**limits.spend_annotations("user_id", bounds=bounds))
    row = by_chat.get(pk=chat.pk)
    assert (row.usd_per_day, row.usd_per_month, row.runs_per_hour) == (
        Decimal("3.00"),
        Decimal("3.00"),
        2,
    )


def test_an_oldest_run_read_as_text_is_an_aware_datetime():
    """SQLite returns the oldest run as text: it becomes an aware UTC datetime."""
    assert limits._datetime("2024-05-15 12:00:00.000001") == datetime(
        2024, 5, 15, 12, 0, 0, 1, tzinfo=UTC
    )
    moment = datetime(2024, 5, 15, 12, 0, tzinfo=ZoneInfo("Europe/Paris"))
    assert limits._datetime(moment.isoformat()) == moment
    assert limits._datetime(moment.isoformat()).utcoffset() == timedelta(hours=2)


# -- the setting's checks ---------------------------------------------------------------------
KNOWN = "usd_per_day, usd_per_month, tokens_per_day, runs_per_hour, concurrent_runs, soft"


@pytest.mark.parametrize(
    "value, problems",
    [
        (None, []),
        ({}, []),
        ({"default": {}}, []),
        (
            {"default": {"usd_per_day": "2", "usd_per_month": None, "concurrent_runs": 0}},
            [],
        ),
        ({"default": {"soft": "1"}}, []),
        ({"default": {"soft": "0.001", "tokens_per_day": 2.5}}, []),
        ([], ['LLMCHAT["LIMITS"] must be a dict such as {"default": {"usd_per_day": "2.00"}}']),
        (
            {"users": {}, "default": []},
            [
                "LLMCHAT[\"LIMITS\"] has an unknown key 'users' "
                '(only "default" and "reserve_output_tokens")',
                'LLMCHAT["LIMITS"]["default"] must be a dict',
            ],
        ),
        (
            {"default": {"usd_a_day": "1"}},
            [f'LLMCHAT["LIMITS"]["default"][\'usd_a_day\'] is not a limit (known: {KNOWN})'],
        ),
        (
            {"default": {"usd_per_month": 2.5}},
            [
                'LLMCHAT["LIMITS"]["default"][\'usd_per_month\'] must be a string or a '
                "Decimal (a float loses cents)"
            ],
        ),
        (
            {"default": {"usd_per_day": "lots", "runs_per_hour": []}},
            [
                "LLMCHAT[\"LIMITS\"][\"default\"]['usd_per_day'] must be a number, got 'lots'",
                'LLMCHAT["LIMITS"]["default"][\'runs_per_hour\'] must be a number, got []',
            ],
        ),
        (
            {"default": {"concurrent_runs": -1, "soft": "-0.5"}},
            [
                'LLMCHAT["LIMITS"]["default"][\'concurrent_runs\'] must not be negative',
                'LLMCHAT["LIMITS"]["default"][\'soft\'] must not be negative',
            ],
        ),
        (
            {"default": {"soft": "0"}},
            ['LLMCHAT["LIMITS"]["default"][\'soft\'] must be a fraction between 0 and 1'],
        ),
        (
            {"default": {"soft": "1.001"}},
            ['LLMCHAT["LIMITS"]["default"][\'soft\'] must be a fraction between 0 and 1'],
        ),
    ],
)
def test_validate_setting_names_each_problem(value, problems):
    """Each problem of ``LLMCHAT["LIMITS"]``, word for word, in order."""
    assert limits.validate_setting(value) == problems


def test_enabled_follows_the_setting(configure):
    configure()
    assert limits.enabled() is False
    configure({})
    assert limits.enabled() is True


# -- the survivors of admission (tests/mutation) ----------------------------------------------
def test_a_user_gone_meanwhile_is_admitted_with_nothing_counted(configure):
    """A check for a user whose row is gone (no row to read use from): nothing is counted,
    no reset time given, nothing refused."""
    configure({"usd_per_day": "1", "tokens_per_day": 10, "runs_per_hour": 1})
    verdict = limits.admit(Chat(user_id=10**9))
    assert (verdict.used, verdict.resets_at) == ({}, {})
    assert limits.check(Chat(user_id=10**9)).used == {}


def test_the_check_before_a_call_reads_no_runs(configure, chat):
    """The check before each provider call reads the spending sums and the reservations
    only; admission counts the runs as well (runs per hour, concurrent runs)."""
    configure({"usd_per_day": "1", "runs_per_hour": 5})
    with CaptureQueriesContext(connection) as check:
        limits.check(chat)
    with CaptureQueriesContext(connection) as admit:
        limits.admit(chat)
    (checked,), (admitted,) = check.captured_queries, admit.captured_queries
    assert "reserved_cost" in checked["sql"] and "COUNT(" not in checked["sql"]
    assert "reserved_cost" in admitted["sql"] and "COUNT(" in admitted["sql"]


def test_the_setting_is_checked_past_a_limit_left_out_or_not_a_number():
    """A name that is not a limit, a limit set to None (no limit) or not a number does not
    end the check: the limits after it are checked too."""
    problems = limits.validate_setting(
        {
            "default": {
                "usd_per_week": "1",
                "usd_per_day": None,
                "usd_per_month": "lots",
                "tokens_per_day": -1,
            }
        }
    )
    assert problems[1:] == [
        "LLMCHAT[\"LIMITS\"][\"default\"]['usd_per_month'] must be a number, got 'lots'",
        'LLMCHAT["LIMITS"]["default"][\'tokens_per_day\'] must not be negative',
    ]


def test_the_check_statement_is_compiled_once_per_shape():
    """The statement of each kind of check (runs or not, closed days or not) is built
    once per process and reused."""
    limits._QUERIES.clear()
    first = limits._query(True, False)
    assert limits._query(True, False) is first
    assert limits._query(False, True) is not first


def test_a_moment_read_back_as_text_is_utc_whatever_the_current_time_zone():
    with timezone.override(ZoneInfo("Europe/Rome")):
        assert limits._datetime("2024-05-15 12:00:00") == datetime(2024, 5, 15, 12, tzinfo=UTC)


def test_use_annotations_count_the_day_of_the_moment_given(chat, user):
    """``spend_annotations(now=...)`` sums from the start of that moment's day, not of
    today's."""
    past = NOON - timedelta(days=40)
    used(chat, "1.5", past)
    used(chat, "2", past - timedelta(days=1))
    row = (
        get_user_model()
        .objects.filter(pk=user.pk)
        .annotate(**limits.spend_annotations(now=past))
        .values("usd_per_day")
        .get()
    )
    assert row["usd_per_day"] == Decimal("1.5")


def test_the_chats_last_request_is_its_last_answered_chat_call(chat, user):
    """``last_request``: the input (cache reads and writes too) and output tokens of the
    chat's last succeeded chat call; 0 without one, never another chat's."""
    assert limits.spend(user.pk, chat_id=chat.pk)["last_request"] == 0
    used(chat, input_tokens=100)
    used(chat, input_tokens=200, cache_read_tokens=3, cache_write_tokens=4, output_tokens=20)
    other = Chat.objects.create(user=user)
    used(other, input_tokens=5000)
    found = limits.spend(user.pk, chat_id=chat.pk)
    assert found["last_request"] == 227
    assert "last_request" not in limits.spend(user.pk)
    assert limits.spend(user.pk, chat_id=other.pk)["last_request"] == 5000
