"""An execution (``django_llmchat/runs/execution.py``): a claimed run worked on, each write
fenced by its attempt (renew, fence, step_stored, poll, finish, pause, requeue), and the
thread keeping its lease.

One transition at a time, as tests/runs/conftest.py says."""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_llmchat import runs
from django_llmchat.errors import ArgumentError, RunLostError
from django_llmchat.models import Chat, Message, Run
from django_llmchat.models.message import QUEUED_POSITION
from django_llmchat.runs import execution as runs_execution
from tests.factories import LEASE, MAX_ATTEMPTS, chat_row, fresh, prompt_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("bystanders")]


# -- the fence --------------------------------------------------------------------------------
def _taken_over(chat, execution):
    """Another process took the run over (its lease ran out): it runs attempt + 1."""
    Run.objects.filter(pk=execution.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    return runs.claim(chat.pk, worker="other:2").execution


def test_a_process_whose_run_was_taken_over_writes_nothing_more(chat):
    """The attempt fences every write: once another process took the run over (same
    status, a higher attempt) this process's renew, fence, step and end all fail and
    leave the row to the new owner, which can still write."""
    run, mine = runs.enqueue(chat, prompt_of(chat), start=True)
    theirs = _taken_over(chat, mine)
    assert theirs.attempt == 2
    before = Run.objects.values().get(pk=run.pk)
    assert mine.renew() is False and mine.lost and mine.done
    mine.lost = False  # each write checks the row again
    with pytest.raises(RunLostError, match=f"run {run.pk} is no longer this process's"):
        mine.fence()
    assert mine.lost
    mine.lost = False
    with pytest.raises(RunLostError):
        mine.step_stored()
    mine.lost = False
    with pytest.raises(RunLostError):
        with transaction.atomic():
            mine.lock_chat()
            mine.step_stored(final_status="succeeded")
    mine.lost = False
    assert mine.finish("succeeded") is False
    mine.lost = False
    assert mine.pause() is False and mine.requeue() is False
    assert Run.objects.values().get(pk=run.pk) == before
    assert chat_row(chat) == {"status": "running", "active_run_id": run.pk}
    theirs.step_stored()
    assert fresh(run).steps == 1
    assert theirs.finish("succeeded") is True and fresh(run).status == "succeeded"


def test_a_last_step_ends_a_run_succeeded_only(chat):
    """The transition ``succeed``: a step ending the run ends it succeeded; any other final
    status is refused before anything is written."""
    run, mine = runs.enqueue(chat, prompt_of(chat), start=True)
    with pytest.raises(
        ArgumentError, match="^a run ends with its last step succeeded, not 'failed'$"
    ):
        mine.step_stored(final_status="failed")
    with pytest.raises(
        ArgumentError, match="^a chat's title goes with the run's last step \\(final_status\\)$"
    ):
        mine.step_stored(title=("A title", "prompt"))
    assert (fresh(run).status, fresh(run).steps) == ("running", 0)
    with transaction.atomic():
        mine.lock_chat()
        mine.step_stored(final_status="succeeded")
    assert (fresh(run).status, fresh(run).steps) == ("succeeded", 1)


def test_a_process_whose_run_was_given_up_writes_nothing_more(chat):
    """The status fences the writes too: a run failed meanwhile (its attempt unchanged)
    takes no renewal, step or end from the process that had it."""
    run, mine = runs.enqueue(chat, prompt_of(chat), start=True)
    Run.objects.filter(pk=run.pk).update(
        attempt=MAX_ATTEMPTS, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    mine.attempt = MAX_ATTEMPTS
    assert runs.claim(chat.pk).state == runs.NOTHING  # given up: failed, same attempt
    before = Run.objects.values().get(pk=run.pk)
    assert before["status"] == "failed"
    assert mine.renew() is False
    mine.lost = False
    with pytest.raises(RunLostError):
        mine.fence()
    mine.lost = False
    with pytest.raises(RunLostError):
        mine.step_stored()
    mine.lost = False
    with pytest.raises(RunLostError):
        mine.step_stored(final_status="succeeded")
    mine.lost = False
    assert mine.finish("cancelled") is False
    assert Run.objects.values().get(pk=run.pk) == before


def test_renew_extends_the_lease_of_a_run_still_ours(chat, clock):
    """renew: a lease of RUN_LEASE seconds from now, ``True``; nothing after the
    execution ended."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    clock.move(seconds=12)
    assert execution.renew() is True and not execution.lost
    assert fresh(run).lease_expires_at == clock.now + timedelta(seconds=LEASE)
    execution.finish("succeeded")
    assert execution.renew() is False and fresh(run).lease_expires_at is None


def test_fence_renews_the_lease(chat, clock):
    """fence: in the transaction storing tool results, the run is ours (the lease is
    renewed) or RunLostError."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    clock.move(seconds=12)
    execution.fence()
    assert fresh(run).lease_expires_at == clock.now + timedelta(seconds=LEASE)


def test_step_stored_counts_the_step_and_renews_the_lease(chat, clock):
    """A step stored: one more step, the lease renewed, the run still running."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    clock.move(seconds=5)
    execution.step_stored()
    execution.step_stored()
    row = fresh(run)
    assert (row.steps, row.status, execution.run.steps) == (2, "running", 2)
    assert row.lease_expires_at == clock.now + timedelta(seconds=LEASE)


def test_the_last_step_ends_the_run_and_frees_the_chat(chat, sent):
    """The final step counts itself and ends the run with the given status (finished,
    no lease), the chat released and the next queued run's task sent after commit."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    execution.step_stored()
    following, _ = runs.enqueue(chat, prompt_of(chat, "next"))
    with transaction.atomic():
        execution.lock_chat()
        execution.step_stored(final_status="succeeded")
        assert sent == []
    row = fresh(run)
    assert (row.steps, row.status, row.lease_expires_at) == (2, "succeeded", None)
    assert row.finished_at is not None and execution.run.finished_at is not None
    assert (execution.outcome, execution.run.status, execution.run.steps) == (
        "succeeded",
        "succeeded",
        2,
    )
    assert execution.run.lease_expires_at is None and execution.done
    assert chat_row(chat) == {"status": "queued", "active_run_id": None}
    assert sent == [(chat.pk, following.pk)]
    assert execution.renew() is False


def test_the_last_step_of_an_execution_that_drains_the_queue_sends_nothing(chat, sent):
    """``kick_next = False`` (a task answering the queue itself): no task is sent."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    runs.enqueue(chat, prompt_of(chat, "next"))
    execution.kick_next = False
    execution.step_stored(final_status="succeeded")
    assert sent == []


@pytest.fixture(params=["returning", "statements"])
def last_step_face(request, monkeypatch):
    """The chat's update at a run's last step: one ``UPDATE ... RETURNING`` (PostgreSQL,
    SQLite 3.35+), or, where a database cannot return an updated row, the next run read,
    the release and the title's own conditional ``UPDATE``: the same outcome either way."""
    if request.param == "statements":
        monkeypatch.setattr(runs.base, "returns_updated_rows", lambda connection: False)
    return request.param


def _last_step(execution, title=None):
    with transaction.atomic():
        execution.lock_chat()
        execution.step_stored(final_status="succeeded", title=title)


def test_the_last_step_titles_an_untitled_chat_in_the_chats_update(chat, last_step_face):
    """With ``title``, the run's end writes the chat's automatic title (255 characters at
    most) and its source when the chat is untitled, and says so (``titled``); the chat
    is idle, let go of, its ``updated_at`` moved."""
    Chat.objects.filter(pk=chat.pk).update(title="", title_source="")
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    before = Chat.objects.get(pk=chat.pk).updated_at  # the admission's
    time.sleep(0.002)
    with CaptureQueriesContext(connection) as ctx:
        _last_step(execution, title=("T" * 300, "prompt"))
    row = Chat.objects.get(pk=chat.pk)
    assert (row.title, row.title_source, row.status, row.active_run_id) == (
        "T" * 255,
        "prompt",
        "idle",
        None,
    )
    assert row.updated_at > before and execution.titled is True
    chat_updates = [q for q in ctx.captured_queries if q["sql"].startswith('UPDATE "llmchat_chat"')]
    if last_step_face == "returning":  # status, release, title: one statement, no read
        assert len(chat_updates) == (2 if connection.vendor == "postgresql" else 1)
        reads = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("SELECT")]
        assert reads == []  # no run is queued next: none is read


@pytest.mark.parametrize("title", [("Mine", "user"), ("Earlier", "prompt")])
def test_the_last_step_keeps_a_title_the_chat_has(chat, last_step_face, title):
    """A title the user gave, or one written meanwhile, stays: ``titled`` is false."""
    Chat.objects.filter(pk=chat.pk).update(title=title[0], title_source=title[1])
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    _last_step(execution, title=("From the prompt", "prompt"))
    row = Chat.objects.get(pk=chat.pk)
    assert (row.title, row.title_source, execution.titled) == (*title, False)
    assert chat_row(chat) == {"status": "idle", "active_run_id": None}


def test_the_last_step_without_a_title_leaves_the_title(chat, last_step_face):
    Chat.objects.filter(pk=chat.pk).update(title="", title_source="")
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    _last_step(execution)
    row = Chat.objects.get(pk=chat.pk)
    assert (row.title, row.title_source, execution.titled) == ("", "", False)


def test_the_last_step_hands_the_chat_to_the_run_queued_next(chat, sent, last_step_face):
    """A run queued behind: the chat's status is its (queued), its task is sent after
    the commit; the chat's active run, another run's, is not let go of."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    following, _ = runs.enqueue(chat, prompt_of(chat, "next"))
    _last_step(execution, title=("T", "prompt"))
    assert chat_row(chat) == {"status": "queued", "active_run_id": None}
    assert sent == [(chat.pk, following.pk)]
    other, _ = runs.enqueue(Chat.objects.create(), None, start=True)
    Chat.objects.filter(pk=chat.pk).update(active_run=other)  # held by another run
    third, _ = runs.enqueue(chat, prompt_of(chat, "third"), start=False)
    execution_of_next = runs.claim(chat.pk, worker="w:1").execution
    assert execution_of_next.pk == following.pk
    Chat.objects.filter(pk=chat.pk).update(active_run=other)
    _last_step(execution_of_next)
    assert chat_row(chat) == {"status": "queued", "active_run_id": other.pk}
    assert sent[-1] == (chat.pk, third.pk)


def test_the_chats_update_at_a_last_step_finds_no_chat(last_step_face):
    """A chat that is not there (its runs went with it): nothing updated, no title
    written, no next run."""
    assert runs.base._release_at_last_step(10**9, 10**9, touch=True, title=("T", "prompt")) == (
        None,
        False,
    )


def test_the_last_step_of_a_chat_gone_meanwhile_is_lost(chat, last_step_face):
    """The run went with its chat: its last step is not stored (the fence)."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    Chat.objects.filter(pk=chat.pk).delete()
    with pytest.raises(RunLostError):
        _last_step(execution, title=("T", "prompt"))
    assert execution.titled is False


# -- the execution: poll ------------------------------------------------------------------------
def test_poll_reads_the_run_at_most_every_quarter_second_unless_forced(chat, monkeypatch):
    """poll reads the row only when CANCEL_POLL_SECONDS passed since the last read (or
    when forced): a stop asked for meanwhile is seen at the next read."""
    ticks = [1000.0]
    clock = SimpleNamespace(monotonic=lambda: ticks[0], sleep=time.sleep)
    monkeypatch.setattr(runs_execution, "time", clock)
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    runs.interrupt(chat.pk, "why")
    assert execution.poll() is False  # just claimed: the first read is a poll interval away
    ticks[0] += runs.CANCEL_POLL_SECONDS / 2
    assert execution.poll() is False
    ticks[0] += runs.CANCEL_POLL_SECONDS / 2
    with pytest.raises(runs.CancelRequested) as stop:
        execution.poll()
    assert stop.value.reason == "why" and str(stop.value) == "why"
    assert execution.poll() is False  # read just now: the next read is a poll interval away
    with pytest.raises(runs.CancelRequested):
        execution.poll(force=True)


def test_poll_says_whether_it_read_the_run(chat, monkeypatch):
    """poll returns True when it read the run (a caller gives its connection back then),
    False when the last read is too recent to read again."""
    ticks = [1000.0]
    clock = SimpleNamespace(monotonic=lambda: ticks[0], sleep=time.sleep)
    monkeypatch.setattr(runs_execution, "time", clock)
    _, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    assert execution.poll() is False
    assert execution.poll(force=True) is True
    ticks[0] += runs.CANCEL_POLL_SECONDS
    assert execution.poll() is True
    assert execution.poll() is False


def test_poll_of_a_stop_without_a_reason_says_none(chat):
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    Run.objects.filter(pk=run.pk).update(cancel_requested=True, interrupt_reason="")
    with pytest.raises(runs.CancelRequested) as stop:
        execution.poll(force=True)
    assert stop.value.reason is None


def test_poll_of_a_run_lost_raises_run_lost(chat):
    """poll raises RunLostError when the run was taken over, ended, or deleted; and at
    once, without reading, once the execution knows it lost the run."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    execution.poll(force=True)  # ours: nothing
    Run.objects.filter(pk=run.pk).update(attempt=2)
    with pytest.raises(RunLostError):
        execution.poll(force=True)
    assert execution.lost
    Run.objects.filter(pk=run.pk).update(attempt=1)
    with pytest.raises(RunLostError):
        execution.poll(force=True)  # lost for good
    execution.lost = False
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    with pytest.raises(RunLostError):
        execution.poll(force=True)
    execution.lost = False
    Run.objects.filter(pk=run.pk).delete()
    with pytest.raises(RunLostError):
        execution.poll(force=True)


# -- the execution: ending ---------------------------------------------------------------------
def test_finish_ends_the_run_with_its_error_cut_to_the_columns(chat, clock):
    """finish: the finished status, the error type (64), error (4000) and interrupt
    reason (255) cut to their columns, finished now, no lease; the chat idle."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    assert execution.finish(
        "failed", error_type="e" * 100, error="x" * 5000, interrupt_reason="r" * 300
    )
    row = fresh(run)
    assert (row.status, row.error_type, row.error, row.interrupt_reason) == (
        "failed",
        "e" * 64,
        "x" * 4000,
        "r" * 255,
    )
    assert row.finished_at == clock.now and row.lease_expires_at is None
    assert (execution.run.error_type, execution.run.interrupt_reason) == ("e" * 64, "r" * 255)
    assert execution.run.finished_at == clock.now and execution.outcome == "failed"
    assert chat_row(chat) == {"status": "idle", "active_run_id": None}
    assert execution.finish("succeeded") is False  # once


