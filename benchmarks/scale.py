"""What the reads and the maintenance passes cost when the tables are large: a database
of ``--chats`` chats (default 100,000; the documented run is 1,000,000 chats, 10,000,000
messages) beside one of ``--base`` chats (default 10,000), both of the same shape, with
p50/p95 of each operation on both and their ratio (the goal: at most 1.5).

The rows are made on the server (``INSERT ... SELECT`` over ``generate_series``, in
batches of chats, the foreign-key triggers off while loading, every index in place) as
the app writes them:

- one user for every 100 chats (the same per-user shape at every size);
- each chat: ``--messages-per-chat`` messages (default 10) of user prompt and assistant
  reply in turn, each one's ``parent`` the message before it, all on the active path,
  ``position`` the microseconds of when it was stored; a chat's messages are a minute
  apart and its ``updated_at`` its last message;
- each reply: its run (``succeeded``, ``prompt`` the prompt before it, one attempt) and
  its usage row (``succeeded``, chat, message, run and user, tokens and frozen costs);
  every tenth chat's first reply had a ``failed`` attempt before it (no message);
- the chats are spread over the year before now, in id order, except the first 50,
  400 days old: what the retention pass (``RETENTION = {"days": 380}``) finds due.

Measured (a warm-up, then ``--n`` times each, the databases taking turns):

- ``chat list``: ``GET chats/`` (the first page) as one user (20 users in turn);
- ``messages page``: ``GET chats/{id}/messages/`` (20 chats in turn);
- ``search``: ``GET chats/?search=`` when the API has it;
- ``dashboard day`` / ``dashboard month``: ``usage_summary`` of a day / 30 days (every
  user's rows: this one grows with the rows in the range, not the table);
- ``limits check``: ``limits.spend(user, runs=True)``, what an admission reads with a
  spending limit on;
- ``retention pass``: ``apply_retention()`` deleting the 50 due chats;
- ``erase user``: ``lifecycle.erase_user`` of a user of 100 chats.

The two passes that write run in a transaction rolled back after each timing, so each
round finds the same rows. The databases are made beside ``DATABASE_URL``'s (named
``<its name>_scale<chats>x<messages>``; ``--keep`` reuses one already built, else it is
made anew) and dropped at the end unless ``--keep``.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/llmchat \\
        python benchmarks/scale.py [--chats 1000000] [--messages-per-chat 10] [--base 10000]
        [--n 30] [--keep]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

OLD_CHATS = 50
CHATS_PER_USER = 100
BATCH = 20_000  # chats per INSERT statement
RETENTION_DAYS = 380


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=100_000, help="chats of the large side")
    parser.add_argument("--messages-per-chat", type=int, default=10)
    parser.add_argument("--base", type=int, default=10_000, help="chats of the small side")
    parser.add_argument("--n", type=int, default=30, help="timings per operation and side")
    parser.add_argument(
        "--keep", action="store_true", help="reuse databases already built; keep them after"
    )
    args = parser.parse_args()
    if args.messages_per_chat < 2 or args.messages_per_chat % 2:
        parser.error("--messages-per-chat must be an even number, 2 or more")
    for name in ("chats", "base"):
        if getattr(args, name) < CHATS_PER_USER * 2 or getattr(args, name) < OLD_CHATS * 4:
            parser.error(f"--{name} must be {CHATS_PER_USER * 2} or more")
    return args


def server() -> dict:
    import dj_database_url

    url = os.environ.get("DATABASE_URL")
    if not url or not url.startswith(("postgres://", "postgresql://")):
        sys.exit("DATABASE_URL must name a PostgreSQL database (its server holds the copies)")
    return dj_database_url.parse(url)


def admin_connection(database: dict):
    import psycopg

    return psycopg.connect(
        host=database["HOST"] or None,
        port=database["PORT"] or None,
        user=database["USER"] or None,
        password=database["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    )


def exists(database: dict, name: str) -> bool:
    with admin_connection(database) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()


def recreate(database: dict, name: str) -> None:
    with admin_connection(database) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop(database: dict, name: str) -> None:
    with admin_connection(database) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def setup_django(database: dict) -> None:
    import django
    from django.conf import settings

    settings.configure(
        DEBUG=False,
        SECRET_KEY="benchmarks",
        USE_TZ=True,
        TIME_ZONE="UTC",
        ALLOWED_HOSTS=["testserver"],
        INSTALLED_APPS=[
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "rest_framework",
            "django_filters",
            "drf_spectacular",
            "django_llmchat",
        ],
        ROOT_URLCONF="_urls",
        DATABASES={"default": dict(database)},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        LLMCHAT={
            "LIMITS": {"default": {"usd_per_day": "1000", "usd_per_month": "10000"}},
            "RETENTION": {"days": RETENTION_DAYS},
        },
    )
    django.setup()


def use(name: str) -> None:
    """Point the default connection at database ``name``."""
    from django.db import connection

    connection.close()
    connection.settings_dict["NAME"] = name


# -- building -------------------------------------------------------------------------------

USERS_SQL = """
INSERT INTO auth_user (id, password, is_superuser, username, first_name, last_name, email,
                       is_staff, is_active, date_joined)
