"""The gate of the run package (``django_llmchat/runs/admission.py``): :func:`enqueue`
(a prompt, a continuation, a regenerate) and the lock it takes on the user before the
spending limits admit a run.

One transition at a time, as tests/runs/conftest.py says."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_llmchat import runs
from django_llmchat.errors import ArgumentError, ChatBusyError
from django_llmchat.models import Attachment, Chat, Message, Run
from django_llmchat.models.message import QUEUED_POSITION
from django_llmchat.runs import admission
from tests.factories import LEASE, awaiting, chat_row, fresh, prompt_of, taken_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("bystanders")]


# -- enqueue ------------------------------------------------------------------------------------
def test_enqueue_refuses_an_unsaved_chat_without_its_own_prompt_or_a_deleted_chat(chat):
    """A chat without a primary key and without a prompt of its own (none, or another
    chat's), or one deleted meanwhile, gets ArgumentError and no row is stored."""
    chats = Chat.objects.count()
    with pytest.raises(ArgumentError, match="save the chat before running it"):
        runs.enqueue(Chat())
    with pytest.raises(ArgumentError, match=f"a message of chat {chat.pk}, not of this"):
        runs.enqueue(Chat(), prompt_of(chat))
    assert Chat.objects.count() == chats
    gone = Chat.objects.create()
    Chat.objects.filter(pk=gone.pk).delete()
    with pytest.raises(ArgumentError, match=f"chat {gone.pk} does not exist"):
        runs.enqueue(gone, prompt_of(gone), start=True)
    assert not Run.objects.filter(chat__in=[chat.pk, gone.pk]).exists()
    assert not Message.objects.filter(chat__in=[chat.pk, gone.pk]).exists()


def test_enqueue_saves_an_unsaved_chat_with_its_first_prompt(chat):
    """An unsaved chat and its prompt: the chat's row, the prompt and the run commit
    together; refused (a limit, any error), nothing is stored and the chat is unsaved
    again, so a second try saves it then."""
    new = Chat(provider="openai", title="trip")
    with CaptureQueriesContext(connection) as ctx:
        run, execution = runs.enqueue(new, prompt_of(new, "hello"), start=True)
    assert new.pk is not None and execution is not None
    # nothing read: the chat's lock, its run ahead and its leaf are not (one call on
    # PostgreSQL; SQLite's statements write the chat, the prompt, the run, its status)
    sqls = [q["sql"] for q in ctx.captured_queries if "to_regprocedure" not in q["sql"]]
    sent = [sql.split()[0] for sql in sqls]
    sent = [verb for verb in sent if verb not in ("BEGIN", "SAVEPOINT", "RELEASE", "COMMIT")]
    if connection.vendor == "postgresql":  # (the functions' check aside, once a process)
        assert sent == ["SELECT"] and "llmchat_run_enqueue_v5" in sqls[0]
    else:
        assert sent == ["INSERT", "INSERT", "INSERT", "UPDATE"]
    row = Chat.objects.get(pk=new.pk)
    assert (row.title, row.title_source, row.status, row.active_run_id) == (
        "trip",
        "user",
        Run.RUNNING,
        run.pk,
    )
    assert Message.objects.get(pk=run.prompt_id).chat_id == new.pk

    refused, chats = Chat(provider="openai"), Chat.objects.count()

    def fail(run):
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError), admission.on_admit(fail):
        runs.enqueue(refused, prompt_of(refused, "hello"), start=True)
    assert refused.pk is None and Chat.objects.count() == chats
    runs.enqueue(refused, prompt_of(refused, "again"))
    assert Chat.objects.filter(pk=refused.pk).exists()
    # a saved chat refused stays saved: its instance keeps its key
    saved = refused.pk
    with pytest.raises(RuntimeError), admission.on_admit(fail):
        runs.enqueue(refused, prompt_of(refused, "refused"))
    assert refused.pk == saved
    assert list(Message.objects.filter(chat=refused).values_list("content", flat=True)) == ["again"]