def test_finish_with_no_reason_stores_an_empty_one(chat):
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    execution.finish("interrupted", interrupt_reason=None)
    row = fresh(run)
    assert (row.interrupt_reason, row.error_type, row.error) == ("", "", "")


def test_finish_refuses_an_unfinished_status(chat):
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    with pytest.raises(ArgumentError, match="'queued' is not a finished run status"):
        execution.finish("queued")
    assert fresh(run).status == "running"


@pytest.mark.parametrize("status", sorted(Run.FINISHED))
def test_finish_moves_a_prompt_still_queued_into_place(chat, status):
    """A run that ends, with any finished status, while its prompt still reads as queued
    puts it in place."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    Message.objects.filter(pk=run.prompt_id).update(position=QUEUED_POSITION + 1)
    execution.finish(status)
    assert Message.objects.get(pk=run.prompt_id).position < QUEUED_POSITION


def test_pause_waits_for_decisions_and_holds_the_chat(chat):
    """pause: awaiting_approval, no lease, the chat waiting too."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    assert execution.pause() is True
    row = fresh(run)
    assert (row.status, row.lease_expires_at, row.finished_at) == ("awaiting_approval", None, None)
    assert chat_row(chat) == {"status": "awaiting_approval", "active_run_id": None}
    assert execution.outcome == "awaiting_approval"