SELECT u, '!', false, 'scale' || u, '', '', 'scale' || u || '@example.com', false, true,
       %(now)s - interval '400 days'
  FROM generate_series(1, %(users)s::int) AS u
"""

# a chat's start: the first OLD_CHATS 400 days ago, the others over the year, in id order
CHAT_START = """
CASE WHEN c <= %(old)s THEN %(now)s - interval '400 days' + c * interval '1 minute'
     ELSE %(now)s - interval '365 days' * (1 - c::float8 / %(chats)s) END
"""

CHATS_SQL = f"""
INSERT INTO llmchat_chat (id, title, model_id, provider, agent, params, schema, tools, context,
                          history, status, client_id, retention_days, anonymised_at,
                          created_at, updated_at, user_id, active_run_id)
SELECT c, 'Chat ' || c || ' about the quarterly figures', 'gpt-4.1-mini', 'openai', '',
       '{{}}', NULL, '[]', '{{}}', NULL, 'idle', '', NULL, NULL,
       s.start, s.start + %(mpc)s * interval '1 minute',
       (c - 1) %% %(users)s + 1, NULL
  FROM generate_series(%(lo)s::int, %(hi)s::int) AS c,
       LATERAL (SELECT {CHAT_START} AS start) AS s
"""

RUNS_SQL = f"""
INSERT INTO llmchat_run (id, status, error, error_type, interrupt_reason, cancel_requested,
                         attempt, steps, task_id, worker, lease_expires_at, created_at,
                         started_at, finished_at, chat_id, prompt_id, reserved_cost)
SELECT (c - 1) * %(replies)s + r, 'succeeded', '', '', '', false, 1, 1, '', 'scale', NULL,
       t.asked, t.asked, t.asked + interval '2 seconds', c, (c - 1) * %(mpc)s + 2 * r - 1, 0
  FROM generate_series(%(lo)s::int, %(hi)s::int) AS c,
       LATERAL (SELECT {CHAT_START} AS start) AS s,
       generate_series(1, %(replies)s::int) AS r,
       LATERAL (SELECT s.start + (2 * r - 1) * interval '1 minute' AS asked) AS t
"""

MESSAGES_SQL = f"""
INSERT INTO llmchat_message (id, role, content, model_id, provider, finish_reason,
                             thinking_text, thinking_signature, citations, server_tool_calls,
                             raw, cache_boundary, input_tokens, output_tokens,
                             cache_read_tokens, cache_write_tokens, thinking_tokens, cost,
                             created_at, chat_id, parent_tool_call_id, position, run_id,
                             summary_until_id, on_path, parent_id)
