"""``db.prepared.execute``: a compiled statement run straight on SQLite's connection gives
what Django's cursor gives (rows, errors, refusals), and runs through Django's cursor
whenever something watches the statements."""

from __future__ import annotations

import asyncio

import pytest
from django.core.exceptions import SynchronousOnlyOperation
from django.db import IntegrityError, connection, transaction
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext

from django_llmchat.db import prepared
from django_llmchat.db.prepared import PreparedInsert, PreparedQuery, PreparedUpdate, execute
from django_llmchat.models import Chat, Message
from tests.wire import Wire

pytestmark = pytest.mark.django_db

on_sqlite = pytest.mark.skipif(connection.vendor != "sqlite", reason="the direct path is SQLite's")


class _Traced:
    """The statements SQLite runs (its own trace), and whether Django's cursor ran them."""

    def __init__(self, monkeypatch):
        self.sql: list[str] = []
        self.through_django = 0
        wrapper = type(connection.cursor().cursor) if connection.vendor == "sqlite" else None
        if wrapper is not None:
            original = wrapper.execute

            def counted(cursor, query, params=None):
                self.through_django += 1
                return original(cursor, query, params)

            monkeypatch.setattr(wrapper, "execute", counted)

    def __enter__(self):
        connection.ensure_connection()
        connection.connection.set_trace_callback(self.sql.append)
        return self

    def __exit__(self, *exc):
        connection.connection.set_trace_callback(None)


@on_sqlite
def test_a_compiled_statement_runs_on_sqlite_without_django_cursor(monkeypatch):
    chat = Chat.objects.create(title="before")
    with _Traced(monkeypatch) as traced:
        assert PreparedUpdate(Chat, title="after").run(chat.pk) == 1
        rows = PreparedQuery(lambda pk: Chat.objects.filter(pk=pk).values_list("title")).rows(
            chat.pk
        )
        message = Message(chat=chat, role="user", content="hi")
        assert PreparedInsert(Message).insert(message)
    assert rows == [("after",)]
    assert traced.through_django == 0
    # SQLite traces a statement again each time it re-runs it (triggers, a re-prepare)
    kinds = [s.split()[0] for s in traced.sql if not s.startswith("--")]
    assert [k for n, k in enumerate(kinds) if not n or kinds[n - 1] != k] == [
        "UPDATE",
        "SELECT",
        "INSERT",
    ]
    assert Message.objects.get(pk=message.pk).content == "hi"


@on_sqlite
def test_the_placeholders_are_turned_as_django_turns_them():
    """``%s`` becomes ``?``, ``%%`` (a literal ``%`` in Django's SQL, as in ``STRFTIME``)
    becomes ``%``: the text Django's own SQLite cursor would run."""
    from django.db.models.functions import Now

    converter = type(connection.cursor().cursor)
    update = PreparedUpdate(Chat, updated_at=Now(), title=prepared.Arg(str))
    sql, _ = update._bound((1, "x"), "default")
    assert "%%" in sql
    chat = Chat.objects.create()
    update.run(chat.pk, title="t")
    assert prepared._QMARK_SQL[sql] == converter.convert_query(None, sql)


@pytest.mark.parametrize("watched", ["execute_wrapper", "captured", "debug"])
def test_watched_statements_run_through_django_cursor(monkeypatch, settings, watched):
    chat = Chat.objects.create()
    seen = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    update = PreparedUpdate(Chat, title="watched")
    if watched == "execute_wrapper":
        with connection.execute_wrapper(wrapper):
            update.run(chat.pk)
        assert len(seen) == 1 and seen[0].startswith("UPDATE")
    elif watched == "captured":
        with CaptureQueriesContext(connection) as queries:
            update.run(chat.pk)
        assert len(queries.captured_queries) == 1
    else:
        settings.DEBUG = True
        connection.queries_log.clear()
        update.run(chat.pk)
        assert [q["sql"].split()[0] for q in connection.queries] == ["UPDATE"]
    assert Chat.objects.get(pk=chat.pk).title == "watched"


def test_an_integrity_error_is_django_one():
    chat = Chat.objects.create()
    sql = 'INSERT INTO "llmchat_chat" ("id", "title") VALUES (%s, %s)'
    with pytest.raises(IntegrityError), transaction.atomic():
        execute(connection, sql, [chat.pk, "twin"], prepared._ROWCOUNT)
    assert Chat.objects.filter(pk=chat.pk).count() == 1


def test_a_statement_in_a_broken_transaction_is_refused():
    chat = Chat.objects.create()
    update = PreparedUpdate(Chat, title="never")
    with transaction.atomic():
        try:
            execute(
                connection,
                'INSERT INTO "llmchat_chat" ("id", "title") VALUES (%s, %s)',
                [chat.pk, "twin"],
                prepared._ROWCOUNT,
            )
        except IntegrityError:
            connection.set_rollback(True)
        with pytest.raises(TransactionManagementError):
            update.run(chat.pk)
    assert Chat.objects.get(pk=chat.pk).title == ""