def test_requeue_gives_the_run_back_with_its_error(chat, sent):
    """requeue: queued again (no lease) with the error cut to its columns, its prompt
    where it is; no task is sent by the requeue itself (the caller retries)."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    position = Message.objects.get(pk=run.prompt_id).position
    assert execution.requeue("t" * 100, "e" * 5000) is True
    row = fresh(run)
    assert (row.status, row.error_type, row.error, row.lease_expires_at) == (
        "queued",
        "t" * 64,
        "e" * 4000,
        None,
    )
    assert Message.objects.get(pk=run.prompt_id).position == position
    assert chat_row(chat)["status"] == "queued" and sent == []
    assert runs.claim(chat.pk).execution.pk == run.pk  # any process may take it


def test_requeue_without_an_error_clears_none(chat):
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    execution.requeue()
    row = fresh(run)
    assert (row.error_type, row.error) == ("", "")


def test_ending_a_run_sends_the_task_of_the_next_queued_run(chat, sent):
    """When a run ends, the chat's next run gets its task sent after commit if no caller
    waits for it in-process; not when it is requeued, not when one waits for it."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    following, _ = runs.enqueue(chat, prompt_of(chat, "next"))
    with transaction.atomic():
        execution.finish("succeeded")
        assert sent == []
    assert sent == [(chat.pk, following.pk)]
    other = Chat.objects.create()
    run, execution = runs.enqueue(other, prompt_of(other), start=True)
    runs.enqueue(other, prompt_of(other, "waited"), wait=True)
    execution.finish("succeeded")
    third = Chat.objects.create()
    run, execution = runs.enqueue(third, prompt_of(third), start=True)
    runs.enqueue(third, prompt_of(third, "next"))
    execution.requeue()
    assert sent == [(chat.pk, following.pk)]