SELECT (c - 1) * %(mpc)s + k,
       CASE WHEN k %% 2 = 1 THEN 'user' ELSE 'assistant' END,
       CASE WHEN k %% 2 = 1
            THEN 'Question ' || k || ' of chat ' || c || ': how did the figures move '
                 'against the plan, and what explains the gap?'
            ELSE 'Answer ' || k || ' of chat ' || c || '. ' || repeat(
                 'Revenue rose four per cent against a plan of three; costs held. ', 5) END,
       CASE WHEN k %% 2 = 0 THEN 'gpt-4.1-mini' ELSE '' END,
       CASE WHEN k %% 2 = 0 THEN 'openai' ELSE '' END,
       CASE WHEN k %% 2 = 0 THEN 'stop' ELSE '' END,
       '', '', '[]', '[]', NULL, false,
       CASE WHEN k %% 2 = 0 THEN 120 * k END, CASE WHEN k %% 2 = 0 THEN 90 END,
       CASE WHEN k %% 2 = 0 THEN 0 END, CASE WHEN k %% 2 = 0 THEN 0 END,
       CASE WHEN k %% 2 = 0 THEN 0 END, NULL,
       t.at, c, NULL,
       (extract(epoch FROM t.at) * 1000000)::bigint,
       CASE WHEN k %% 2 = 0 THEN (c - 1) * %(replies)s + k / 2 END,
       NULL, true,
       CASE WHEN k > 1 THEN (c - 1) * %(mpc)s + k - 1 END
  FROM generate_series(%(lo)s::int, %(hi)s::int) AS c,
       LATERAL (SELECT {CHAT_START} AS start) AS s,
       generate_series(1, %(mpc)s::int) AS k,
       LATERAL (SELECT s.start + k * interval '1 minute' AS at) AS t
"""

# the reply's attempt; every tenth chat's first reply also had a failed one before it
USAGE_SQL = f"""
INSERT INTO llmchat_usage (id, operation, provider, model_id, status, input_tokens,
                           output_tokens, cache_read_tokens, cache_write_tokens,
                           thinking_tokens, input_cost, output_cost, cache_read_cost,
                           cache_write_cost, thinking_cost, total_cost, duration_ms,
                           first_token_ms, error, created_at, chat_id, message_id, run_id,
                           user_id, estimated, chat_title)
SELECT (c - 1) * (%(replies)s + 1) + r + a, 'chat', 'openai', 'gpt-4.1-mini',
       CASE WHEN a = 0 THEN 'failed' ELSE 'succeeded' END,
       240 * r, CASE WHEN a = 0 THEN 0 ELSE 90 END, 0, 0, 0,
       240 * r * 0.0000004, CASE WHEN a = 0 THEN 0 ELSE 90 * 0.0000016 END, 0, 0, 0,
       240 * r * 0.0000004 + CASE WHEN a = 0 THEN 0 ELSE 90 * 0.0000016 END,
       1800, 400,
       CASE WHEN a = 0 THEN 'RateLimitError: 429 from the provider' ELSE '' END,
       t.at, c,
       CASE WHEN a = 1 THEN (c - 1) * %(mpc)s + 2 * r END,
       (c - 1) * %(replies)s + r, (c - 1) %% %(users)s + 1, false, ''
  FROM generate_series(%(lo)s::int, %(hi)s::int) AS c,
       LATERAL (SELECT {CHAT_START} AS start) AS s,
       generate_series(1, %(replies)s::int) AS r,
       generate_series(0, 1) AS a,
       LATERAL (SELECT s.start + 2 * r * interval '1 minute'
                       - (1 - a) * interval '20 seconds' AS at) AS t
 WHERE a = 1 OR (r = 1 AND c %% 10 = 0)
