"""The run transitions as PostgreSQL functions (``django_llmchat/runs/pg.py``,
``django_llmchat/sql/``): a plain ask is four statements, each its own round trip, with no
``BEGIN`` or ``COMMIT``; the rows they write are the rows the statements write elsewhere;
the functions are installed and removed by their migration."""

from __future__ import annotations

import re
import tempfile

import pytest
from django.conf import settings as django_settings
from django.db import connection, transaction
from django.db.models.signals import pre_save
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_llmchat import runs
from django_llmchat.errors import ChatBusyError, RunLostError
from django_llmchat.loop.transcript import forget_history
from django_llmchat.models import Chat, Message, Run, Usage
from django_llmchat.models.message import QUEUED_POSITION
from django_llmchat.runs import pg
from django_llmchat.testing import Reply
from tests.factories import taken_run
from tests.wire import Wire

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL functions"),
    pytest.mark.usefixtures("bystanders"),
]


class RoundTrips:
    """What this connection sends the server, from libpq's own trace of the protocol:
    each frontend ``Query`` (Django's psycopg binds parameters client-side) or ``Sync``
    (the extended protocol) is one round trip; ``BEGIN`` and ``COMMIT`` are among them."""

    def __enter__(self):
        from psycopg import pq

        connection.ensure_connection()
        self.file = tempfile.TemporaryFile(mode="w+")
        self.pgconn = connection.connection.pgconn
        self.pgconn.trace(self.file.fileno())
        self.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        return self

    def __exit__(self, *exc):
        self.pgconn.untrace()
        self.file.seek(0)
        sent = [line.split("\t") for line in self.file.read().splitlines()]
        self.messages = [
            (fields[2], fields[3] if len(fields) > 3 else "") for fields in sent if fields[0] == "F"
        ]
        self.file.close()

    @property
    def trips(self) -> list[str]:
        return [text.strip() for kind, text in self.messages if kind in ("Query", "Sync")]

    def count(self, statement: str) -> int:
        return sum(1 for text in self.trips if text.strip('"').upper() == statement)


def _statements(ctx) -> list[str]:
    found = []
    for q in ctx.captured_queries:
        sql = q["sql"]
        name = re.findall(r"(?:INTO|UPDATE|FROM)\s+\"?(\w+)\"?", sql)
        found.append(
            sql.split()[0].upper() + " " + (name[-1] if sql.startswith("SELECT") else name[0])
        )
    return found


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    made = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    made.ask("warm up")  # the prepared statements compiled, the functions found
    return made