# -- the lease thread -------------------------------------------------------------------------
def test_the_lease_thread_is_off_for_a_private_in_memory_database(settings):
    """In-memory SQLite (no other process can see it) needs no lease renewals; a file or
    a server database does."""
    from django.db import connections

    database = connections["default"].settings_dict
    if connection.vendor == "sqlite":
        assert runs._private_database() is True
        saved = database["NAME"]
        try:
            database["NAME"] = "/tmp/llmchat.sqlite3"
            assert runs._private_database() is False
            database["NAME"] = "file:x?mode=memory&cache=shared"
            assert runs._private_database() is True
            database["NAME"] = ""
            assert runs._private_database() is True
        finally:
            database["NAME"] = saved
    else:
        assert runs._private_database() is False


def test_lease_ticks_are_a_third_of_the_lease_and_at_least_a_fifth_second(settings):
    settings.LLMCHAT = {"RUN_LEASE": 30}
    assert runs._tick() == 10.0 and runs._lease_seconds() == 30.0
    settings.LLMCHAT = {"RUN_LEASE": 0.3}
    assert runs._tick() == 0.2


@pytest.fixture
def keeper(fake_llm, monkeypatch, sent):
    """A lease keeper of this test's own, its ticks driven by hand (``wake``): the lease
    is so long that no tick comes by itself."""
    fake_llm.configure("openai", "gpt-4.1-mini", RUN_LEASE=3000.0)
    monkeypatch.setattr(runs_execution, "_private_database", lambda: False)
    own = runs._Keeper()
    monkeypatch.setattr(runs_execution, "_keeper", lambda: own)
    yield own
    with own.mutex:
        own.live.clear()
    thread, deadline = own.thread, time.monotonic() + 30
    while thread is not None and thread.is_alive() and time.monotonic() < deadline:
        own.wake.set()  # two idle ticks and it ends
        thread.join(0.05)