"""

SEQUENCES = ("auth_user", "llmchat_chat", "llmchat_run", "llmchat_message", "llmchat_usage")


def build(database: dict, name: str, chats: int, mpc: int) -> dict:
    """Make database ``name`` with ``chats`` chats of ``mpc`` messages; returns its figures."""
    import psycopg
    from django.core.management import call_command
    from django.utils import timezone

    recreate(database, name)
    use(name)
    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    from django.db import connection

    connection.close()
    params = {
        "now": timezone.now(),
        "chats": chats,
        "users": -(-chats // CHATS_PER_USER),
        "mpc": mpc,
        "replies": mpc // 2,
        "old": OLD_CHATS,
    }
    conninfo = {
        "host": database["HOST"] or None,
        "port": database["PORT"] or None,
        "user": database["USER"] or None,
        "password": database["PASSWORD"] or None,
        "dbname": name,
    }
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        # the rows are consistent by construction: no foreign-key trigger per row
        conn.execute("SET session_replication_role = replica")
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute(USERS_SQL, params)
        for lo in range(1, chats + 1, BATCH):
            batch = {**params, "lo": lo, "hi": min(chats, lo + BATCH - 1)}
            with conn.transaction():
                for sql in (CHATS_SQL, RUNS_SQL, MESSAGES_SQL, USAGE_SQL):
                    conn.execute(sql, batch)
            done = batch["hi"]
            elapsed = time.perf_counter() - started
            print(f"  {name}: {done:,} chats in {elapsed:.0f} s", file=sys.stderr, flush=True)
        for table in SEQUENCES:
            conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT max(id) FROM {table}))"
            )
        conn.execute("VACUUM ANALYZE")
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return {"seconds": time.perf_counter() - started, "bytes": size}


def counts(name: str) -> dict[str, int]:
    from django.db import connection

    use(name)
    with connection.cursor() as cursor:
        found = {}
        for table in ("llmchat_chat", "llmchat_message", "llmchat_run", "llmchat_usage"):
            cursor.execute(f"SELECT count(*) FROM {table}")
            found[table.removeprefix("llmchat_")] = cursor.fetchone()[0]
        cursor.execute("SELECT pg_database_size(current_database())")
        found["bytes"] = cursor.fetchone()[0]
    return found


# -- measuring ------------------------------------------------------------------------------


class Rollback(Exception):
    pass


def operations(name: str, chats: int, n: int) -> dict:
    """The operations to time on database ``name``: label -> a function of the round."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone
    from rest_framework.test import APIRequestFactory, force_authenticate

    from django_llmchat import limits
    from django_llmchat.api.messages import MessageListCreateView
    from django_llmchat.api.urls import chat_list
    from django_llmchat.dashboard import usage_summary
    from django_llmchat.lifecycle import erase_user
    from django_llmchat.retention import apply_retention

    use(name)
    users_n = -(-chats // CHATS_PER_USER)
    User = get_user_model()
    # up to 20 users spread over the ids, taking turns
    picked = {1 + i * users_n // 20 for i in range(20)}
    users = list(User.objects.filter(pk__in=picked).order_by("pk"))
    assert len(users) == len(picked), "the database is not one this benchmark built"
    k = len(users)
    factory = APIRequestFactory()
    messages = MessageListCreateView.as_view()
    # a chat of each user: the user's chats are user_id, user_id + users_n, ...
    chat_of = {u.pk: u.pk + users_n * (CHATS_PER_USER // 2) for u in users}
    day = timezone.localdate() - timedelta(days=30)

    def get(view, path, user, **kwargs):
        request = factory.get(path)
        force_authenticate(request, user=user)
        response = view(request, **kwargs)
        response.render()
        assert response.status_code == 200, response.content[:300]
        return response

    def chat_list_page(i):
        get(chat_list, "/api/chats/", users[i % k])

    def messages_page(i):
        user = users[i % k]
        pk = chat_of[user.pk]
        get(messages, f"/api/chats/{pk}/messages/", user, pk=pk)

    def search(i):
        get(chat_list, "/api/chats/?search=quarterly%20figures", users[i % k])

    def dashboard_day(i):
        usage_summary(day, day, "day")

    def dashboard_month(i):
        usage_summary(day - timedelta(days=29), day, "day")

    def limits_check(i):
        limits.spend(users[i % k].pk, runs=True)

    def rolled_back(fn):
        def timed(i):
            try:
                with transaction.atomic():
                    fn(i)
                    raise Rollback
            except Rollback:
                pass

        return timed

    def retention(i):
        found, done = apply_retention()
        assert done["delete"] == OLD_CHATS, done

    def erase(i):
        erasure = erase_user(users[i % k])
        assert erasure.chats == CHATS_PER_USER, erasure

    ops = {
        "chat list": chat_list_page,
        "messages page": messages_page,
        "dashboard day": dashboard_day,
        "dashboard month": dashboard_month,
        "limits check": limits_check,
        "retention pass": rolled_back(retention),
        "erase user": rolled_back(erase),
    }
    if has_search():
        ops = {**dict(list(ops.items())[:2]), "search": search, **dict(list(ops.items())[2:])}
    return ops


def has_search() -> bool:
    from django_llmchat.api.chats import ChatViewSet

    return bool(getattr(ChatViewSet, "search_fields", None)) or "search" in str(
        getattr(ChatViewSet, "filterset_class", "")
    )


REPEATS = {"retention pass": 0.3, "erase user": 0.3}  # the writing passes: fewer timings


def measure(sides: dict[str, int], n: int) -> dict[str, dict[str, list[float]]]:
    built = {name: operations(name, chats, n) for name, chats in sides.items()}
    labels = list(next(iter(built.values())))
    times: dict[str, dict[str, list[float]]] = {label: {} for label in labels}
    for label in labels:
        count = max(5, int(n * REPEATS.get(label, 1)))
        for name in sides:
            times[label][name] = []
        for i in range(count + 2):  # the sides take turns; two warm-up rounds
            for name in sides:
                use(name)
                fn = built[name][label]
                started = time.perf_counter()
                fn(i)
                elapsed = (time.perf_counter() - started) * 1000
                if i >= 2:
                    times[label][name].append(elapsed)
    return times


def range_rows(name: str) -> tuple[int, int]:
    """How many usage rows the dashboard's day and month read on database ``name``."""
    from django.utils import timezone

    from django_llmchat.models import Usage

    use(name)
    day = timezone.localdate() - timedelta(days=30)
    rows = Usage.objects.filter(created_at__date__lte=day)
    return (
        rows.filter(created_at__date__gte=day).count(),
        rows.filter(created_at__date__gte=day - timedelta(days=29)).count(),
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    args = parse()
    database = server()
    setup_django(database)
    base = database["NAME"]
    mpc = args.messages_per_chat
    sides = {f"{base}_scale{c}x{mpc}": c for c in (args.base, args.chats)}
    small, large = sides
    try:
        for name, chats in sides.items():
            if args.keep and exists(database, name):
                print(f"{name}: kept", file=sys.stderr)
                continue
            figures = build(database, name, chats, mpc)
            print(
                f"{name}: built in {figures['seconds']:.0f} s, {figures['bytes'] / 2**30:.2f} GiB",
                file=sys.stderr,
            )
        for name in sides:
            found = counts(name)
            print(
                f"{name}: {found['chat']:,} chats, {found['message']:,} messages, "
                f"{found['run']:,} runs, {found['usage']:,} usage rows, "
                f"{found['bytes'] / 2**30:.2f} GiB"
            )
        times = measure(sides, args.n)
        print(
            f"\n{'operation':18s} {'p50 small':>10s} {'p95 small':>10s} "
            f"{'p50 large':>10s} {'p95 large':>10s} {'ratio p50':>9s} {'ratio p95':>9s}  (ms)"
        )
        for label, by_side in times.items():
            a, b = by_side[small], by_side[large]
            p50a, p50b = statistics.median(a), statistics.median(b)
            print(
                f"{label:18s} {p50a:10.2f} {percentile(a, 0.95):10.2f} "
                f"{p50b:10.2f} {percentile(b, 0.95):10.2f} {p50b / p50a:9.2f} "
                f"{percentile(b, 0.95) / percentile(a, 0.95):9.2f}"
            )
        for name in sides:
            day, month = range_rows(name)
            print(f"{name}: usage rows in the dashboard's day {day:,}, month {month:,}")
        if not has_search():
            print("search: not measured (the API has no chat search)")
        print(f"load: {os.getloadavg()}")
    finally:
        from django.db import connection

        connection.close()
        if not args.keep:
            for name in sides:
                drop(database, name)


if __name__ == "__main__":
    main()