def test_a_plain_ask_is_two_round_trips_and_no_begin_or_commit(chat, fake_llm):
    """A chat this process answered last: the prompt with its run, started, and the
    attempt's pending usage row (one call, before the provider call, which also checks
    that the history this process kept is still the chat's path); the reply with the
    run's end (one call): two statements, two round trips, none of them BEGIN or COMMIT
    (each statement is its own transaction)."""
    fake_llm.script(Reply("fine", usage={"input_tokens": 3, "output_tokens": 1}))
    with CaptureQueriesContext(connection) as ctx, RoundTrips() as wire:
        reply = chat.ask("hello")
    assert _statements(ctx) == [
        "SELECT llmchat_run_enqueue_v5",
        "SELECT llmchat_run_store_last_step_v3",
    ]
    assert len(wire.trips) == 2, wire.trips
    assert wire.count("BEGIN") == 0 and wire.count("COMMIT") == 0
    assert reply.content == "fine" and reply.usages.get().output_tokens == 1
    sent = fake_llm.last_request.body["input"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[0]["content"] == "warm up" and sent[-1]["content"] == "hello"


def test_a_cold_ask_reads_the_transcript_first(chat, fake_llm):
    """A process that kept no history of the chat (a new process, another one answered
    last): the transcript read first, then the same two calls: three round trips."""
    forget_history(chat.pk)
    fake_llm.script(Reply("fine"))
    with CaptureQueriesContext(connection) as ctx, RoundTrips() as wire:
        chat.ask("hello")
    assert _statements(ctx) == [
        "SELECT llmchat_message",
        "SELECT llmchat_run_enqueue_v5",
        "SELECT llmchat_run_store_last_step_v3",
    ]
    assert len(wire.trips) == 3 and wire.count("COMMIT") == 0


def test_a_chat_another_process_answered_is_read_again(chat, fake_llm):
    """The kept history is behind the chat (a reply stored by another process since):
    the admission writes no attempt; the run reads what it missed and opens its attempt
    itself. The request holds every message, in order."""
    Message.objects.create(chat=chat, role="user", content="asked elsewhere")
    Message.objects.create(chat=chat, role="assistant", content="answered elsewhere")
    fake_llm.script(Reply("fine"))
    with CaptureQueriesContext(connection) as ctx:
        chat.ask("and here?")
    assert _statements(ctx) == [
        "SELECT llmchat_run_enqueue_v5",
        "SELECT llmchat_message",
        "INSERT llmchat_usage",
        "SELECT llmchat_run_store_last_step_v3",
    ]
    sent = [m["content"] for m in fake_llm.last_request.body["input"]]
    texts = [c if isinstance(c, str) else c[0]["text"] for c in sent]
    assert texts == ["warm up", texts[1], "asked elsewhere", "answered elsewhere", "and here?"]


def _xmin(table: str, pk: int) -> int:
    """The id of the transaction that last wrote row ``pk`` of ``table``."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT xmin::text::bigint FROM {table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def test_a_plain_ask_commits_twice(chat, fake_llm):
    """Two transactions write: the admission (the prompt, its run and the attempt's
    pending row, before the provider call) and the reply (the reply, the attempt's row
    closed, the run ended, the chat idle again). Every row an ask writes was last written
    by one of the two (its ``xmin``); a transcript read before them (a process that did not
    answer the chat last) is a plain SELECT."""
    written = {}

    def at_the_call(request):  # the provider's side (its own connection), mid-call
        try:
            run = Run.objects.filter(chat=chat).latest("id")
            written["run"] = _xmin("llmchat_run", run.pk)
            written["prompt"] = _xmin("llmchat_message", run.prompt_id)
            written["attempt"] = _xmin("llmchat_usage", Usage.objects.get(run_id=run.pk).pk)
        finally:
            connection.close()
        return Reply("fine")

    fake_llm.script(at_the_call)
    with CaptureQueriesContext(connection) as ctx:
        reply = chat.ask("hello")
    assert _statements(ctx) == [
        "SELECT llmchat_run_enqueue_v5",
        "SELECT llmchat_run_store_last_step_v3",
    ]
    admission = written["prompt"]
    assert written["run"] == written["attempt"] == admission
    run = Run.objects.get(pk=reply.run_id)
    after = {
        _xmin("llmchat_message", reply.pk),
        _xmin("llmchat_run", run.pk),
        _xmin("llmchat_usage", reply.usages.get().pk),
        _xmin("llmchat_chat", chat.pk),
    }
    assert len(after) == 1 and after != {admission}
    assert _xmin("llmchat_message", run.prompt_id) == admission


def test_the_first_attempt_is_on_the_ledger_before_the_provider_answers(chat, fake_llm):
    """While the reply streams, the run's attempt is a committed pending row with the
    history's estimate of the request (a process dying now leaves it on the ledger)."""
    fake_llm.script(Reply("one two three", usage={"input_tokens": 40, "output_tokens": 3}))
    events = chat.stream("count to three")
    for event in events:
        if event.type == "text_delta":
            break
    run = chat.last_run
    pending = Usage.objects.get(run_id=run.pk)
    assert (pending.status, pending.estimated, pending.message_id) == ("pending", True, None)
    assert pending.input_tokens > 0 and pending.chat_id == chat.pk
    for _ in events:
        pass
    closed = Usage.objects.get(run_id=run.pk)
    assert (closed.pk, closed.status, closed.estimated) == (pending.pk, "succeeded", False)
    assert closed.input_tokens == 40


def test_a_waiting_caller_refused_behind_a_decision_opens_no_attempt():
    """Refused (the chat's run waits for a decision), a waiting caller's attempt is not
    written, even on a path that is still the one it read (an empty one)."""
    empty = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    Run.objects.create(chat=empty, status="awaiting_approval", attempt=1)
    attempt = Usage(chat=empty, provider="openai", model_id="gpt-4.1-mini", status="pending")
    prompt = Message(chat=empty, role="user", content="x")
    with pytest.raises(ChatBusyError):
        runs.enqueue(empty, prompt, start=True, wait=True, attempt=attempt, seen=(None, 0, None))
    assert attempt.pk is None and not Usage.objects.filter(chat=empty).exists()


def test_a_run_behind_another_opens_no_attempt(chat):
    """The admission writes the attempt only for a run it starts: one queued behind
    another process's run gets none (its loop opens it when its turn comes), even when
    the path it was built from (here an empty one) is still the chat's."""
    empty = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    for each in (chat, empty):
        taken_run(each, lease=600)
        attempt = Usage(chat=each, provider="openai", model_id="gpt-4.1-mini", status="pending")
        attempt.estimated = True
        prompt = Message(chat=each, role="user", content="later")
        run, execution = runs.enqueue(
            each, prompt, start=True, attempt=attempt, seen=(None, 0, None)
        )
        assert execution is None and run.status == "queued"
        assert attempt.pk is None and not Usage.objects.filter(run_id=run.pk).exists()


def test_a_stream_closed_at_run_started_leaves_no_attempt(chat, fake_llm):
    """Closed right after ``run_started``: the attempt the admission opened was never
    made, so its pending row goes with the run's end (cancelled)."""
    fake_llm.script(Reply("never sent"))
    requests = len(fake_llm.requests)
    events = chat.stream("hello")
    assert next(events).type == "run_started"
    events.close()
    run = Run.objects.get(pk=chat.last_run.pk)
    assert run.status == "cancelled"
    assert not Usage.objects.filter(run_id=run.pk).exists()
    assert len(fake_llm.requests) == requests


def test_the_rows_are_those_the_statements_write(chat, fake_llm):
    """The prompt, the run, the reply and its usage row as the ORM reads them back: the
    run succeeded with one step, the chat idle again, the pending row closed."""
    fake_llm.script(Reply("Paris.", usage={"input_tokens": 12, "output_tokens": 3}))
    reply = chat.ask("The capital of France?")
    run = chat.last_run
    assert run.pk == reply.run_id and Run.objects.filter(pk=run.pk).exists()
    row = Run.objects.get(pk=run.pk)
    assert (row.status, row.steps, row.attempt, row.lease_expires_at) == ("succeeded", 1, 1, None)
    assert row.started_at is not None and row.finished_at is not None
    assert row.prompt.content == "The capital of France?" and row.prompt.role == "user"
    stored = Message.objects.get(pk=reply.pk)
    assert (stored.content, stored.role, stored.run_id) == ("Paris.", "assistant", run.pk)
    assert stored.position > row.prompt.position and stored.created_at == reply.created_at
    usage = Usage.objects.get(message=stored)
    assert (usage.status, usage.estimated, usage.input_tokens, usage.output_tokens) == (
        "succeeded",
        False,
        12,
        3,
    )
    assert usage.run_id == run.pk and usage.chat_id == chat.pk
    assert Chat.objects.values_list("status", "active_run").get(pk=chat.pk) == ("idle", None)
    assert [m.role for m in chat.transcript()] == ["user", "assistant"] * 2


def test_a_reply_without_usage_keeps_its_estimate(chat, fake_llm):
    """A vendor that reported no usage: the attempt's row closed with our estimate
    (``estimated``, which the store-last-step function would write as the vendor's counts)
    is stored by the ORM's statements; the next reply, with the vendor's usage, is the
    two calls again."""
    fake_llm.script(Reply("fine", usage=False))
    with CaptureQueriesContext(connection) as ctx:
        reply = chat.ask("hello")
    usage = Usage.objects.get(message_id=reply.pk)
    assert (usage.status, usage.estimated) == ("succeeded", True)
    assert not any("llmchat_run_store_last_step" in q["sql"] for q in ctx.captured_queries)
    assert usage.input_tokens > 0 and usage.output_tokens > 0 and usage.total_cost > 0
    run = Run.objects.get(pk=reply.run_id)
    assert (run.status, run.steps, run.lease_expires_at) == ("succeeded", 1, None)
    assert Chat.objects.values_list("status", "active_run").get(pk=chat.pk) == ("idle", None)

    fake_llm.script(Reply("again", usage={"input_tokens": 3, "output_tokens": 1}))
    with CaptureQueriesContext(connection) as ctx, RoundTrips() as wire:
        reply = chat.ask("hello again")
    assert _statements(ctx) == [
        "SELECT llmchat_run_enqueue_v5",
        "SELECT llmchat_run_store_last_step_v3",
    ]
    assert len(wire.trips) == 2 and wire.count("COMMIT") == 0
    assert Usage.objects.get(message_id=reply.pk).estimated is False


def test_a_prompt_behind_a_running_run_is_queued_after_it(chat):
    """Admitted behind another process's run: queued, not claimed, its prompt read after
    everything else until its turn; the chat keeps the running run's status."""
    ahead = taken_run(chat, lease=600)
    prompt = Message(chat=chat, role="user", content="later")
    before = prompt.position
    run, execution = runs.enqueue(chat, prompt, start=True)
    assert execution is None and run.status == "queued"
    assert Message.objects.get(pk=prompt.pk).position == before + QUEUED_POSITION
    assert prompt.position == before + QUEUED_POSITION
    assert Chat.objects.values_list("status", "active_run").get(pk=chat.pk) == (
        "running",
        ahead.pk,
    )
    assert chat.status == "running"


def test_a_waiting_caller_behind_a_decision_is_refused_and_nothing_is_stored(chat):
    Run.objects.create(chat=chat, status="awaiting_approval", attempt=1)
    count = Message.objects.count(), Run.objects.count()
    with pytest.raises(ChatBusyError, match="waiting for a decision"):
        runs.enqueue(chat, Message(chat=chat, role="user", content="x"), start=True, wait=True)
    assert (Message.objects.count(), Run.objects.count()) == count


@pytest.mark.parametrize(
    "meanwhile",
    [
        {"attempt": 2, "worker": "other:1"},  # taken over by another process
        {"status": "cancelled", "lease_expires_at": None},  # ended, the same attempt
    ],
    ids=["taken-over", "ended"],
)
def test_a_run_lost_meanwhile_stores_no_reply(chat, fake_llm, meanwhile):
    """The fence inside the function: a run taken over by another process, or ended by
    another (its attempt the same), stores nothing (no message, no usage row closed), and
    the caller is told."""
    run, execution = runs.enqueue(chat, Message(chat=chat, role="user", content="Q"), start=True)
    Run.objects.filter(pk=run.pk).update(**meanwhile)
    before = Run.objects.values().get(pk=run.pk)
    reply = Message(chat=chat, role="assistant", content="late", run_id=run.pk)
    count = Message.objects.count()
    with pytest.raises(RunLostError):
        execution.store_last_step(reply, [])
    assert Message.objects.count() == count and reply.pk is None and execution.lost
    assert Run.objects.values().get(pk=run.pk) == before


def test_a_pre_save_receiver_gets_the_statements(chat, fake_llm):
    """Rows a function writes send no signal: with a ``pre_save`` receiver on Message the
    ORM writes them (its statements, the receiver called)."""
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.role)

    pre_save.connect(receiver, sender=Message)
    try:
        fake_llm.script(Reply("fine"))
        with CaptureQueriesContext(connection) as ctx:
            chat.ask("hello")
    finally:
        pre_save.disconnect(receiver, sender=Message)
    assert seen == ["user", "assistant"]
    assert not any("llmchat_run_" in q["sql"] and "_v1(" in q["sql"] for q in ctx.captured_queries)


