"""The usage dashboard on 100,000 usage rows: the admin page, rendered, beside its five
aggregate queries run bare. Prints the times and their ratios.

The rows (a month, five models, two users, twelve chats, some failed) are made once,
untimed: 5,000 with bulk_create, the rest copied in the database. Then, taking turns
every round so a slow spell of this shared machine hits them alike:

* ``page``: ``GET /admin/django_llmchat/usagedashboard/`` through Django's test client as
  a superuser (middleware, the five grouped queries, the template, the chart data);
* ``summary``: ``usage_summary()`` alone (the queries and the Python that shapes them);
* ``baseline``: the very five statements ``usage_summary()`` sends, recorded once, run as
  raw SQL and fetched with a bare cursor.

The page's query count is printed too (it does not depend on the number of rows; the
test suite asserts it).

    python benchmarks/dashboard.py [--rows 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta
from decimal import Decimal

from _django import setup


def make_rows(total: int) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from django_llmchat.models import Chat, Usage

    users = [get_user_model().objects.create_user(f"bench-{i}") for i in range(2)]
    chats = [Chat.objects.create(title=f"chat {i}", user=users[i % 2]) for i in range(12)]
    models = [
        ("openai", "gpt-4.1-mini"),
        ("openai", "gpt-5"),
        ("anthropic", "claude-haiku-4-5"),
        ("gemini", "gemini-2.5-flash"),
        ("demo", "demo-model"),
    ]
    built = min(total, 5000)
    now = timezone.now()
    for day in range(30):
        rows = [
            Usage(
                chat=chats[i % 12],
                provider=models[i % 5][0],
                model_id=models[i % 5][1],
                status="failed" if i % 17 == 0 else "succeeded",
                input_tokens=1000 + i % 500,
                output_tokens=100 + i % 50,
                cache_read_tokens=i % 300,
                cache_read_cost=Decimal("0.00001"),
                total_cost=Decimal("0.0004"),
            )
            for i in range(day * built // 30, (day + 1) * built // 30)
        ]
        created = Usage.objects.bulk_create(rows, batch_size=1000)
        Usage.objects.filter(pk__in=[r.pk for r in created]).update(
            created_at=now - timedelta(days=day)
        )
    table = Usage._meta.db_table
    columns = ", ".join(f.column for f in Usage._meta.concrete_fields if not f.primary_key)
    made = built
    with connection.cursor() as cursor:
        while made < total:
            take = min(built, total - made)
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {table} "
                f"ORDER BY id LIMIT %s",
                [take],
            )
            made += take
    assert Usage.objects.count() == total


def bare_queries(start, end):
    """The very statements ``usage_summary()`` sends (recorded once), run as raw SQL."""
    from django.db import connection

    from django_llmchat.chats.dashboard import usage_summary

    statements: list[tuple[str, tuple]] = []

    def record(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        usage_summary(start, end, "day")
    assert len(statements) == 5, statements

    def run() -> None:
        with connection.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql, params)
                cursor.fetchall()

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.rows < 1 or args.rounds < 1:
        parser.error("--rows and --rounds must be positive")

    setup(admin=True)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    from django_llmchat.chats.dashboard import usage_summary

    started = time.perf_counter()
    make_rows(args.rows)
    print(f"made {args.rows:,} usage rows in {time.perf_counter() - started:.1f} s (untimed)")

    admin = get_user_model().objects.create_superuser("admin", "a@example.com", "pw")
    client = Client()
    client.force_login(admin)
    end = timezone.localdate()
    start = end - timedelta(days=29)
    url = "/admin/django_llmchat/usagedashboard/"
    response = client.get(url)  # warm up
    assert response.status_code == 200, response.status_code
    statements: list[str] = []

    def count(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):  # a request resets the debug query log
        client.get(url)
    baseline = bare_queries(start, end)

    times: dict[str, list[float]] = {"page": [], "summary": [], "baseline": []}
    sides = {
        "page": lambda: client.get(url),
        "summary": lambda: usage_summary(start, end, "day"),
        "baseline": baseline,
    }
    for _ in range(args.rounds):
        for name, side in sides.items():
            t0 = time.perf_counter()
            side()
            times[name].append(time.perf_counter() - t0)

    median = {name: statistics.median(values) for name, values in times.items()}
    vendor = connection.vendor
    print(f"dashboard on {args.rows:,} rows ({vendor}), median of {args.rounds} rounds:")
    print(f"  page      {median['page'] * 1000:8.1f} ms   ({len(statements)} queries in all)")
    print(f"  summary   {median['summary'] * 1000:8.1f} ms")
    print(f"  baseline  {median['baseline'] * 1000:8.1f} ms   (its 5 aggregate queries, raw SQL)")
    print(f"  ratio page/baseline     {median['page'] / median['baseline']:.2f}")
    print(f"  ratio summary/baseline  {median['summary'] / median['baseline']:.2f}")


if __name__ == "__main__":
    main()