def test_a_statement_from_an_event_loop_is_refused():
    chat = Chat.objects.create()
    connection.ensure_connection()

    async def in_loop():
        PreparedUpdate(Chat, title="async").run(chat.pk)

    with pytest.raises(SynchronousOnlyOperation):
        asyncio.run(in_loop())
    assert Chat.objects.get(pk=chat.pk).title == ""


# -- PostgreSQL: parameters bound on the server ------------------------------------------

on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the server-binding path is PostgreSQL's"
)


@on_postgresql
def test_a_compiled_statement_binds_its_values_on_the_server_never_as_a_named_statement():
    chat = Chat.objects.create(title="before")
    update = PreparedUpdate(Chat, title=prepared.Arg(str))
    query = PreparedQuery(lambda pk: Chat.objects.filter(pk=pk).values_list("title"))
    secret = "O'Brien; a title with a quote"
    with Wire() as protocol:
        for _ in range(8):  # past psycopg's prepare_threshold (5): still unnamed
            assert update.run(chat.pk, title=secret) == 1
        rows = query.rows(chat.pk)
    assert rows == [(secret,)]
    kinds = protocol.kinds()
    assert "Query" not in kinds  # no statement with its values quoted into the text
    assert kinds.count("Sync") == 9
    parses = [text for kind, text in protocol.messages if kind == "Parse"]
    assert len(parses) == 9
    assert all(text.lstrip().startswith('"" ') for text in parses)  # the unnamed statement
    assert all("$1" in text and "O''Brien" not in text for text in parses)


@on_postgresql
def test_the_run_functions_are_called_with_values_bound_on_the_server(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    chat.ask("warm up")
    with Wire() as protocol:
        chat.ask("it's a prompt with a quote")
    calls = [text for kind, text in protocol.messages if kind == "Parse"]
    assert [("llmchat_run_enqueue" in t, "llmchat_run_store_last_step" in t) for t in calls] == [
        (True, False),
        (False, True),
    ]
    assert "Query" not in protocol.kinds()
    assert [m.content for m in chat.messages.all()][-2] == "it's a prompt with a quote"


@on_postgresql
def test_what_watches_django_cursor_sees_the_statements_bound_on_the_server(monkeypatch):
    """The server-binding cursor is wrapped as Django wraps its own: an
    ``execute_wrapper``, the logged queries and a hook on ``CursorWrapper`` (an APM's) see
    each statement, and it still travels with its values beside it."""
    from django.db.backends import utils

    chat = Chat.objects.create()
    hooked, wrapped = [], []
    original = utils.CursorWrapper._execute

    def hook(cursor, sql, params, *rest):
        hooked.append(sql)
        return original(cursor, sql, params, *rest)

    monkeypatch.setattr(utils.CursorWrapper, "_execute", hook)

    def wrapper(execute, sql, params, many, context):
        wrapped.append(sql)
        return execute(sql, params, many, context)

    update = PreparedUpdate(Chat, title=prepared.Arg(str))
    with Wire() as protocol, connection.execute_wrapper(wrapper):
        with CaptureQueriesContext(connection) as queries:
            update.run(chat.pk, title="seen")
    assert len(hooked) == len(wrapped) == len(queries.captured_queries) == 1
    assert hooked[0].startswith("UPDATE") and "seen" not in hooked[0]
    assert "Query" not in protocol.kinds() and protocol.kinds().count("Parse") == 1


@on_postgresql
def test_a_connection_making_other_cursors_runs_through_django_cursor(monkeypatch):
    """An instrumentation (or ``server_side_binding``) that gives the connection a cursor
    class of its own keeps it: the statement goes through ``connection.cursor()``."""
    from django.db.backends.postgresql import base as postgresql

    class Traced(postgresql.Cursor):
        made = 0

        def __init__(self, *args, **kwargs):
            type(self).made += 1
            super().__init__(*args, **kwargs)

    chat = Chat.objects.create()
    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "cursor_factory", Traced)
    with Wire() as protocol:
        assert PreparedUpdate(Chat, title="traced").run(chat.pk) == 1
    assert Traced.made == 1
    assert protocol.kinds().count("Query") == 1 and "Parse" not in protocol.kinds()


@on_postgresql
def test_a_connection_reading_timestamps_in_another_zone_runs_through_django_cursor(
    monkeypatch,
):
    """Django registers a timestamp loader on each cursor when the connection's reads in
    another zone: the statement then goes through Django's cursor (values quoted in)."""
    chat = Chat.objects.create()
    connection.ensure_connection()
    monkeypatch.setattr(prepared, "_TIMESTAMPTZ_OID", 0)  # no loader found: not ours to say
    with Wire() as protocol:
        assert PreparedUpdate(Chat, title="through django").run(chat.pk) == 1
    assert protocol.kinds().count("Query") == 1 and "Parse" not in protocol.kinds()
    assert Chat.objects.get(pk=chat.pk).title == "through django"