def test_inside_a_callers_transaction_the_calls_are_part_of_it(chat, fake_llm):
    """In an open transaction the calls join it: rolled back with it, nothing stays."""
    fake_llm.script(Reply("fine"))
    count = Message.objects.count(), Run.objects.count()

    class Undo(Exception):
        pass

    with pytest.raises(Undo), transaction.atomic():
        chat.ask("hello")
        raise Undo
    assert (Message.objects.count(), Run.objects.count()) == count


def _admissions(seen: list):
    """Records each admission call's ``p_synchronous`` (its last argument)."""

    def record(execute, sql, params, many, context):
        if "llmchat_run_enqueue_v5" in sql:
            seen.append(params[-1])
        return execute(sql, params, many, context)

    return connection.execute_wrapper(record)


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


def test_only_a_run_answered_here_is_admitted_without_waiting_for_the_disk(chat, fake_llm):
    """The admission's commit waits for the disk on every path but one: a run this process
    answers right after (``ask``, ``stream``: ``start``), admitted in a transaction of its
    own; its end commits synchronously and makes the admission durable with it. A run for
    a worker (``ask_later``, a ``202``: not started), an ask inside the caller's
    transaction (its commit is the caller's) and ``ADMISSION_SYNCHRONOUS_COMMIT = True``:
    the commit waits."""
    fake_llm.script(Reply("a"), Reply("b"), Reply("c"), Reply("d"))
    seen: list = []
    with _admissions(seen):
        chat.ask("here")
        assert [e.type for e in chat.stream("streamed")][-1] == "run_finished"
        with transaction.atomic():
            chat.ask("inside a transaction")
        runs.enqueue(chat, Message(chat=chat, role="user", content="for a worker"))
    assert seen == [False, False, True, True]
    Run.objects.filter(chat=chat, status="queued").delete()
    with override_settings(
        LLMCHAT={**django_settings.LLMCHAT, "ADMISSION_SYNCHRONOUS_COMMIT": True}
    ):
        with _admissions(seen):
            chat.ask("waits")
    assert seen[-1] is True
    assert _synchronous_commit() == "on"