def test_enqueue_with_start_and_nothing_ahead_claims_the_run(chat, clock):
    """``start=True`` on an idle chat stores the prompt and a running run (attempt 1,
    started now, this process as its worker, a lease of RUN_LEASE seconds) that holds
    the chat, and returns its execution."""
    prompt = prompt_of(chat)
    run, execution = runs.enqueue(chat, prompt, task_id="t" * 300, start=True)
    row = fresh(run)
    assert (row.status, row.attempt, row.prompt_id, row.task_id) == (
        "running",
        1,
        prompt.pk,
        "t" * 255,
    )
    assert row.started_at == clock.now and row.worker == runs.worker_name()
    assert row.lease_expires_at == clock.now + timedelta(seconds=LEASE)
    assert chat_row(chat) == {"status": "running", "active_run_id": run.pk}
    assert chat.status == "running"
    assert isinstance(execution, runs.Execution)
    assert (execution.pk, execution.chat_id, execution.attempt) == (run.pk, chat.pk, 1)
    assert execution.worker == runs.worker_name() and execution.run is run
    assert not execution.done and execution.kick_next
    assert Message.objects.get(pk=prompt.pk).position < QUEUED_POSITION


def test_enqueue_without_start_on_an_idle_chat_queues_it(chat):
    """Without ``start``/``wait`` the run is queued with no worker and no lease (a task
    will answer it) and the chat says ``queued``."""
    run, execution = runs.enqueue(chat, prompt_of(chat))
    assert execution is None
    row = fresh(run)
    assert (row.status, row.attempt, row.worker, row.lease_expires_at) == ("queued", 0, "", None)
    assert row.started_at is None
    assert chat_row(chat) == {"status": "queued", "active_run_id": None}
    assert chat.status == "queued"


def test_enqueue_behind_a_run_queues_the_prompt_after_everything(chat):
    """Behind a working run, even ``start=True`` only queues (no worker, no lease: a task
    answers it); the prompt reads after every other message until its run starts; the
    chat keeps its working run's status."""
    ahead = taken_run(chat, lease=60)
    prompt = prompt_of(chat)
    run, execution = runs.enqueue(chat, prompt, start=True)
    assert execution is None
    row = fresh(run)
    assert (row.status, row.worker, row.lease_expires_at) == ("queued", "", None)
    assert Message.objects.get(pk=prompt.pk).position >= QUEUED_POSITION
    assert chat_row(chat) == {"status": "running", "active_run_id": ahead.pk}
    assert chat.status == "running"


def test_enqueue_behind_a_queued_run_queues_it_too(chat):
    """A queued run nobody works on yet is ahead as much as a working one: ``start=True``
    only queues the next run, its prompt after everything, the chat still ``queued``."""
    runs.enqueue(chat, prompt_of(chat, "first"))
    prompt = prompt_of(chat, "second")
    run, execution = runs.enqueue(chat, prompt, start=True)
    assert execution is None
    assert (fresh(run).status, fresh(run).worker, fresh(run).lease_expires_at) == (
        "queued",
        "",
        None,
    )
    assert Message.objects.get(pk=prompt.pk).position >= QUEUED_POSITION
    assert chat_row(chat) == {"status": "queued", "active_run_id": None}


def test_enqueue_to_wait_holds_a_lease_for_the_waiting_caller(chat, clock):
    """``wait=True`` behind a working run: the queued run gets this process as its worker
    and a lease (renewed while its caller waits), so nobody else takes it."""
    taken_run(chat, lease=60)
    run, execution = runs.enqueue(chat, prompt_of(chat), wait=True)
    row = fresh(run)
    assert execution is None and row.status == "queued"
    assert row.worker == runs.worker_name()
    assert row.lease_expires_at == clock.now + timedelta(seconds=LEASE)


def test_enqueue_to_wait_on_a_run_waiting_for_a_decision_is_refused(chat):
    """``wait=True`` while the chat's run waits for a tool-call decision raises
    ChatBusyError and stores nothing, a run queued behind it or not; without ``wait`` the
    prompt is queued."""
    awaiting(chat, "c1")
    with pytest.raises(ChatBusyError, match="approve or deny them"):
        runs.enqueue(chat, prompt_of(chat, "blocked"), wait=True)
    assert not Message.objects.filter(chat=chat, content="blocked").exists()
    run, _ = runs.enqueue(chat, prompt_of(chat, "later"), start=True)
    assert fresh(run).status == "queued" and chat.status == "awaiting_approval"
    assert chat_row(chat)["status"] == "awaiting_approval"
    # the chat's run is its oldest unfinished one, not the run queued last
    with pytest.raises(ChatBusyError, match="approve or deny them"):
        runs.enqueue(chat, prompt_of(chat, "blocked again"), wait=True)
    assert not Message.objects.filter(chat=chat, content="blocked again").exists()