def tick(keeper):
    keeper.wake.set()


def test_the_lease_keeper_renews_live_runs_and_drops_lost_ones(keeper, clock):
    """The keeper thread starts with the first execution; each tick renews the lease of
    every live execution; an execution whose run was taken over is dropped; with nothing
    left it closes its connection, and after a whole idle tick it ends. The next
    execution starts a new thread."""
    from tests.waiting import wait_until, when_unlocked

    chat = Chat.objects.create()
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    assert keeper.live == {execution} and keeper.thread.is_alive()
    assert keeper.thread.name == "llmchat-leases" and keeper.thread.daemon
    assert keeper.tick == 1000.0
    first = keeper.thread
    clock.move(seconds=100)
    tick(keeper)
    wait_until(lambda: fresh(run).lease_expires_at == clock.now + timedelta(seconds=3000))
    wait_until(lambda: keeper.connected)
    when_unlocked(
        lambda: Run.objects.filter(pk=run.pk).update(attempt=2)  # taken over elsewhere
    )
    tick(keeper)
    wait_until(lambda: not keeper.live and not keeper.connected)
    assert execution.lost
    tick(keeper)
    first.join(30)
    assert not first.is_alive() and keeper.thread is None
    other = Chat.objects.create()
    _, again = runs.enqueue(other, prompt_of(other), start=True)
    assert keeper.thread is not None and keeper.thread is not first
    assert keeper.live == {again}


def test_the_lease_keeper_lets_an_ended_run_go(keeper):
    """An execution that ended leaves the keeper at once; the keeper's thread closes its
    connection at the next tick it has nothing to renew."""
    from tests.waiting import wait_until

    chat = Chat.objects.create()
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    tick(keeper)
    wait_until(lambda: keeper.connected)
    from tests.waiting import when_unlocked

    when_unlocked(lambda: execution.finish("succeeded"))
    assert keeper.live == set()
    wait_until(lambda: not keeper.connected)
    assert keeper.thread is not None  # it ends after a whole idle tick, not before