@pytest.mark.parametrize("synchronous", [False, True])
def test_the_admission_turns_synchronous_commit_off_for_its_own_transaction_alone(
    chat, synchronous
):
    """``p_synchronous`` false: ``synchronous_commit`` is off until the admission's
    transaction ends (seen here inside one), then the session's own value again."""
    from django_llmchat.runs.admission import _enqueue_call

    with transaction.atomic():
        prompt = Message(chat=chat, role="user", content="Q")
        _enqueue_call(chat, prompt, "", True, True, "test:1", "default", synchronous=synchronous)
        assert _synchronous_commit() == ("on" if synchronous else "off")
    assert _synchronous_commit() == "on"
    assert Run.objects.filter(prompt__content="Q", status="running").count() == 1


def test_the_functions_are_installed_by_their_migration_and_removed_by_its_reverse():
    from django.core.management import call_command

    def installed() -> set[str]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT proname FROM pg_proc WHERE proname = ANY(%s)", [list(pg.FUNCTIONS)]
            )
            return {name for (name,) in cursor.fetchall()}

    assert installed() == set(pg.FUNCTIONS)
    with connection.cursor() as cursor:  # each says its transition (psql's \df+)
        cursor.execute(
            "SELECT proname, obj_description(oid) FROM pg_proc WHERE proname = ANY(%s)",
            [list(pg.FUNCTIONS)],
        )
        described = dict(cursor.fetchall())
    assert described["llmchat_run_claim_v4"].startswith("queued -> running")
    assert all(described.values()), described
    try:
        call_command("migrate", "django_llmchat", "0001_baseline", verbosity=0)
        assert installed() == set()
        assert not pg.available("default")  # checked again after a migration: statements
    finally:
        call_command("migrate", "django_llmchat", verbosity=0)
    assert installed() == set(pg.FUNCTIONS) and pg.available("default")