def test_enqueue_stores_the_prompt_with_its_attachments_or_none(chat):
    """Attachments are stored with the prompt; with no prompt the run continues the
    history (no prompt row)."""
    prompt = prompt_of(chat)
    run, _ = runs.enqueue(chat, prompt, [("a.txt", b"abc", "text/plain")])
    attachment = Attachment.objects.get(message=prompt)
    assert (attachment.filename, attachment.mime_type, attachment.size) == (
        "a.txt",
        "text/plain",
        3,
    )
    assert fresh(run).prompt_id == prompt.pk
    other = Chat.objects.create()
    run, _ = runs.enqueue(other)
    assert fresh(run).prompt_id is None and not Message.objects.filter(chat=other).exists()


# -- the user's lock, and survivors of tests/mutation -----------------------------------------
class _Cursor:
    def __init__(self, executed):
        self.executed = executed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql, params):
        self.executed.append((sql, params))


def test_a_users_admission_lock_on_postgresql_is_an_advisory_lock_on_the_users_id(monkeypatch):
    """On PostgreSQL the user's admission lock is ``pg_advisory_xact_lock`` in the
    package's lock space, on the user's id folded into a signed 32-bit key (ids past it
    wrap around)."""
    executed = []
    with monkeypatch.context() as patch:  # undone before the bystanders are compared
        patch.setattr(connection, "vendor", "postgresql")
        patch.setattr(connection, "cursor", lambda: _Cursor(executed))
        for user_id in (1, 2**31 - 1, 2**31, 2**31 + 5, 2**32 + 7):
            runs._lock_user(user_id)
    assert [params for _, params in executed] == [
        [0x6C6C6D63, key] for key in (1, 2**31 - 1, -(2**31), -(2**31) + 5, 7)
    ]
    for sql, _ in executed:  # SQL is not case-sensitive, its placeholders are
        assert sql.lower() == "select pg_advisory_xact_lock(%s, %s)" and sql.count("%s") == 2


def test_a_users_admission_lock_elsewhere_locks_the_users_row(monkeypatch, django_user_model):
    """On a database that is neither SQLite nor PostgreSQL, the lock is a
    ``select_for_update`` of the user's row; on SQLite nothing is run (the chat's lock
    holds the database's write lock)."""
    from django.test.utils import CaptureQueriesContext

    user = django_user_model.objects.create_user("locked")
    if connection.vendor == "sqlite":
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            runs._lock_user(user.pk)
        assert len(queries) == 0
    with monkeypatch.context() as patch:
        patch.setattr(connection, "vendor", "othersql")
        with transaction.atomic(), CaptureQueriesContext(connection) as queries:
            runs._lock_user(user.pk)
    (query,) = queries
    table = django_user_model._meta.db_table
    # FOR UPDATE where the database has it (SQLite has not)
    assert table in query["sql"] and f'"id" = {user.pk}' in query["sql"]
    assert query["sql"].endswith("FOR UPDATE") == connection.features.has_select_for_update


def test_regenerate_drops_the_last_runs_reply_and_keeps_its_prompt_and_the_rest(chat):
    """A regenerate takes the messages after the path's last prompt off the path (they
    stay stored); the earlier messages stay on it. Refused, word for word, while a run is
    unfinished, when the chat has no run, or no prompt on its path."""
    with pytest.raises(ArgumentError) as raised:
        runs.enqueue(chat, regenerate=True)
    assert str(raised.value) == f"chat {chat.pk} has no reply to regenerate"
    earlier = Run.objects.create(chat=chat, status="succeeded")
    kept = [
        chat.add_message(role="user", content="Q1", run=earlier).pk,
        chat.add_message(role="assistant", content="A1", run=earlier).pk,
    ]
    last_prompt = chat.add_message(role="user", content="Q2")
    last = Run.objects.create(chat=chat, status="succeeded", prompt=last_prompt)
    Message.objects.filter(pk=last_prompt.pk).update(run=last)
    chat.add_message(role="assistant", content="A2", run=last)
    chat.add_message(role="tool", content="T2", run=last)
    run, _ = runs.enqueue(chat, regenerate=True)
    on_path = Message.objects.filter(chat=chat, on_path=True)
    assert sorted(on_path.values_list("pk", flat=True)) == sorted([*kept, last_prompt.pk])
    assert Message.objects.filter(chat=chat).count() == 5  # nothing deleted
    with pytest.raises(ChatBusyError) as raised:
        runs.enqueue(chat, regenerate=True)
    assert str(raised.value) == (
        f"chat {chat.pk} has a run in progress: wait for it to end (or cancel it) before "
        "regenerating"
    )
    runs.cancel_queued(chat.pk, run.pk)
    Message.objects.filter(chat=chat, role="user").update(on_path=False)
    with pytest.raises(ArgumentError) as raised:
        runs.enqueue(chat, regenerate=True)
    assert str(raised.value) == f"chat {chat.pk} has no prompt to answer again"


