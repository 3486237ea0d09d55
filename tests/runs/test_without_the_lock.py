"""The fences without the chat's lock: every transition of a chat's runs takes the chat's
lock first, and then updates the run it read with a conditional update (its status, and
for a claim its attempt, in the ``WHERE``). Under the lock the conditions cannot exclude
the row; these tests take the lock out of the picture (``_lock`` made a no-op) and change
the run's row between the read and the update, as a transition that did not wait for the
lock would, so that the conditions are the only defence: the update finds no row and
nothing of the other transition is overwritten.

On SQLite and on PostgreSQL alike the statements are tested (the PostgreSQL face left
out); the run functions of ``django_llmchat/sql/`` are tested on PostgreSQL by a second
connection changing the run while the function waits on the run's row, having read it.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from django_llmchat import runs
from django_llmchat.models import Run
from django_llmchat.models.message import QUEUED_POSITION
from django_llmchat.runs import base, claims, decisions, pg
from tests.factories import MAX_ATTEMPTS, awaiting, fresh, prompt_of, taken_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("bystanders")]


@pytest.fixture
def unlocked(monkeypatch):
    """No chat lock (it answers as if the chat row were there), and the statements on
    every database."""
    for module in (claims, decisions):
        monkeypatch.setattr(module, "_lock", lambda chat_id: True)
        monkeypatch.setattr(module.pg, "available", lambda *using: False)


def _meanwhile(monkeypatch, module, change):
    """``module._head`` reads the head, then ``change(head)`` changes its row (once), as
    a transition not holding the chat's lock would between the read and the update; the
    head as read is returned."""
    done = []

    def head(chat_id):
        found = base._head(chat_id)
        if found is not None and not done:
            done.append(found.pk)
            change(found)
        return found

    monkeypatch.setattr(module, "_head", head)
    return done


def _set(**fields):
    return lambda head: Run.objects.filter(pk=head.pk).update(**fields)


# -- claims -----------------------------------------------------------------------------------
def test_claim_leaves_a_run_withdrawn_meanwhile(chat, unlocked, monkeypatch):
    """A queued head withdrawn between the read and the claim's update: the update finds
    no row (its status filter), the run stays cancelled, and the claim looks again and
    finds nothing to do."""
    run, _ = runs.enqueue(chat, prompt_of(chat))
    done = _meanwhile(monkeypatch, claims, _set(status="cancelled", finished_at=timezone.now()))
    found = runs.claim(chat.pk, worker="w:1")
    assert done == [run.pk]
    assert found.state == runs.NOTHING and found.execution is None
    row = fresh(run)
    assert (row.status, row.attempt, row.worker, row.started_at) == ("cancelled", 0, "", None)


def test_claim_leaves_a_run_taken_over_meanwhile(chat, unlocked, monkeypatch, clock):
    """A head whose lease ran out, taken over by another process between the read and the
    update (attempt + 1, a new lease): the update finds no row (its attempt filter), the
    other process keeps the run, and the claim looks again and finds it busy."""
    run = taken_run(chat, lease=-1)
    until = clock.now + timedelta(seconds=60)
    done = _meanwhile(
        monkeypatch, claims, _set(attempt=2, worker="other:2", lease_expires_at=until)
    )
    found = runs.claim(chat.pk, worker="w:1")
    assert done == [run.pk]
    assert found.state == runs.BUSY and found.execution is None
    row = fresh(run)
    assert (row.status, row.attempt, row.worker, row.lease_expires_at) == (
        "running",
        2,
        "other:2",
        until,
    )


def test_give_up_leaves_a_run_finished_meanwhile(chat, unlocked, monkeypatch):
    """A head lost too often that its process finishes after all between the read and the
    give-up: the update finds no row (its status filter), the run stays succeeded."""
    run = taken_run(chat, lease=-1, attempt=MAX_ATTEMPTS)
    done = _meanwhile(
        monkeypatch,
        claims,
        _set(status="succeeded", finished_at=timezone.now(), lease_expires_at=None),
    )
    found = runs.claim(chat.pk, worker="w:1")
    assert done == [run.pk]
    assert found.state == runs.NOTHING
    row = fresh(run)
    assert (row.status, row.error_type, row.error) == ("succeeded", "", "")


def test_give_up_leaves_a_run_taken_over_meanwhile(chat, unlocked, monkeypatch, clock):
    """A head lost too often, taken on once more by another process between the read and
    the give-up (attempt + 1, a new lease): the update finds no row (its attempt filter),
    the run stays running with the other process."""
    run = taken_run(chat, lease=-1, attempt=MAX_ATTEMPTS)
    until = clock.now + timedelta(seconds=60)
    done = _meanwhile(
        monkeypatch,
        claims,
        _set(attempt=MAX_ATTEMPTS + 1, worker="other:2", lease_expires_at=until),
    )
    found = runs.claim(chat.pk, worker="w:1")
    assert done == [run.pk]
    assert found.state == runs.BUSY
    row = fresh(run)
    assert (row.status, row.attempt, row.worker, row.error_type) == (
        "running",
        MAX_ATTEMPTS + 1,
        "other:2",
        "",
    )


# -- decisions --------------------------------------------------------------------------------
def test_interrupt_leaves_a_run_finished_meanwhile(chat, unlocked, monkeypatch):
    """A running head that finishes between the read and the stop request: the request
    finds no row (its status filter), nothing is asked of the finished run."""
    run = taken_run(chat, lease=30)
    done = _meanwhile(monkeypatch, decisions, _set(status="succeeded", lease_expires_at=None))
    assert runs.interrupt(chat.pk, "cancelled") is False
    assert done == [run.pk]
    row = fresh(run)
    assert (row.status, row.cancel_requested, row.interrupt_reason) == ("succeeded", False, "")


def test_interrupt_leaves_a_run_claimed_meanwhile(chat, unlocked, monkeypatch):
    """A queued head claimed between the read and the stop: the stop finds no row (its
    status filter), the run keeps running."""
    run, _ = runs.enqueue(chat, prompt_of(chat))
    done = _meanwhile(monkeypatch, decisions, _set(status="running", attempt=1, worker="o:1"))
    assert runs.interrupt(chat.pk, "cancelled") is False
    assert done == [run.pk]
    row = fresh(run)
    assert (row.status, row.interrupt_reason, row.finished_at) == ("running", "", None)


def test_decide_leaves_a_run_stopped_meanwhile(chat, unlocked, monkeypatch):
    """A head awaiting approval, stopped between the read and the last decision's
    resume: the resume finds no row (its status filter), the run stays cancelled."""
    run, (call,) = awaiting(chat, "c1")
    done = _meanwhile(monkeypatch, decisions, _set(status="cancelled"))
    runs.decide(chat.pk, call, "approved")
    assert done == [run.pk]
    assert fresh(run).status == "cancelled"


def test_cancel_queued_leaves_a_run_claimed_meanwhile(chat, unlocked, monkeypatch):
    """A queued run claimed between the read and the withdrawal: the withdrawal finds no
    row (its status filter), the run keeps running."""
    run, _ = runs.enqueue(chat, prompt_of(chat))
    done = []
    first = type(Run.objects.none()).first

    def read_then_claimed(queryset):
        found = first(queryset)
        if queryset.model is Run and isinstance(found, Run) and not done:
            done.append(found.pk)
            Run.objects.filter(pk=found.pk).update(status="running", attempt=1, worker="o:1")
        return found

    monkeypatch.setattr(type(Run.objects.none()), "first", read_then_claimed)
    runs.cancel_queued(chat.pk, run.pk, reason="gave up")
    assert done == [run.pk]
    row = fresh(run)
    assert (row.status, row.interrupt_reason, row.finished_at) == ("running", "", None)


# -- the run functions (PostgreSQL) -----------------------------------------------------------
def _blocked(pid: int) -> bool:
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # read anew in this transaction
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def _claim(chat_id: int) -> tuple:
    now = timezone.now()
    return pg.call(
        "default",
        "llmchat_run_claim_v4",
        (chat_id, "bigint"),
        (None, "bigint"),
        (False, "boolean"),
        ("w:1", "text"),
        ("", "text"),
        (now, "timestamptz"),
        (now + timedelta(seconds=30), "timestamptz"),
        (MAX_ATTEMPTS, "integer"),
        (base.clock_position(), "bigint"),
        (QUEUED_POSITION, "bigint"),
        (None, "jsonb"),
        (None, "bigint"),
        (None, "bigint"),
    )


def _interrupt(chat_id: int) -> tuple:
    return pg.call(
        "default",
        "llmchat_run_interrupt_v1",
        (chat_id, "bigint"),
        (None, "bigint"),
        ("stop", "text"),
        ("cancelled", "text"),
        (base.clock_position(), "bigint"),
        (QUEUED_POSITION, "bigint"),
    )


def _while_changed(function, chat_id: int, run_id: int, change: str, args: list) -> tuple:
    """``function(chat_id)`` (a run function's call), by another connection, while this
    one holds the head's row changed (``change``: an UPDATE of llmchat_run, not committed)
    without the chat's lock: the function takes the chat's lock, reads the head as
    committed, and waits on the head's row; the change is committed then, and the
    function's fenced UPDATE finds the row as changed. Returns the function's answer."""
    answer: list = []
    pids: list = []

    def call() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pids.append(cursor.fetchone()[0])
            answer.append(function(chat_id))
        except Exception as exc:  # pragma: no cover - the assertion below shows it
            answer.append(exc)
        finally:
            connection.close()

    with transaction.atomic():
        with connections["default"].cursor() as cursor:
            cursor.execute(change, [*args, run_id])
        worker = threading.Thread(target=call)
        worker.start()
        deadline = time.monotonic() + 10
        while not (pids and _blocked(pids[0])) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pids and _blocked(pids[0]), "the function did not wait on the run's row"
    worker.join(10)
    assert answer and not isinstance(answer[0], Exception), answer
    return answer[0]


def _postgresql() -> None:
    if connection.vendor != "postgresql" or not pg.available("default"):
        pytest.skip("the run functions are PostgreSQL's")


def test_claim_function_leaves_a_run_withdrawn_meanwhile(chat):
    """llmchat_run_claim_v4: a queued head withdrawn while the function waits to update it
    (read before): its fenced UPDATE finds no row (the status condition), the run stays
    cancelled."""
    _postgresql()
    run = Run.objects.create(chat=chat, status="queued")
    _while_changed(
        _claim,
        chat.pk,
        run.pk,
        "UPDATE llmchat_run SET status = %s, finished_at = now() WHERE id = %s",
        ["cancelled"],
    )
    row = fresh(run)
    assert (row.status, row.attempt, row.worker, row.started_at) == ("cancelled", 0, "", None)


def test_claim_function_leaves_a_run_taken_over_meanwhile(chat):
    """llmchat_run_claim_v4: a head whose lease ran out, taken over by another process
    while the function waits to update it: its fenced UPDATE finds no row (the attempt
    condition), the other process keeps the run."""
    _postgresql()
    run = taken_run(chat, lease=-1)
    _while_changed(
        _claim,
        chat.pk,
        run.pk,
        "UPDATE llmchat_run SET attempt = 2, worker = %s,"
        " lease_expires_at = now() + interval '1 minute' WHERE id = %s",
        ["other:2"],
    )
    row = fresh(run)
    assert (row.status, row.attempt, row.worker) == ("running", 2, "other:2")


def test_interrupt_function_leaves_a_run_claimed_meanwhile(chat):
    """llmchat_run_interrupt_v1: a queued head claimed by a process while the function
    waits to stop it (read before): its UPDATE finds no row (the status condition), the
    function returns there ('none', nothing placed or released), the run keeps running."""
    _postgresql()
    run = Run.objects.create(chat=chat, status="queued")
    outcome, stopped, *_ = _while_changed(
        _interrupt,
        chat.pk,
        run.pk,
        "UPDATE llmchat_run SET status = %s, attempt = 1, worker = 'o:1' WHERE id = %s",
        ["running"],
    )
    assert (outcome, stopped) == ("none", None)
    row = fresh(run)
    assert (row.status, row.interrupt_reason, row.finished_at) == ("running", "", None)