def test_a_database_without_the_functions_of_version_2_stores_replies_by_statements(chat, fake_llm):
    """A database migrated to ``0002_run_functions`` only (version 1: the store function
    of an older release, without the title) runs the statements for the reply, which
    title the chat all the same, in the reply's transaction (the chat's one update at the
    run's end); the functions are used again once it is migrated."""
    from django.core.management import call_command

    try:
        call_command("migrate", "django_llmchat", "0002_run_functions", verbosity=0)
        assert not pg.available("default")
        made = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
        fake_llm.script(Reply("fine"))
        with Wire() as wire:
            made.ask("Titled by the statements")
        assert not any("llmchat_run_" in name for name in wire.statements)
        assert wire.statements[-3:] == [
            "UPDATE llmchat_usage",
            "UPDATE llmchat_run",
            "UPDATE llmchat_chat",  # idle, released, and the title: no run read first
        ]
        assert wire.commits == 2  # the admission, the reply with its title
        made.refresh_from_db()
        assert (made.title, made.title_source) == ("Titled by the statements", "prompt")
    finally:
        call_command("migrate", "django_llmchat", verbosity=0)
    assert pg.available("default")


def test_a_chats_first_reply_writes_its_title_in_the_same_call(fake_llm):
    """A new chat's first ask: its prompt's title is written by the reply's call (no
    statement of its own), with its source; the chat instance follows."""
    fake_llm.configure("openai", "gpt-4.1-mini")
    Chat.objects.create(provider="openai", model_id="gpt-4.1-mini").ask("warm up")
    made = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    fake_llm.script(Reply("fine"))
    with Wire() as wire:
        made.ask("Plan a **trip** to Lisbon\nwith trains")
    assert wire.statements == [
        "SELECT llmchat_run_enqueue_v5",
        "SELECT llmchat_run_store_last_step_v3",
    ]
    assert (made.title, made.title_source) == ("Plan a trip to Lisbon", "prompt")
    stored = Chat.objects.values_list("title", "title_source").get(pk=made.pk)
    assert stored == ("Plan a trip to Lisbon", "prompt")