def test_prompts_queued_behind_a_run_keep_their_order_of_arrival(chat):
    """Prompts stored while a run works read after everything, each in its own place, in
    the order they came."""
    taken_run(chat, lease=60)
    first, _ = runs.enqueue(chat, prompt_of(chat, "1"))
    second, _ = runs.enqueue(chat, prompt_of(chat, "2"))
    places = [Message.objects.get(pk=run.prompt_id).position for run in (first, second)]
    assert QUEUED_POSITION < places[0] < places[1]


def test_enqueue_says_what_to_do_word_for_word_and_keeps_no_task_id_by_default(chat):
    with pytest.raises(ArgumentError) as raised:
        runs.enqueue(Chat(provider="openai"), regenerate=True)
    assert str(raised.value) == (
        "save the chat before running it (Chat.objects.create(...) or chat.save()); "
        "an unsaved chat is saved with its first prompt"
    )
    with pytest.raises(ArgumentError) as raised:
        runs.enqueue(chat, prompt_of(chat), regenerate=True)
    assert str(raised.value) == "a regenerate answers the last prompt again: it takes no prompt"
    run, _ = runs.enqueue(chat, prompt_of(chat), start=True)
    assert fresh(run).task_id == ""


def test_admission_locks_the_user_only_when_limits_are_on_and_the_chat_has_one(
    chat, monkeypatch, settings, django_user_model
):
    """The gate takes the user's lock (then checks the limits, the signal left to the
    caller) only with limits on and a user; otherwise it admits with no verdict."""
    from django_llmchat.runs import limits

    locked = []
    monkeypatch.setattr(admission, "_lock_user", locked.append)
    admitted = []
    monkeypatch.setattr(
        limits, "admit", lambda c, signal, prompt: admitted.append((signal, prompt)) or "verdict"
    )
    user = django_user_model.objects.create_user("gated")
    settings.LLMCHAT = {**settings.LLMCHAT, "LIMITS": None}
    assert runs._admit(Chat(pk=chat.pk, user_id=user.pk)) is None
    settings.LLMCHAT = {**settings.LLMCHAT, "LIMITS": {"default": {"runs_per_hour": 5}}}
    assert runs._admit(Chat(pk=chat.pk, user_id=None)) is None
    assert locked == [] and admitted == []
    assert runs._admit(Chat(pk=chat.pk, user_id=user.pk)) == "verdict"
    assert locked == [user.pk] and admitted == [(False, 0)]
    # a prompt reserves its estimate; a run queued again reserves nothing more
    prompt = Message(content="x" * 40)
    assert runs._admit(Chat(pk=chat.pk, user_id=user.pk), prompt) == "verdict"
    assert runs._admit(Chat(pk=chat.pk, user_id=user.pk), reserve=False) == "verdict"
    assert admitted[1:] == [(False, limits.prompt_tokens("x" * 40)), (False, None)]


@pytest.mark.parametrize("late", [0, 1])
def test_a_prompt_whose_clock_is_not_past_the_leaf_goes_after_it(chat, late, monkeypatch):
    """A prompt's position was read before the chat's lock: when the active leaf's position
    is the same or later (a reply stored meanwhile, another host's clock), the admission's
    statements place the prompt right after the leaf, never beside it (on every database:
    PostgreSQL's run function is not held to this yet)."""
    monkeypatch.setattr(admission.pg, "available", lambda *using: False)
    leaf = chat.add_message(role="assistant", content="stored meanwhile")
    prompt = prompt_of(chat)
    prompt.position = leaf.position - late
    run, _ = runs.enqueue(chat, prompt, start=True)
    stored = Message.objects.get(pk=run.prompt_id)
    assert stored.position == leaf.position + 1 and stored.parent_id == leaf.pk
