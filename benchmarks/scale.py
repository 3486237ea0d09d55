"""What the reads and the maintenance passes cost when the tables are large: a database
of ``--chats`` chats (default ``$SCALE_CHATS``, else 100,000; the documented run is
1,000,000 chats, 10,000,000 messages) beside one of ``--base`` chats (default 10,000),
with p50/p95 of each operation on both and their ratio (the goal: at most 1.5).

The large database is the small one plus history: the same ``--base`` chats in the last
year (the same times, the same per-user shape: what the timed operations read), and
``--chats - --base`` older ones (started 730 to 365 days ago, on users of their own). So
a ratio isolates the size of the tables: a range of the last year holds the same rows on
both sides. The dashboard is also timed over a range of the history (on the large side:
``chats / base - 1`` times the rows of the small side's range), as the cost of 100x the
activity.

The rows are written with ``COPY ... FROM STDIN`` (psycopg's ``cursor.copy()``), made in
Python as the app writes them, the secondary indexes dropped before and made again after
(one sort each), the foreign-key triggers off (``session_replication_role = replica``):

- one user for every 100 chats;
- each chat: ``--messages-per-chat`` messages (default 10) of user prompt and assistant
  reply in turn, each one's ``parent`` the message before it, all on the active path,
  ``position`` the microseconds of when it was stored, ``search_vector`` what the search
  trigger makes of its content (the server's ``to_tsvector`` of each message shape, with
  the chat's number swapped in; a 1 % sample is checked against ``to_tsvector`` after
  the build); a chat's messages are a minute apart and its ``updated_at`` its last one;
- each reply: its run (``succeeded``, ``prompt`` the prompt before it, one attempt) and
  its usage row (``succeeded``, chat, message, run and user, tokens and frozen costs);
  every tenth chat's first reply had a ``failed`` attempt before it (no message);
- the recent chats spread over the last year, in id order, except the first 50,
  ``RETENTION_DAYS + 10`` days old: what the retention pass (``RETENTION = {"days": 800}``,
  beyond the history) finds due.

Measured (a warm-up, then ``--n`` times each, the databases taking turns), as 20 of the
recent users in turn:

- ``chat list``: ``GET chats/`` (the first page);
- ``messages page``: ``GET chats/{id}/messages/``;
- ``search, common words``: ``GET chats/?search=quarterly figures`` (every chat of the
  user matches by its title: a page of 50); ``search, every reply``: ``?search=revenue
  plan`` (words of every reply: half the table's messages); ``search, one chat``:
  ``?search=chat <id>`` (a word of one chat);
- ``dashboard day`` / ``dashboard month``: ``usage_summary`` of a day / 30 days ending
  30 days ago (every user's rows); ``..., 100x rows``: the same a year earlier (the
  history on the large side);
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
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

OLD_CHATS = 50
CHATS_PER_USER = 100
RETENTION_DAYS = 800  # beyond the history (730 days): only the OLD_CHATS are due


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--chats",
        type=int,
        default=int(os.environ.get("SCALE_CHATS", 100_000)),
        help="chats of the large side (default $SCALE_CHATS, else 100,000)",
    )
    parser.add_argument("--messages-per-chat", type=int, default=10)
    parser.add_argument("--base", type=int, default=10_000, help="chats of the small side")
    parser.add_argument("--n", type=int, default=30, help="timings per operation and side")
    parser.add_argument(
        "--keep", action="store_true", help="reuse databases already built; keep them after"
    )
    parser.add_argument(
        "--no-jit",
        action="store_true",
        help="time with PostgreSQL's JIT off (jit = off for the session, as docs/deployment.md "
        "advises)",
    )
    parser.add_argument(
        "--only", default="", help="the operations to time, separated by ';' (default: all)"
    )
    args = parser.parse_args()
    if args.messages_per_chat < 2 or args.messages_per_chat % 2:
        parser.error("--messages-per-chat must be an even number, 2 or more")
    if args.base < CHATS_PER_USER * 2 or args.base % CHATS_PER_USER:
        parser.error(f"--base must be a multiple of {CHATS_PER_USER}, {CHATS_PER_USER * 2} or more")
    if args.chats <= args.base or (args.chats - args.base) % CHATS_PER_USER:
        parser.error(f"--chats must be more than --base, by a multiple of {CHATS_PER_USER}")
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

DAY = 86_400.0
HISTORY_FROM_DAYS = 730  # the history: chats started 730 to 365 days ago
DUE_DAYS = RETENTION_DAYS + 10  # the chats the retention pass finds due
BLOCK = 2_000  # chats per write to a COPY

TITLE = "Chat {c} about the quarterly figures"
QUESTION = (
    "Question {k} of chat {c}: how did the figures move against the plan, and what "
    "explains the gap?"
)
ANSWER = (
    "Answer {k} of chat {c}. "
    + "Revenue rose four per cent against a plan of three; costs held. " * 5
)
PLACEHOLDER = 987654321  # a chat number no real one equals, swapped in each tsvector

CHAT_COLUMNS = (
    "id, title, model_id, provider, agent, params, schema, tools, context, status, "
    "created_at, updated_at, user_id, active_run_id, history, client_id, anonymised_at, "
    "retention_days, title_source, forked_from_id, forked_from_message_id, archived, pinned, "
    "double_texting"
)
RUN_COLUMNS = (
    "id, status, error, error_type, interrupt_reason, cancel_requested, attempt, steps, "
    "task_id, worker, lease_expires_at, created_at, started_at, finished_at, chat_id, "
    "prompt_id, reserved_cost"
)
MESSAGE_COLUMNS = (
    "id, role, content, model_id, provider, finish_reason, thinking_text, thinking_signature, "
    "citations, server_tool_calls, raw, cache_boundary, input_tokens, output_tokens, "
    "cache_read_tokens, cache_write_tokens, thinking_tokens, cost, created_at, chat_id, "
    "parent_tool_call_id, position, run_id, summary_until_id, on_path, parent_id, "
    "search_vector"
)
USAGE_COLUMNS = (
    "id, operation, provider, model_id, status, input_tokens, output_tokens, "
    "cache_read_tokens, cache_write_tokens, thinking_tokens, input_cost, output_cost, "
    "cache_read_cost, cache_write_cost, thinking_cost, total_cost, duration_ms, "
    "first_token_ms, error, created_at, chat_id, message_id, run_id, user_id, estimated, "
    "chat_title"
)
USER_COLUMNS = (
    "id, password, is_superuser, username, first_name, last_name, email, is_staff, "
    "is_active, date_joined"
)
TABLES = ("auth_user", "llmchat_chat", "llmchat_run", "llmchat_message", "llmchat_usage")


class Layout:
    """Where each chat of a database of ``chats`` chats, ``recent`` of them in the last
    year, sits in time and whose it is. The history (``chats - recent``, the lower ids)
    starts 730 to 365 days ago, its own users' (100 chats each); the recent chats are those
    of the small database, the same times and per-user shape, on users of their own
    (after the history's): the first :data:`OLD_CHATS` of them :data:`DUE_DAYS` old, the
    others spread over the last year in id order."""

    def __init__(self, chats: int, recent: int, now: float):
        self.chats, self.recent, self.now = chats, recent, now
        self.history = chats - recent
        self.history_users = self.history // CHATS_PER_USER
        self.recent_users = recent // CHATS_PER_USER
        self.users = self.history_users + self.recent_users

    def local(self, c: int) -> int:
        """The chat's number within its part (history or recent), from 1."""
        return c if c <= self.history else c - self.history

    def user(self, c: int) -> int:
        if c <= self.history:
            return (c - 1) % self.history_users + 1
        return self.history_users + (c - self.history - 1) % self.recent_users + 1

    def start(self, c: int) -> float:
        """When the chat's first message was stored (seconds since the epoch)."""
        if c <= self.history:
            return self.now - HISTORY_FROM_DAYS * DAY + (c - 1) / self.history * 365 * DAY
        r = c - self.history
        if r <= OLD_CHATS:
            return self.now - DUE_DAYS * DAY + r * 60
        return self.now - 3600 - 365 * DAY * (1 - r / self.recent)

    def recent_chats_of(self, user: int) -> list[int]:
        """The ids of a recent user's chats."""
        j = user - self.history_users
        return [self.history + j + self.recent_users * m for m in range(CHATS_PER_USER)]


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def vectors(conn, mpc: int) -> dict[int, str]:
    """The ``tsvector`` text of message ``k`` (1..mpc) of chat :data:`PLACEHOLDER`, made by
    the server with the configuration the index trigger uses: a chat's vectors are these
    with its number swapped in (equal numbers merge, as ``to_tsvector`` merges them)."""
    from django_llmchat.chats.search import language

    found = {}
    for k in range(1, mpc + 1):
        content = (QUESTION if k % 2 else ANSWER).format(k=k, c=PLACEHOLDER)
        found[k] = conn.execute(
            "SELECT to_tsvector(%s::regconfig, %s)::text", [language(), content]
        ).fetchone()[0]
        assert f"'{PLACEHOLDER}'" in found[k], found[k]
    return found


def user_rows(layout: Layout, lo: int, hi: int):
    joined = stamp(layout.now - 800 * DAY)
    for u in range(lo, hi + 1):
        yield f"{u}\t!\tf\tscale{u}\t\t\tscale{u}@example.com\tf\tt\t{joined}\n"


def chat_rows(layout: Layout, lo: int, hi: int, mpc: int):
    for c in range(lo, hi + 1):
        start = layout.start(c)
        yield (
            f"{c}\t{TITLE.format(c=c)}\tgpt-4.1-mini\topenai\t\t{{}}\t\\N\t[]\t{{}}\tidle\t"
            f"{stamp(start)}\t{stamp(start + mpc * 60)}\t{layout.user(c)}\t\\N\t\\N\t\t\\N\t"
            f"\\N\t\t\\N\t\\N\tf\tf\t\n"
        )


def run_rows(layout: Layout, lo: int, hi: int, mpc: int):
    replies = mpc // 2
    for c in range(lo, hi + 1):
        start = layout.start(c)
        for r in range(1, replies + 1):
            asked = start + (2 * r - 1) * 60
            yield (
                f"{(c - 1) * replies + r}\tsucceeded\t\t\t\tf\t1\t1\t\tscale\t\\N\t"
                f"{stamp(asked)}\t{stamp(asked)}\t{stamp(asked + 2)}\t{c}\t"
                f"{(c - 1) * mpc + 2 * r - 1}\t0\n"
            )


def message_rows(layout: Layout, lo: int, hi: int, mpc: int, vector: dict[int, str]):
    replies = mpc // 2
    placeholder = f"'{PLACEHOLDER}'"
    for c in range(lo, hi + 1):
        start = layout.start(c)
        number = f"'{c}'"
        for k in range(1, mpc + 1):
            at = start + k * 60
            mid = (c - 1) * mpc + k
            parent = mid - 1 if k > 1 else "\\N"
            tsv = vector[k].replace(placeholder, number)
            position = round(at * 1_000_000)
            if k % 2:
                yield (
                    f"{mid}\tuser\t{QUESTION.format(k=k, c=c)}\t\t\t\t\t\t[]\t[]\t\\N\tf\t"
                    f"\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t{stamp(at)}\t{c}\t\\N\t{position}\t\\N\t"
                    f"\\N\tt\t{parent}\t{tsv}\n"
                )
            else:
                yield (
                    f"{mid}\tassistant\t{ANSWER.format(k=k, c=c)}\tgpt-4.1-mini\topenai\tstop"
                    f"\t\t\t[]\t[]\t\\N\tf\t{120 * k}\t90\t0\t0\t0\t\\N\t{stamp(at)}\t{c}\t\\N\t"
                    f"{position}\t{(c - 1) * replies + k // 2}\t\\N\tt\t{parent}\t{tsv}\n"
                )


def usage_rows(layout: Layout, lo: int, hi: int, mpc: int):
    """Each reply's attempt; every tenth chat (of its part) also had a failed attempt
    before its first reply."""
    replies = mpc // 2
    for c in range(lo, hi + 1):
        start = layout.start(c)
        user = layout.user(c)
        failed_first = layout.local(c) % 10 == 0
        for r in range(1, replies + 1):
            for a in (0, 1) if (r == 1 and failed_first) else (1,):
                at = start + 2 * r * 60 - (1 - a) * 20
                tokens = 240 * r
                input_cost = tokens * 0.0000004
                output_cost = 90 * 0.0000016 if a else 0
                yield (
                    f"{(c - 1) * (replies + 1) + r + a}\tchat\topenai\tgpt-4.1-mini\t"
                    f"{'succeeded' if a else 'failed'}\t{tokens}\t{90 if a else 0}\t0\t0\t0\t"
                    f"{input_cost:.10f}\t{output_cost:.10f}\t0\t0\t0\t"
                    f"{input_cost + output_cost:.10f}\t1800\t400\t"
                    f"{'' if a else 'RateLimitError: 429 from the provider'}\t{stamp(at)}\t{c}\t"
                    f"{(c - 1) * mpc + 2 * r if a else chr(92) + 'N'}\t{(c - 1) * replies + r}\t"
                    f"{user}\tf\t\n"
                )


def copy(conn, table: str, columns: str, rows, total: int, label: str, started: float) -> None:
    """``COPY table FROM STDIN`` of ``rows(lo, hi)`` over 1..total, :data:`BLOCK` at a time."""
    with conn.cursor() as cursor, cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as out:
        for lo in range(1, total + 1, BLOCK):
            out.write("".join(rows(lo, min(total, lo + BLOCK - 1))))
            if lo // BLOCK % 100 == 0:
                print(
                    f"  {label}: {table} {lo - 1:,}/{total:,} at "
                    f"{time.perf_counter() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )


def secondary_indexes(conn) -> list[tuple[str, str]]:
    """The (name, definition) of the tables' indexes that back no constraint."""
    return conn.execute(
        """SELECT i.indexname, i.indexdef FROM pg_indexes i
            WHERE i.schemaname = 'public' AND i.tablename = ANY(%s)
              AND NOT EXISTS (SELECT 1 FROM pg_constraint k
                               WHERE k.conindid = (quote_ident(i.indexname))::regclass)""",
        [list(TABLES)],
    ).fetchall()


def build(database: dict, name: str, chats: int, recent: int, mpc: int) -> dict:
    """Make database ``name``: ``chats`` chats of ``mpc`` messages, ``recent`` of them in
    the last year (:class:`Layout`); returns the time it took, by phase, and its size."""
    import psycopg
    from django.core.management import call_command
    from django.utils import timezone

    recreate(database, name)
    use(name)
    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    from django.db import connection

    connection.close()
    layout = Layout(chats, recent, timezone.now().timestamp())
    conninfo = {
        "host": database["HOST"] or None,
        "port": database["PORT"] or None,
        "user": database["USER"] or None,
        "password": database["PASSWORD"] or None,
        "dbname": name,
    }
    phases = {}
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        # the rows are consistent by construction: no foreign-key trigger per row (nor the
        # search trigger: each message's search_vector is in the copied data)
        conn.execute("SET session_replication_role = replica")
        conn.execute("SET synchronous_commit = off")
        conn.execute("SET maintenance_work_mem = '1GB'")
        vector = vectors(conn, mpc)
        # the indexes are made after the rows (one sort each, not 10 M insertions)
        indexes = secondary_indexes(conn)
        for index, _ in indexes:
            conn.execute(f'DROP INDEX "{index}"')
        mark = time.perf_counter()
        copy(
            conn,
            "auth_user",
            USER_COLUMNS,
            lambda lo, hi: user_rows(layout, lo, hi),
            layout.users,
            name,
            started,
        )
        copy(
            conn,
            "llmchat_chat",
            CHAT_COLUMNS,
            lambda lo, hi: chat_rows(layout, lo, hi, mpc),
            chats,
            name,
            started,
        )
        copy(
            conn,
            "llmchat_run",
            RUN_COLUMNS,
            lambda lo, hi: run_rows(layout, lo, hi, mpc),
            chats,
            name,
            started,
        )
        copy(
            conn,
            "llmchat_message",
            MESSAGE_COLUMNS,
            lambda lo, hi: message_rows(layout, lo, hi, mpc, vector),
            chats,
            name,
            started,
        )
        copy(
            conn,
            "llmchat_usage",
            USAGE_COLUMNS,
            lambda lo, hi: usage_rows(layout, lo, hi, mpc),
            chats,
            name,
            started,
        )
        phases["copy"] = time.perf_counter() - mark
        mark = time.perf_counter()
        for _, definition in indexes:
            conn.execute(definition)
        phases["indexes"] = time.perf_counter() - mark
        for table in TABLES:
            conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                f"(SELECT max(id) FROM {table}))"
            )
        mark = time.perf_counter()
        conn.execute("VACUUM ANALYZE")
        phases["vacuum"] = time.perf_counter() - mark
        # the copied vectors are what the trigger makes (a sample of messages)
        from django_llmchat.chats.search import language

        wrong = conn.execute(
            "SELECT count(*) FROM llmchat_message TABLESAMPLE SYSTEM (1) "
            "WHERE search_vector IS DISTINCT FROM to_tsvector(%s::regconfig, content)",
            [language()],
        ).fetchone()[0]
        assert wrong == 0, f"{wrong} messages' search_vector differ from the trigger's"
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    return {"seconds": time.perf_counter() - started, "bytes": size, **phases}


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


def dates() -> dict[str, date]:
    """The dashboard's last day: ``recent`` (30 days ago: the same activity on both
    sides) and ``history`` (a year before that: on the large side, the history's density,
    ``chats / base - 1`` times the recent one's)."""
    from django.utils import timezone

    recent = timezone.localdate() - timedelta(days=30)
    return {"recent": recent, "history": recent - timedelta(days=365)}


def operations(name: str, chats: int, base: int) -> dict:
    """The operations to time on database ``name``: label -> a function of the round."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from rest_framework.test import APIRequestFactory, force_authenticate

    from django_llmchat.api.messages import MessageListCreateView
    from django_llmchat.api.urls import chat_list
    from django_llmchat.chats.dashboard import usage_summary
    from django_llmchat.chats.lifecycle import erase_user
    from django_llmchat.chats.retention import apply_retention
    from django_llmchat.runs import limits

    use(name)
    layout = Layout(chats, base, 0)
    User = get_user_model()
    # 20 of the recent users, spread over them, taking turns (the same ones on both sides)
    picked = {layout.history_users + 1 + i * layout.recent_users // 20 for i in range(20)}
    users = list(User.objects.filter(pk__in=picked).order_by("pk"))
    assert len(users) == len(picked), "the database is not one this benchmark built"
    k = len(users)
    factory = APIRequestFactory()
    messages = MessageListCreateView.as_view()
    chat_of = {u.pk: layout.recent_chats_of(u.pk)[CHATS_PER_USER // 2] for u in users}
    day = dates()["recent"]
    # the large side's history: 100x the rows in the range (the small side has none)
    dense = dates()["history"] if chats > base else day

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

    def search_common(i):
        # every chat of the user holds both words in its title (no message holds them both)
        found = get(chat_list, "/api/chats/?search=quarterly%20figures", users[i % k])
        assert len(found.data["results"]) == 50, len(found.data["results"])

    def search_replies(i):
        # every reply of every chat holds both words (half the messages of the table)
        found = get(chat_list, "/api/chats/?search=revenue%20plan", users[i % k])
        assert len(found.data["results"]) == 50, len(found.data["results"])

    def search_rare(i):
        # one chat's number: its title and its messages
        user = users[i % k]
        found = get(chat_list, f"/api/chats/?search=chat%20{chat_of[user.pk]}", user)
        assert [c["id"] for c in found.data["results"]] == [chat_of[user.pk]], found.data

    def dashboard(last, days):
        return lambda i: usage_summary(last - timedelta(days=days - 1), last, "day")

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

    return {
        "chat list": chat_list_page,
        "messages page": messages_page,
        "search, common words": search_common,
        "search, every reply": search_replies,
        "search, one chat": search_rare,
        "dashboard day": dashboard(day, 1),
        "dashboard month": dashboard(day, 30),
        "dashboard day, 100x rows": dashboard(dense, 1),
        "dashboard month, 100x rows": dashboard(dense, 30),
        "limits check": limits_check,
        "retention pass": rolled_back(retention),
        "erase user": rolled_back(erase),
    }


REPEATS = {"retention pass": 0.3, "erase user": 0.3}  # the writing passes: fewer timings


def measure(
    sides: dict[str, int], base: int, n: int, only: str = ""
) -> dict[str, dict[str, list[float]]]:
    built = {name: operations(name, chats, base) for name, chats in sides.items()}
    labels = list(next(iter(built.values())))
    if only:
        wanted = [label.strip() for label in only.split(";")]
        unknown = set(wanted) - set(labels)
        if unknown:
            sys.exit(f"--only: unknown operations {sorted(unknown)}; known: {labels}")
        labels = [label for label in labels if label in wanted]
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
        print(f"  measured {label}", file=sys.stderr, flush=True)
    return times


def range_rows(name: str, last: date) -> tuple[int, int]:
    """How many usage rows the dashboard's day and month ending ``last`` read."""
    from django_llmchat.models import Usage

    use(name)
    rows = Usage.objects.filter(created_at__date__lte=last)
    return (
        rows.filter(created_at__date__gte=last).count(),
        rows.filter(created_at__date__gte=last - timedelta(days=29)).count(),
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    args = parse()
    database = server()
    if args.no_jit:
        database.setdefault("OPTIONS", {})["options"] = "-c jit=off"
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
            figures = build(database, name, chats, args.base, mpc)
            print(
                f"{name}: built in {figures['seconds']:.0f} s (COPY {figures['copy']:.0f} s, "
                f"indexes {figures['indexes']:.0f} s, VACUUM ANALYZE {figures['vacuum']:.0f} s), "
                f"{figures['bytes'] / 2**30:.2f} GiB",
                flush=True,
            )
        for name in sides:
            found = counts(name)
            print(
                f"{name}: {found['chat']:,} chats, {found['message']:,} messages, "
                f"{found['run']:,} runs, {found['usage']:,} usage rows, "
                f"{found['bytes'] / 2**30:.2f} GiB",
                flush=True,
            )
        print(
            f"load before: {os.getloadavg()}; JIT {'off' if args.no_jit else 'as the server says'}",
            flush=True,
        )
        times = measure(sides, args.base, args.n, args.only)
        print(
            f"\n{'operation':28s} {'p50 small':>10s} {'p95 small':>10s} "
            f"{'p50 large':>10s} {'p95 large':>10s} {'ratio p50':>9s} {'ratio p95':>9s}  (ms)"
        )
        for label, by_side in times.items():
            a, b = by_side[small], by_side[large]
            p50a, p50b = statistics.median(a), statistics.median(b)
            print(
                f"{label:28s} {p50a:10.2f} {percentile(a, 0.95):10.2f} "
                f"{p50b:10.2f} {percentile(b, 0.95):10.2f} {p50b / p50a:9.2f} "
                f"{percentile(b, 0.95) / percentile(a, 0.95):9.2f}"
            )
        for name in sides:
            for which, last in dates().items():
                day, month = range_rows(name, last)
                print(
                    f"{name}: usage rows in the dashboard's day {day:,}, month {month:,} "
                    f"(ending {last}, {which})"
                )
        print(f"load after: {os.getloadavg()}")
    finally:
        from django.db import connection

        connection.close()
        if not args.keep:
            for name in sides:
                drop(database, name)


if __name__ == "__main__":
    main()