@pytest.mark.parametrize(
    ("title", "source"), [("Mine", "user"), ("", "user"), ("Named by a model", "model")]
)
def test_the_reply_leaves_a_title_it_did_not_write_alone(fake_llm, title, source):
    """A chat titled already (by its user or a model), or left untitled by its user
    (``title_source="user"``, no title): the reply's call writes no title."""
    fake_llm.configure("openai", "gpt-4.1-mini")
    made = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    Chat.objects.filter(pk=made.pk).update(title=title, title_source=source)
    loaded = Chat.objects.get(pk=made.pk)
    fake_llm.script(Reply("fine"))
    loaded.ask("Plan a trip to Lisbon")
    stored = Chat.objects.values_list("title", "title_source").get(pk=made.pk)
    assert stored == (title, source)
    assert (loaded.title, loaded.title_source) == (title, source)


@pytest.mark.parametrize(
    ("title", "source", "kept"),
    [
        ("Mine", "user", True),
        ("", "user", True),
        ("Named by a model", "model", True),
        ("", "", False),
    ],
)
def test_a_title_written_while_the_provider_answered_stays(fake_llm, title, source, kept):
    """The chat was untitled when its run read it; while the provider answered, its user
    (or a model) titled it, or its user left it untitled on purpose: the reply's call
    checks the row it locks and writes no title over theirs; a chat still untitled gets
    the prompt's title. Its other chats (untitled) are not read for it."""
    fake_llm.configure("openai", "gpt-4.1-mini")
    others = [Chat.objects.create(title=f"other {n}") for n in range(2)]
    made = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    others.append(Chat.objects.create())

    def answer(request):  # the server's thread: another writer, during the call
        Chat.objects.filter(pk=made.pk).update(title=title, title_source=source)
        return Reply("fine")

    fake_llm.server.responder = answer
    made.ask("Plan a trip to Lisbon")
    stored = Chat.objects.values_list("title", "title_source").get(pk=made.pk)
    assert stored == ((title, source) if kept else ("Plan a trip to Lisbon", "prompt"))
    assert [Chat.objects.get(pk=o.pk).title for o in others] == ["other 0", "other 1", ""]


def test_a_reply_without_a_title_leaves_an_untitled_chat_untitled(fake_llm):
    """Titles off: the reply's call gets no title (NULL) and writes none, on a chat
    still untitled."""
    fake_llm.configure("openai", "gpt-4.1-mini", TITLES=False)
    made = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    fake_llm.script(Reply("fine"))
    made.ask("Plan a trip to Lisbon")
    assert Chat.objects.values_list("title", "title_source").get(pk=made.pk) == ("", "")
    assert made.last_run.status == "succeeded"


def test_the_last_step_hands_the_chat_to_its_oldest_queued_run(chat, monkeypatch):
    """Two prompts queued behind a running run: storing its last reply ends it, the chat
    becomes ``queued`` with no active run, and the task sent is the older queued run's."""
    from django_llmchat.runs import execution as execution_module

    sent = []
    monkeypatch.setattr(execution_module, "_send", sent.append)
    run, execution = runs.enqueue(chat, Message(chat=chat, role="user", content="Q"), start=True)
    older, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="next"))
    runs.enqueue(chat, Message(chat=chat, role="user", content="after"))
    reply = Message(chat=chat, role="assistant", content="A", run_id=run.pk)
    assert execution.store_last_step(reply, [])
    assert Chat.objects.values_list("status", "active_run").get(pk=chat.pk) == ("queued", None)
    assert [head.pk for head in sent] == [older.pk]
    assert Run.objects.get(pk=run.pk).status == "succeeded"


def test_a_claim_is_one_call(chat):
    """A queued run started by a worker: one statement, one round trip; its prompt moved
    into place, the chat running it."""
    ahead = taken_run(chat, lease=600)
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="later"))
    Run.objects.filter(pk=ahead.pk).update(status="succeeded", lease_expires_at=None)
    with CaptureQueriesContext(connection) as ctx, RoundTrips() as wire:
        found = runs.claim(chat.pk, run_id=run.pk, task_id="t-1", worker="w:1")
    assert _statements(ctx) == ["SELECT llmchat_run_claim_v4"] and len(wire.trips) == 1
    execution = found.execution
    assert execution.pk == run.pk and execution.attempt == 1 and execution.worker == "w:1"
    row = Run.objects.get(pk=run.pk)
    assert (row.status, row.attempt, row.worker, row.task_id) == ("running", 1, "w:1", "t-1")
    assert row.started_at is not None and row.lease_expires_at is not None
    prompt = Message.objects.get(pk=run.prompt_id)
    assert prompt.position < QUEUED_POSITION
    assert Chat.objects.values_list("status", "active_run").get(pk=chat.pk) == ("running", run.pk)


