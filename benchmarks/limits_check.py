"""What a spending-limit check costs: the one query before every provider call
(``limits.check``: the user's limit row, USD of the day and the month, tokens of the day)
and the one before a run is queued (``limits.admit``: the same plus the runs of the last
hour and those queued or running), for a user with 100,000 usage rows, beside the cheapest
ORM query there is (the user row read by primary key) and a bare ``SELECT 1`` round trip,
run as many times. Prints the time per check in milliseconds (target: under 0.3 ms on
PostgreSQL over the round trip), its ratio to the ORM floor and what it adds to the
round trip.

The user's rows are spread evenly over the year before the moment checked, across 20
chats (274 a day: about 7,700 in the month so far), with 2,000 runs; five other users
have 10,000 rows each. The moment checked is day 28 of the current month, so the month's
window holds four weeks of rows whatever the date the benchmark runs on (``spend()``
takes that moment; ``check()`` and ``admit()`` run the same query at the current time).
``--recent`` puts all the rows in those four weeks (every row is summed).

    DATABASE_URL=postgres://... python benchmarks/limits_check.py [--rows 100000] [--n 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta

from _django import setup


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--recent", action="store_true")
    args = parser.parse_args()

    setup({"LIMITS": {"default": {"usd_per_day": "1000"}}})
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from django_llmchat.models import Chat, Run, Usage
    from django_llmchat.runs import limits

    User = get_user_model()
    user = User.objects.create_user("heavy")
    chats = [Chat.objects.create(user=user, title=f"c{i}") for i in range(20)]
    moment = timezone.localtime().replace(day=28, hour=12, minute=0, second=0, microsecond=0)
    days = 27 if args.recent else 365

    def rows_of(owner, chat_list, count):
        """``count`` usage rows of ``owner``, spread over ``days`` days before ``moment``."""
        made = []
        for i in range(count):
            row = Usage(
                chat=chat_list[i % len(chat_list)],
                user=owner,
                status="succeeded",
                input_tokens=120,
                output_tokens=40,
                total_cost=Decimal("0.0004"),
            )
            made.append(row)
            if len(made) == 5000:
                Usage.objects.bulk_create(made)
                made = []
        Usage.objects.bulk_create(made)
        ids = list(Usage.objects.filter(user=owner).order_by("id").values_list("id", flat=True))
        per_day = -(-len(ids) // days)
        for day in range(days):  # created_at is auto_now_add: spread the rows afterwards
            chunk = ids[day * per_day : (day + 1) * per_day]
            if chunk:
                Usage.objects.filter(id__gte=chunk[0], id__lte=chunk[-1]).update(
                    created_at=moment - timedelta(days=day, minutes=5)
                )

    for n in range(5):  # other users' rows are there too, and are not read
        other = User.objects.create_user(f"other{n}")
        rows_of(other, [Chat.objects.create(user=other)], args.rows // 10)
    rows_of(user, chats, args.rows)
    Run.objects.bulk_create(
        Run(chat=chats[i % len(chats)], status=Run.SUCCEEDED) for i in range(2000)
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    found = limits.spend(user.pk, now=moment)
    print(
        f"{connection.vendor}: {args.rows} usage rows for the user, "
        f"checked on {moment:%Y-%m-%d}: today ${found['usd_per_day']}, "
        f"this month ${found['usd_per_month']}, {found['tokens_per_day']} tokens today"
    )

    def floor() -> None:
        User.objects.filter(pk=user.pk).values("pk").first()

    def round_trip() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()

    sides = {
        "SELECT 1 (round trip)": round_trip,
        "user row by pk (floor)": floor,
        "check (each provider call)": lambda: limits.spend(user.pk, runs=False, now=moment),
        "admit (each run)": lambda: limits.spend(user.pk, runs=True, now=moment),
    }
    for fn in sides.values():  # warm up
        for _ in range(50):
            fn()
    times: dict[str, list[float]] = {name: [] for name in sides}
    per_round = max(1, args.n // args.rounds)
    for _ in range(args.rounds):  # the sides take turns: a slow spell hits them alike
        for name, fn in sides.items():
            started = time.perf_counter()
            for _ in range(per_round):
                fn()
            times[name].append((time.perf_counter() - started) / per_round * 1000)
    trip = statistics.median(times["SELECT 1 (round trip)"])
    base = statistics.median(times["user row by pk (floor)"])
    for name, values in times.items():
        median = statistics.median(values)
        print(
            f"{name:28s} {median:.3f} ms per check "
            f"(rounds {min(values):.3f}..{max(values):.3f}), x{median / base:.1f} the floor, "
            f"{median - trip:+.3f} ms over a round trip"
        )


if __name__ == "__main__":
    main()