def test_a_shorter_lease_wakes_the_keeper_at_once(keeper, settings):
    """A new execution whose lease is shorter than the keeper's tick wakes the thread, so
    its first renewal comes in time."""
    chat = Chat.objects.create()
    runs.enqueue(chat, prompt_of(chat), start=True)
    keeper.wake.clear()
    llmchat = dict(settings.LLMCHAT)
    settings.LLMCHAT = {**llmchat, "RUN_LEASE": 300.0}
    other = Chat.objects.create()
    run, _ = runs.enqueue(other, prompt_of(other), start=True)
    from tests.waiting import wait_until

    wait_until(lambda: keeper.tick == 100.0)
    settings.LLMCHAT = {**llmchat, "RUN_LEASE": 3000.0}
    keeper.wake.clear()
    third = Chat.objects.create()
    runs.enqueue(third, prompt_of(third), start=True)
    assert not keeper.wake.is_set()  # a longer lease: no need to wake


def test_the_keeper_of_a_private_database_keeps_nothing(fake_llm, monkeypatch):
    """On a database no other process sees, an execution is not handed to the keeper."""
    own = runs._Keeper()
    monkeypatch.setattr(runs_execution, "_keeper", lambda: own)
    monkeypatch.setattr(runs_execution, "_private_database", lambda: True)
    chat = Chat.objects.create()
    runs.enqueue(chat, prompt_of(chat), start=True)
    assert own.live == set() and own.thread is None


def test_each_process_has_one_keeper():
    """``_keeper()`` is this process's keeper, the same each time; a forked child (another
    pid) gets its own."""
    import os

    found = runs._keeper()
    assert found is runs._keeper() and found.pid == os.getpid()
    found.pid = -1  # as seen from a child after a fork
    try:
        child = runs._keeper()
        assert child is not found and child.pid == os.getpid() and runs._keeper() is child
    finally:
        runs_execution._keepers.instance = found
        found.pid = os.getpid()


# -- survivors of tests/mutation --------------------------------------------------------------
def test_finish_without_a_reason_stores_none(chat):
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    execution.finish("succeeded")
    assert fresh(run).interrupt_reason == ""


def test_a_lost_execution_says_why(chat):
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    Run.objects.filter(pk=run.pk).update(attempt=9)
    with pytest.raises(RunLostError) as raised:
        execution.poll(force=True)
    assert str(raised.value) == (
        f"run {run.pk} is no longer this process's (attempt 1): another process took it "
        "over or it was finished"
    )


def test_an_in_memory_database_named_memory_is_private_too():
    from django.db import connections

    if connection.vendor != "sqlite":
        pytest.skip("the names of SQLite databases")
    database = connections["default"].settings_dict
    saved = database["NAME"]
    try:
        database["NAME"] = ":memory:"
        assert runs._private_database() is True
    finally:
        database["NAME"] = saved


def test_the_first_keeper_of_a_process_is_made_on_demand(monkeypatch):
    import os

    monkeypatch.setattr(runs_execution._keepers, "instance", None)
    found = runs._keeper()
    assert found.pid == os.getpid() and runs._keeper() is found


def test_lock_chat_and_each_transition_write_the_chats_row(chat):
    """``lock_chat`` (before a last step is stored: on SQLite nothing, the step's first
    write locks the database), the last step's end and each transition of an execution
    (finish, pause, requeue) write the chat's row: its ``updated_at``."""
    long_ago = timezone.now() - timedelta(days=1)
    for act in (
        lambda execution: execution.lock_chat() or execution.step_stored(final_status="succeeded"),
        lambda execution: execution.finish("succeeded"),
        lambda execution: execution.pause(),
        lambda execution: execution.requeue(),
    ):
        Run.objects.filter(chat=chat).update(status="succeeded")
        _, execution = runs.enqueue(chat, prompt_of(chat), start=True)
        Chat.objects.filter(pk=chat.pk).update(updated_at=long_ago)
        with transaction.atomic():
            act(execution)
        assert Chat.objects.get(pk=chat.pk).updated_at > long_ago


def test_lock_chat_is_a_statement_where_the_database_locks_rows(chat):
    """On PostgreSQL ``lock_chat`` takes the chat's row lock (one UPDATE); on SQLite,
    whose transactions lock the whole database at their first write, it runs nothing."""
    _, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    with transaction.atomic(), CaptureQueriesContext(connection) as ctx:
        execution.lock_chat()
    sql = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(sql) == (1 if connection.vendor == "postgresql" else 0)