def test_a_claim_finding_nothing_a_decision_or_a_live_run_is_one_call(chat):
    """No unfinished run, a run waiting for a decision, a run whose process is alive: the
    claim's answer (NOTHING, PAUSED, BUSY until the lease's end) is the function's, in one
    statement, nothing written."""
    with CaptureQueriesContext(connection) as ctx:
        assert runs.claim(chat.pk).state == runs.NOTHING
    assert _statements(ctx) == ["SELECT llmchat_run_claim_v4"]
    waiting = Run.objects.create(chat=chat, status="awaiting_approval", attempt=1)
    with CaptureQueriesContext(connection) as ctx:
        assert runs.claim(chat.pk).state == runs.PAUSED
    assert _statements(ctx) == ["SELECT llmchat_run_claim_v4"]
    waiting.delete()
    live = taken_run(chat, lease=600)
    before = Run.objects.values().get(pk=live.pk)
    with CaptureQueriesContext(connection) as ctx:
        found = runs.claim(chat.pk, worker="w:2")
    assert _statements(ctx) == ["SELECT llmchat_run_claim_v4"]
    assert found.state == runs.BUSY and 590 < found.retry_in <= 600
    assert Run.objects.values().get(pk=live.pk) == before


def test_a_queued_run_past_its_attempts_is_started_in_one_call(chat, settings):
    """A run given back to the queue after RUN_MAX_ATTEMPTS attempts (a retry) is started
    again, as any queued run, in one statement: only a running run that lost its process
    that often is given up."""
    settings.LLMCHAT = {**settings.LLMCHAT, "RUN_MAX_ATTEMPTS": 2}
    run = Run.objects.create(chat=chat, status="queued", attempt=2)
    with CaptureQueriesContext(connection) as ctx:
        found = runs.claim(chat.pk, worker="w:3")
    assert _statements(ctx) == ["SELECT llmchat_run_claim_v4"]
    assert found.execution.pk == run.pk and found.execution.attempt == 3
    assert Run.objects.values_list("status", "attempt").get(pk=run.pk) == ("running", 3)


def test_a_dead_processs_run_is_taken_over_in_one_call(chat):
    """Running with its lease run out: taken over (attempt + 1), the attempt its process
    left pending marked lost, in one statement."""
    dead = taken_run(chat, lease=-1)
    pending = Usage.objects.create(chat=chat, run=dead, status="pending")
    with CaptureQueriesContext(connection) as ctx:
        found = runs.claim(chat.pk, worker="w:2")
    assert len(ctx) == 1 and found.execution.pk == dead.pk and found.execution.attempt == 2
    assert Usage.objects.get(pk=pending.pk).status == "lost"
    assert Run.objects.values_list("attempt", "worker").get(pk=dead.pk) == (2, "w:2")


def test_ending_or_pausing_a_run_is_one_call(chat):
    """finish, pause and requeue: one statement each, fenced (a run no longer ours ends
    nothing), the chat released."""
    for end in ("finish", "pause", "requeue"):
        run, execution = runs.enqueue(
            chat, Message(chat=chat, role="user", content=end), start=True
        )
        with CaptureQueriesContext(connection) as ctx, RoundTrips() as wire:
            if end == "finish":
                assert execution.finish("failed", error_type="boom", error="It failed.")
            elif end == "pause":
                assert execution.pause()
            else:
                assert execution.requeue("rate_limited", "Later.")
        assert _statements(ctx) == ["SELECT llmchat_run_end_v1"] and len(wire.trips) == 1
        row = Run.objects.get(pk=run.pk)
        expected = {"finish": "failed", "pause": "awaiting_approval", "requeue": "queued"}[end]
        assert row.status == expected and row.lease_expires_at is None
        if end == "finish":
            assert (row.error_type, row.error) == ("boom", "It failed.") and row.finished_at
        Run.objects.filter(pk=run.pk).update(status="cancelled")  # out of the way
    run, execution = runs.enqueue(chat, Message(chat=chat, role="user", content="x"), start=True)
    Run.objects.filter(pk=run.pk).update(attempt=5)
    assert not execution.finish("failed") and execution.lost
    assert Run.objects.get(pk=run.pk).status == "running"


def test_stopping_a_run_is_one_call(chat):
    """A running run asked to stop, a queued one ended (its prompt placed, the chat
    released): one statement each; a second stop is refused (the first request wins)."""
    run, _execution = runs.enqueue(chat, Message(chat=chat, role="user", content="a"), start=True)
    with CaptureQueriesContext(connection) as ctx, RoundTrips() as wire:
        assert runs.interrupt(chat.pk, "why")
    assert _statements(ctx) == ["SELECT llmchat_run_interrupt_v1"] and len(wire.trips) == 1
    assert Run.objects.values_list("cancel_requested", "interrupt_reason").get(pk=run.pk) == (
        True,
        "why",
    )
    assert not runs.interrupt(chat.pk, "again")
    Run.objects.filter(pk=run.pk).update(status="succeeded", lease_expires_at=None)
    queued, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="b"))
    assert not runs.interrupt(chat.pk, "cancelled", run_id=queued.pk + 1)  # not that run
    with CaptureQueriesContext(connection) as ctx:
        assert runs.interrupt(chat.pk, "cancelled", run_id=queued.pk)
    assert len(ctx) == 1
    row = Run.objects.get(pk=queued.pk)
    assert (row.status, row.interrupt_reason, row.lease_expires_at) == (
        "cancelled",
        "cancelled",
        None,
    )
    assert row.finished_at is not None
    assert Message.objects.get(pk=queued.prompt_id).position < QUEUED_POSITION
    # the chat's status is its next run's (none): active_run is cleared only by the run
    # holding it (here the first, ended by hand above)
    assert Chat.objects.values_list("status", flat=True).get(pk=chat.pk) == "idle"


def test_a_session_admitted_and_never_run_leaves_no_attempt(chat, fake_llm):
    """Admitted (its attempt opened with the run) and closed before its first event, as
    an inline stream whose client left: the run ends cancelled without its pending row,
    and its followers are told."""
    from django_llmchat.loop.session import RunSession

    told = []
    session = RunSession(chat.runner(), "hello", publish=told.append).admit()
    run = session.run
    assert Usage.objects.get(run_id=run.pk).status == "pending"
    session.close()
    assert Run.objects.get(pk=run.pk).status == "cancelled"
    assert not Usage.objects.filter(run_id=run.pk).exists()
    assert [event.type for event in told] == ["run_finished"] and told[0].status == "cancelled"


def test_a_queued_run_stopped_with_a_reason_ends_interrupted_in_one_call(chat):
    """The transition ``stop_interrupted`` in one statement: the reason kept, the chat
    released."""
    ahead = taken_run(chat, lease=600)
    queued, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="b"))
    Run.objects.filter(pk=ahead.pk).update(status="succeeded", lease_expires_at=None)
    with CaptureQueriesContext(connection) as ctx:
        assert runs.interrupt(chat.pk, "too slow", run_id=queued.pk)
    assert _statements(ctx) == ["SELECT llmchat_run_interrupt_v1"]
    row = Run.objects.get(pk=queued.pk)
    assert (row.status, row.interrupt_reason) == ("interrupted", "too slow")


@pytest.mark.parametrize(
    "function, status",
    [("llmchat_run_end_v1", "running"), ("llmchat_run_interrupt_v1", "succeeded")],
)
def test_a_function_refuses_a_status_none_of_its_transitions_goes_to(chat, function, status):
    """``llmchat_run_end_v1`` and ``llmchat_run_interrupt_v1`` take the status as a
    parameter: one outside the transitions their header declares is refused, nothing
    written (tests/runs/test_transitions.py reads the same list)."""
    from django.db import DatabaseError

    run, _execution = runs.enqueue(chat, Message(chat=chat, role="user", content="a"), start=True)
    args = {
        "llmchat_run_end_v1": [
            (run.pk, "bigint"),
            (run.attempt, "integer"),
            (chat.pk, "bigint"),
            (status, "text"),
            *[(None, "text")] * 3,
            (None, "timestamptz"),
            (0, "bigint"),
            (QUEUED_POSITION, "bigint"),
        ],
        "llmchat_run_interrupt_v1": [
            (chat.pk, "bigint"),
            (run.pk, "bigint"),
            ("why", "text"),
            (status, "text"),
            (0, "bigint"),
            (QUEUED_POSITION, "bigint"),
        ],
    }[function]
    with pytest.raises(DatabaseError, match="does not go to"), transaction.atomic():
        pg.call("default", function, *args)
    row = Run.objects.get(pk=run.pk)
    assert (row.status, row.cancel_requested) == ("running", False)
