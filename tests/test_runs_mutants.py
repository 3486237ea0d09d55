"""The run state machine (the package ``django_llmchat/runs/``) one transition at a time: the rows
each transition writes, the values it writes, what it refuses, and that the runs of other
chats are left as they were.

Written to kill the mutants ``make mutation`` found alive (docs/testing.md, "Mutation
testing"): each test names in its docstring the behaviour it pins. Time is frozen where a
lease or a retry time is compared (``clock``), never waited for.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_llmchat import runs
from django_llmchat.errors import ArgumentError, ChatBusyError, RunLostError
from django_llmchat.events import RunFinished
from django_llmchat.models import Attachment, Chat, Message, Run, ToolCall
from django_llmchat.models.message import QUEUED_POSITION
from django_llmchat.runs import admission, base, claims
from django_llmchat.runs import execution as runs_execution
from tests.factories import taken_run

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = 30.0
MAX_ATTEMPTS = 3
SEND = runs.send  # the real one (the tests record what is sent instead)


@pytest.fixture
def sent(monkeypatch):
    """The tasks the module sends (``runs.base.send``), recorded instead of run."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(base, "send", lambda chat_id, run_id, **kw: calls.append((chat_id, run_id)))
    return calls


@pytest.fixture
def chat(fake_llm, monkeypatch, sent):
    fake_llm.configure(
        "openai",
        "gpt-4.1-mini",
        RUN_LEASE=LEASE,
        RUN_MAX_ATTEMPTS=MAX_ATTEMPTS,
        TASKS_EAGER_WITHOUT_BROKER="inline",
        MAX_RETRIES=0,
        TASK_RETRY_MAX_WAIT=0.0,
    )
    # no lease thread (on PostgreSQL it would renew leases while a test compares them);
    # tests of the thread itself are below and do not use this fixture
    monkeypatch.setattr(runs_execution, "_private_database", lambda: True)
    monkeypatch.setattr(claims, "_resumes_sent", {})
    return Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")


class Clock:
    """``timezone.now()`` standing still until moved."""

    def __init__(self) -> None:
        self.now = timezone.now()

    def __call__(self):
        return self.now

    def move(self, **delta) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock(monkeypatch):
    found = Clock()
    monkeypatch.setattr(timezone, "now", found)
    return found


# -- the other chats' runs, which no transition of this chat may touch ----------------------
def _snapshot(chats):
    return {
        "chats": list(
            Chat.objects.filter(pk__in=chats).order_by("pk").values("status", "active_run_id")
        ),
        "runs": list(Run.objects.filter(chat__in=chats).order_by("pk").values()),
        "calls": list(ToolCall.objects.filter(chat__in=chats).order_by("pk").values()),
        "messages": list(
            Message.objects.filter(chat__in=chats).order_by("pk").values("pk", "position")
        ),
    }


@pytest.fixture(autouse=True)
def bystanders(transactional_db):
    """Other chats with a run in each unfinished state (running with attempts 1 to 3, a
    queued run, one queued behind a running one, one waiting for a decision on a call):
    after each test they are exactly as before."""
    now = timezone.now()
    chats = []
    for attempt in (1, 2, 3):
        other = Chat.objects.create()
        prompt = other.add_message(role="user", content=f"bystander {attempt}")
        taken_run(other, prompt, lease=600, attempt=attempt, worker="bystander:1")
        chats.append(other.pk)
    queued = Chat.objects.create()
    Run.objects.create(chat=queued, prompt=queued.add_message(content="queued bystander"))
    Chat.objects.filter(pk=queued.pk).update(status="queued")
    behind = Chat.objects.create()
    taken_run(behind, lease=600, attempt=1)
    Run.objects.create(chat=behind, lease_expires_at=now + timedelta(seconds=600), worker="b:2")
    waiting = Chat.objects.create()
    run = Run.objects.create(chat=waiting, status="awaiting_approval", attempt=1)
    message = waiting.add_message(role="assistant", content="", run=run)
    ToolCall.objects.create(chat=waiting, message=message, call_id="b1", name="pay")
    Chat.objects.filter(pk=waiting.pk).update(status="awaiting_approval", active_run=run)
    chats += [queued.pk, behind.pk, waiting.pk]
    before = _snapshot(chats)
    yield chats
    assert _snapshot(chats) == before, "a transition of one chat changed another chat's runs"


def prompt_of(chat, text="Q"):
    return Message(chat=chat, role="user", content=text)


def fresh(run):
    return Run.objects.get(pk=run.pk)


def chat_row(chat):
    return Chat.objects.values("status", "active_run_id").get(pk=chat.pk)


def waiting_call(chat, run, call_id="c1"):
    """A tool call of ``run`` waiting for a decision."""
    message = chat.add_message(role="assistant", content="", run=run)
    return ToolCall.objects.create(chat=chat, message=message, call_id=call_id, name="pay")


def awaiting(chat, *call_ids):
    run = Run.objects.create(chat=chat, status="awaiting_approval", attempt=1, steps=1)
    Chat.objects.filter(pk=chat.pk).update(status="awaiting_approval", active_run=run)
    return run, [waiting_call(chat, run, c) for c in call_ids]


# -- enqueue ------------------------------------------------------------------------------------
def test_enqueue_refuses_an_unsaved_or_deleted_chat(chat):
    """A chat without a primary key, or one deleted meanwhile, gets ArgumentError and no
    row is stored."""
    with pytest.raises(ArgumentError, match="save the chat before running it"):
        runs.enqueue(Chat(), prompt_of(chat))
    gone = Chat.objects.create()
    Chat.objects.filter(pk=gone.pk).delete()
    with pytest.raises(ArgumentError, match=f"chat {gone.pk} does not exist"):
        runs.enqueue(gone, prompt_of(gone), start=True)
    assert not Run.objects.filter(chat__in=[chat.pk, gone.pk]).exists()
    assert not Message.objects.filter(chat__in=[chat.pk, gone.pk]).exists()


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
    ChatBusyError and stores nothing; without ``wait`` the prompt is queued."""
    awaiting(chat, "c1")
    with pytest.raises(ChatBusyError, match="approve or deny them"):
        runs.enqueue(chat, prompt_of(chat, "blocked"), wait=True)
    assert not Message.objects.filter(chat=chat, content="blocked").exists()
    run, _ = runs.enqueue(chat, prompt_of(chat, "later"), start=True)
    assert fresh(run).status == "queued" and chat.status == "awaiting_approval"
    assert chat_row(chat)["status"] == "awaiting_approval"


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


# -- claim ----------------------------------------------------------------------------------------
def test_claim_of_no_chat_or_no_unfinished_run_is_nothing(chat):
    """No chat row, or no unfinished run: NOTHING."""
    assert runs.claim(10**9).state == runs.NOTHING
    Run.objects.create(chat=chat, status="succeeded")
    found = runs.claim(chat.pk)
    assert found.state == runs.NOTHING and found.execution is None


def test_claim_starts_the_oldest_queued_run(chat, clock):
    """The oldest queued run is started: running, attempt 1, the given worker and task id
    (cut to 255), a fresh lease, started now, cancel request cleared; the chat is running
    it; the execution carries the new values."""
    first, _ = runs.enqueue(chat, prompt_of(chat, "1"))
    second, _ = runs.enqueue(chat, prompt_of(chat, "2"))
    Run.objects.filter(pk=first.pk).update(cancel_requested=True, interrupt_reason="old")
    found = runs.claim(chat.pk, worker="w:1", task_id="x" * 300)
    execution = found.execution
    assert execution.pk == first.pk and execution.attempt == 1 and execution.worker == "w:1"
    row = fresh(first)
    assert (row.status, row.attempt, row.worker, row.task_id) == ("running", 1, "w:1", "x" * 255)
    assert row.lease_expires_at == clock.now + timedelta(seconds=LEASE)
    assert row.started_at == clock.now and row.cancel_requested is False
    assert chat_row(chat) == {"status": "running", "active_run_id": first.pk}
    assert (execution.run.status, execution.run.worker, execution.run.attempt) == (
        "running",
        "w:1",
        1,
    )
    assert execution.run.started_at == clock.now and execution.run.task_id == "x" * 255
    assert fresh(second).status == "queued"


def test_claim_without_a_task_id_keeps_the_runs_own(chat):
    """A claim without ``task_id`` keeps the task id the run was queued with; the
    default worker is this process."""
    run, _ = runs.enqueue(chat, prompt_of(chat), task_id="queued-task")
    runs.claim(chat.pk)
    row = fresh(run)
    assert row.task_id == "queued-task" and row.worker == runs.worker_name()


def test_claim_moves_a_queued_prompt_into_place_when_its_run_starts(chat):
    """A prompt queued behind a working run reads after everything once its run starts:
    after the messages stored meanwhile, before the queued prompts behind it."""
    ahead = taken_run(chat, lease=60)
    mine, _ = runs.enqueue(chat, prompt_of(chat, "mine"))
    later, _ = runs.enqueue(chat, prompt_of(chat, "later"))
    answer = chat.add_message(role="assistant", content="answer of the run ahead")
    runs.Execution(ahead, worker="elsewhere:1").finish("succeeded")
    assert runs.claim(chat.pk).execution.pk == mine.pk
    position = Message.objects.get(pk=mine.prompt_id).position
    assert answer.position < position < QUEUED_POSITION
    assert Message.objects.get(pk=later.prompt_id).position >= QUEUED_POSITION
    assert [m.content for m in chat.transcript()] == [
        "answer of the run ahead",
        "mine",
        "later",
    ]


def test_claim_takes_over_a_run_whose_lease_ran_out(chat, clock):
    """A running run whose lease ran out is taken over: attempt + 1, the new worker, a
    new lease; its start time, steps, prompt position and cancel request stay."""
    started = clock.now - timedelta(minutes=5)
    prompt = chat.add_message(role="user", content="Q")
    dead = taken_run(chat, prompt, lease=-1, attempt=1, steps=2, cancel_requested=True)
    Run.objects.filter(pk=dead.pk).update(started_at=started)
    position = Message.objects.get(pk=prompt.pk).position
    execution = runs.claim(chat.pk, worker="w:2").execution
    assert execution.pk == dead.pk and execution.attempt == 2
    row = fresh(dead)
    assert (row.status, row.attempt, row.worker, row.steps) == ("running", 2, "w:2", 2)
    assert row.started_at == started and row.cancel_requested is True
    assert row.lease_expires_at == clock.now + timedelta(seconds=LEASE)
    assert Message.objects.get(pk=prompt.pk).position == position
    assert chat_row(chat) == {"status": "running", "active_run_id": dead.pk}


def test_claim_of_a_run_with_no_lease_takes_it_over(chat):
    """A running run with no lease at all (it never had one) is taken over too."""
    run = taken_run(chat, lease=60)
    Run.objects.filter(pk=run.pk).update(lease_expires_at=None)
    assert runs.claim(chat.pk, worker="w:2").execution.attempt == 2


def test_claim_leaves_a_live_run_alone_and_says_when_its_lease_ends(chat, clock):
    """A running run with a live lease: BUSY, with the seconds until the lease ends
    (below one second too)."""
    run = taken_run(chat, lease=60)
    for seconds in (0.5, 90.0):
        Run.objects.filter(pk=run.pk).update(
            lease_expires_at=clock.now + timedelta(seconds=seconds)
        )
        found = runs.claim(chat.pk, worker="w:2")
        assert (found.state, found.retry_in, found.execution) == (runs.BUSY, seconds, None)
    row = fresh(run)
    assert (row.attempt, row.worker) == (1, "elsewhere:1")


def test_claim_leaves_a_queued_run_to_the_caller_waiting_for_it(chat, clock):
    """A queued run with a lease is its waiting caller's: anyone else gets BUSY (with its
    lease's end), the caller itself (``run_id``) takes it."""
    run, _ = runs.enqueue(chat, prompt_of(chat), wait=True)
    found = runs.claim(chat.pk, worker="other:2")
    assert (found.state, found.retry_in) == (runs.BUSY, LEASE)
    assert fresh(run).status == "queued"
    assert runs.claim(chat.pk, run_id=run.pk).execution.pk == run.pk


def test_claim_when_the_run_waits_for_a_decision_is_paused(chat):
    """A run waiting for tool-call decisions: PAUSED, for a task and for a waiting
    caller alike."""
    run, _ = awaiting(chat, "c1")
    assert runs.claim(chat.pk).state == runs.PAUSED
    assert runs.claim(chat.pk, run_id=run.pk).state == runs.PAUSED
    mine, _ = runs.enqueue(chat, prompt_of(chat))
    assert runs.claim(chat.pk, run_id=mine.pk, waiting=True).state == runs.PAUSED
    assert runs.claim(chat.pk, run_id=mine.pk).state == runs.PAUSED
    assert fresh(run).status == "awaiting_approval"


def test_a_run_lost_max_attempts_times_ends_failed_and_the_next_one_starts(chat, clock):
    """A run whose worker was lost on its RUN_MAX_ATTEMPTS-th attempt ends failed
    (``worker_lost``, a message saying how often, finished now, no lease), its prompt in
    place; the next queued run starts in the same claim. One attempt fewer is taken
    over instead."""
    prompt = chat.add_message(role="user", content="Q")
    dead = taken_run(chat, prompt, lease=-1, attempt=MAX_ATTEMPTS - 1)
    assert runs.claim(chat.pk).execution.attempt == MAX_ATTEMPTS
    Run.objects.filter(pk=dead.pk).update(lease_expires_at=clock.now - timedelta(seconds=1))
    nxt, _ = runs.enqueue(chat, prompt_of(chat, "next"))
    Message.objects.filter(pk=prompt.pk).update(position=QUEUED_POSITION + 5)
    found = runs.claim(chat.pk, worker="w:9")
    row = fresh(dead)
    assert (row.status, row.error_type, row.lease_expires_at) == ("failed", "worker_lost", None)
    assert row.error == (
        f"The run stopped {MAX_ATTEMPTS} times before it could finish (its worker was lost "
        "each time); it was not tried again."
    )
    assert row.finished_at == clock.now and row.attempt == MAX_ATTEMPTS
    assert Message.objects.get(pk=prompt.pk).position < QUEUED_POSITION
    assert found.execution.pk == nxt.pk and found.execution.worker == "w:9"
    assert chat_row(chat) == {"status": "running", "active_run_id": nxt.pk}


def test_a_run_lost_max_attempts_times_alone_leaves_the_chat_idle(chat):
    """Given up with nothing behind it: NOTHING, and the chat is idle and free."""
    dead = taken_run(chat, lease=-1, attempt=MAX_ATTEMPTS)
    assert runs.claim(chat.pk).state == runs.NOTHING
    assert fresh(dead).status == "failed"
    assert chat_row(chat) == {"status": "idle", "active_run_id": None}


def test_a_task_for_a_later_run_answers_the_one_ahead_first(chat):
    """A task for a run behind another (``run_id``, not waiting) takes the run ahead: runs
    are answered in order."""
    first, _ = runs.enqueue(chat, prompt_of(chat, "1"))
    second, _ = runs.enqueue(chat, prompt_of(chat, "2"))
    assert runs.claim(chat.pk, run_id=second.pk).execution.pk == first.pk


def test_a_caller_waiting_behind_a_live_run_renews_its_own_lease(chat, clock):
    """A waiting caller (``run_id``, ``waiting=True``) behind a working run gets BUSY and
    its queued run's lease is renewed (its worker set); the run ahead is left alone."""
    ahead = taken_run(chat, lease=60)
    mine, _ = runs.enqueue(chat, prompt_of(chat), wait=True)
    clock.move(seconds=10)
    found = runs.claim(chat.pk, run_id=mine.pk, waiting=True, worker="me:1")
    assert found.state == runs.BUSY and found.execution is None
    row = fresh(mine)
    assert (row.status, row.worker) == ("queued", "me:1")
    assert row.lease_expires_at == clock.now + timedelta(seconds=LEASE)
    assert fresh(ahead).worker == "elsewhere:1"


def test_a_caller_waiting_for_a_finished_or_missing_run_gets_nothing(chat):
    """``waiting=True`` for a run that ended meanwhile (or never existed): NOTHING."""
    taken_run(chat, lease=60)
    done = Run.objects.create(chat=chat, status="cancelled")
    assert runs.claim(chat.pk, run_id=done.pk, waiting=True).state == runs.NOTHING
    assert runs.claim(chat.pk, run_id=10**9, waiting=True).state == runs.NOTHING


def test_a_waiting_caller_does_not_renew_a_run_that_is_not_queued(chat, clock):
    """Only a queued run of the waiting caller gets its lease renewed."""
    taken_run(chat, lease=60)
    mine = Run.objects.create(chat=chat, status="awaiting_approval", lease_expires_at=None)
    # a run behind the head cannot wait for a decision, but the renewal must not care
    runs.claim(chat.pk, run_id=mine.pk, waiting=True, worker="me:1")
    assert (fresh(mine).worker, fresh(mine).lease_expires_at) == ("", None)


def test_a_waiting_caller_behind_a_dead_run_sends_its_task_once_a_lease(chat, sent):
    """Behind a run whose process died, a waiting caller sends that run's task (after the
    commit), once per lease period however often it looks; not for a live run."""
    ahead = taken_run(chat, lease=60)
    mine, _ = runs.enqueue(chat, prompt_of(chat), wait=True)
    runs.claim(chat.pk, run_id=mine.pk, waiting=True)
    assert sent == []
    Run.objects.filter(pk=ahead.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    with transaction.atomic():
        runs.claim(chat.pk, run_id=mine.pk, waiting=True)
        assert sent == []  # on commit
    assert sent == [(chat.pk, ahead.pk)]
    runs.claim(chat.pk, run_id=mine.pk, waiting=True)
    assert sent == [(chat.pk, ahead.pk)]
    claims._resumes_sent[ahead.pk] -= LEASE + 1  # a lease period later
    runs.claim(chat.pk, run_id=mine.pk, waiting=True)
    assert sent == [(chat.pk, ahead.pk)] * 2
    Run.objects.filter(pk=ahead.pk).update(lease_expires_at=None)  # no lease at all: dead too
    claims._resumes_sent.clear()
    runs.claim(chat.pk, run_id=mine.pk, waiting=True)
    assert sent == [(chat.pk, ahead.pk)] * 3


def test_the_resume_memory_is_bounded(chat, sent, monkeypatch):
    """The runs whose task was sent are remembered up to 10 000 at a time: past that the
    memory is cleared before the next one is added."""
    dead = taken_run(chat, lease=-1)
    mine, _ = runs.enqueue(chat, prompt_of(chat), wait=True)
    monkeypatch.setattr(claims, "_resumes_sent", {-n: 0.0 for n in range(1, 10_001)})
    runs.claim(chat.pk, run_id=mine.pk, waiting=True)
    assert len(claims._resumes_sent) == 10_001 and dead.pk in claims._resumes_sent
    monkeypatch.setattr(claims, "_resumes_sent", {-n: 0.0 for n in range(1, 10_002)})
    runs.claim(chat.pk, run_id=mine.pk, waiting=True)
    assert claims._resumes_sent.keys() == {dead.pk}


# -- wait_for_turn --------------------------------------------------------------------------------
def test_wait_for_turn_claims_the_callers_run_when_it_is_first(chat):
    """A waiting caller whose run is next gets its execution, with its worker."""
    run, _ = runs.enqueue(chat, prompt_of(chat), wait=True)
    execution = runs.wait_for_turn(run)
    assert execution.pk == run.pk and execution.worker == runs.worker_name()
    assert fresh(run).worker == runs.worker_name()


def test_wait_for_turn_uses_the_worker_its_run_was_queued_by(chat):
    """The worker written when the run was queued is the one claiming it."""
    run, _ = runs.enqueue(chat, prompt_of(chat), wait=True)
    Run.objects.filter(pk=run.pk).update(worker="queued-by:7")
    run.worker = "queued-by:7"
    assert runs.wait_for_turn(run).worker == "queued-by:7"
    assert fresh(run).worker == "queued-by:7"


def test_wait_for_turn_of_a_run_finished_meanwhile_raises_run_lost(chat):
    """A run ended before its turn came: RunLostError."""
    run, _ = runs.enqueue(chat, prompt_of(chat), wait=True)
    Run.objects.filter(pk=run.pk).update(status="cancelled")
    with pytest.raises(RunLostError, match=f"run {run.pk} was finished before its turn came"):
        runs.wait_for_turn(run)


def test_wait_for_turn_behind_a_decision_cancels_the_waiting_run(chat, sent):
    """Behind a run waiting for a decision the caller's run is cancelled (``chat_busy``,
    finished, no lease, its prompt in place) and ChatBusyError raised; nothing is sent."""
    awaiting(chat, "c1")
    run, _ = runs.enqueue(chat, prompt_of(chat, "mine"))
    with pytest.raises(ChatBusyError, match=f"chat {chat.pk} is waiting for a decision"):
        runs.wait_for_turn(run)
    row = fresh(run)
    assert (row.status, row.error_type, row.interrupt_reason, row.lease_expires_at) == (
        "cancelled",
        "chat_busy",
        "",
        None,
    )
    assert row.finished_at is not None
    assert Message.objects.get(pk=run.prompt_id).position < QUEUED_POSITION
    assert chat_row(chat)["status"] == "awaiting_approval" and sent == []


def test_cancelling_a_queued_run_sends_the_task_of_the_next_one(chat, sent):
    """A queued run cancelled while it was the chat's next: the chat moves to the run
    after it, whose task is sent when that run waits for a worker (no lease)."""
    first, _ = runs.enqueue(chat, prompt_of(chat, "1"))
    second, _ = runs.enqueue(chat, prompt_of(chat, "2"))
    assert runs.cancel_queued(chat.pk, first.pk, reason="r" * 300) is True
    row = fresh(first)
    assert (row.status, row.interrupt_reason) == ("cancelled", "r" * 255)
    assert sent == [(chat.pk, second.pk)]
    assert chat_row(chat)["status"] == "queued"
    assert runs.cancel_queued(chat.pk, first.pk) is False  # not queued any more
    assert sent == [(chat.pk, second.pk)]


def test_cancelling_the_last_queued_run_leaves_the_chat_idle(chat, sent):
    run, _ = runs.enqueue(chat, prompt_of(chat))
    assert runs.cancel_queued(chat.pk, run.pk, error_type="chat_busy") is True
    assert chat_row(chat) == {"status": "idle", "active_run_id": None} and sent == []
    assert fresh(run).error_type == "chat_busy"


def test_cancelling_a_queued_run_sends_nothing_for_a_waited_run(chat, sent):
    """The run after it has a caller waiting in-process (a lease): no task is sent."""
    first, _ = runs.enqueue(chat, prompt_of(chat, "1"))
    runs.enqueue(chat, prompt_of(chat, "2"), wait=True)
    runs.cancel_queued(chat.pk, first.pk)
    assert sent == []


# -- the execution: its fence ---------------------------------------------------------------------
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


# -- the execution: poll ------------------------------------------------------------------------
def test_poll_reads_the_run_at_most_every_quarter_second_unless_forced(chat, monkeypatch):
    """poll reads the row only when CANCEL_POLL_SECONDS passed since the last read (or
    when forced): a stop asked for meanwhile is seen at the next read."""
    ticks = [1000.0]
    clock = SimpleNamespace(monotonic=lambda: ticks[0], sleep=time.sleep)
    monkeypatch.setattr(runs_execution, "time", clock)
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    runs.interrupt(chat.pk, "why")
    execution.poll()  # just claimed: the first read is a poll interval away
    ticks[0] += runs.CANCEL_POLL_SECONDS / 2
    execution.poll()
    ticks[0] += runs.CANCEL_POLL_SECONDS / 2
    with pytest.raises(runs.CancelRequested) as stop:
        execution.poll()
    assert stop.value.reason == "why" and str(stop.value) == "why"
    execution.poll()  # read just now: the next read is a poll interval away
    with pytest.raises(runs.CancelRequested):
        execution.poll(force=True)


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


def test_finish_moves_a_prompt_still_queued_into_place(chat):
    """A run that ends while its prompt still reads as queued puts it in place."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    Message.objects.filter(pk=run.prompt_id).update(position=QUEUED_POSITION + 1)
    execution.finish("cancelled")
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


# -- interrupt ----------------------------------------------------------------------------------
def test_interrupting_a_running_run_asks_it_to_stop_once(chat):
    """A running run gets a stop request with the reason (cut to 255); a second request
    is refused (the first wins) and a run of another id is not touched."""
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    assert runs.interrupt(chat.pk, "r" * 300, run_id=run.pk + 1) is False
    assert runs.interrupt(chat.pk, "r" * 300) is True
    assert runs.interrupt(chat.pk, "second") is False
    row = fresh(run)
    assert (row.status, row.cancel_requested, row.interrupt_reason) == ("running", True, "r" * 255)
    assert chat_row(chat) == {"status": "running", "active_run_id": run.pk}


def test_interrupting_a_queued_run_ends_it_and_frees_the_chat(chat, sent):
    """A queued run ends at once: ``interrupted`` with the reason (``cancelled`` for the
    reason "cancelled"), finished, no lease, its prompt in place; the chat moves on and
    the next run's task is sent after commit."""
    first, _ = runs.enqueue(chat, prompt_of(chat, "1"))
    Run.objects.filter(pk=first.pk).update(lease_expires_at=timezone.now() + timedelta(hours=1))
    second, _ = runs.enqueue(chat, prompt_of(chat, "2"))
    with transaction.atomic():
        assert runs.interrupt(chat.pk, None, run_id=first.pk) is True
        assert sent == []
    row = fresh(first)
    assert (row.status, row.interrupt_reason, row.lease_expires_at) == ("interrupted", "", None)
    assert row.finished_at is not None
    assert sent == [(chat.pk, second.pk)]
    assert runs.interrupt(chat.pk, "cancelled") is True
    row = fresh(second)
    assert (row.status, row.interrupt_reason) == ("cancelled", "cancelled")
    assert chat_row(chat) == {"status": "idle", "active_run_id": None}
    assert runs.interrupt(chat.pk, "again") is False  # nothing left
    assert runs.interrupt(10**9) is False  # no such chat


def test_interrupting_a_queued_run_puts_its_prompt_in_place(chat):
    ahead = taken_run(chat, lease=60)
    mine, _ = runs.enqueue(chat, prompt_of(chat, "mine"))
    runs.Execution(ahead, worker="elsewhere:1").finish("succeeded")
    assert runs.interrupt(chat.pk, "no") is True
    assert Message.objects.get(pk=mine.prompt_id).position < QUEUED_POSITION
    assert fresh(mine).status == "interrupted"


def test_interrupting_a_run_waiting_for_decisions_answers_its_calls(chat):
    """A run waiting for decisions ends now and each waiting call of the chat gets an
    error result ("cancelled") belonging to that run; calls already answered keep their
    results."""
    run, calls = awaiting(chat, "c1", "c2")
    done = waiting_call(chat, run, "c0")
    Message.objects.create(chat=chat, role="tool", content="earlier", parent_tool_call=done)
    assert runs.interrupt(chat.pk, "stop") is True
    assert fresh(run).status == "interrupted"
    results = Message.objects.filter(chat=chat, role="tool").exclude(content="earlier")
    assert sorted(results.values_list("parent_tool_call__call_id", flat=True)) == ["c1", "c2"]
    error = {"type": "cancelled", "message": "The run was stopped before this call was decided."}
    for result in results:
        assert result.run_id == run.pk
        assert json.loads(result.content) == {"error": error} and result.raw == {"error": error}
    assert Message.objects.filter(parent_tool_call=done).count() == 1
    assert chat_row(chat) == {"status": "idle", "active_run_id": None}


# -- decide -------------------------------------------------------------------------------------
def test_decide_records_each_decision_once_and_queues_the_run_after_the_last(chat):
    """Each decision is recorded once; the run stays waiting until the last call of the
    chat is decided, then it is queued again (the chat too) and returned."""
    run, (first, second) = awaiting(chat, "c1", "c2")
    with pytest.raises(ArgumentError, match="approval must be 'approved' or 'denied', got 'yes'"):
        runs.decide(chat.pk, first, "yes")
    assert runs.decide(chat.pk, first, "approved") is None
    assert fresh(run).status == "awaiting_approval"
    with pytest.raises(runs.AlreadyDecided, match="tool call 'c1' has already been answered"):
        runs.decide(chat.pk, first, "denied")
    assert ToolCall.objects.get(pk=first.pk).approval == "approved"
    assert ToolCall.objects.get(pk=second.pk).approval == ""
    queued = runs.decide(chat.pk, second, "denied")
    assert queued.pk == run.pk and queued.status == "queued"
    assert fresh(run).status == "queued"
    assert chat_row(chat)["status"] == "queued"
    assert ToolCall.objects.get(pk=second.pk).approval == "denied"


def test_a_call_already_answered_cannot_be_decided(chat):
    run, (call,) = awaiting(chat, "c1")
    Message.objects.create(chat=chat, role="tool", content="done", parent_tool_call=call)
    with pytest.raises(runs.AlreadyDecided):
        runs.decide(chat.pk, call, "approved")
    assert ToolCall.objects.get(pk=call.pk).approval == ""


def test_deciding_when_no_run_waits_is_refused_and_records_nothing(chat):
    """With no run waiting for a decision, ChatBusyError, and the decision is not
    recorded."""
    run = taken_run(chat, lease=60)
    call = waiting_call(chat, run)
    with pytest.raises(ChatBusyError, match=f"chat {chat.pk} has no run waiting for a decision"):
        runs.decide(chat.pk, call, "approved")
    assert ToolCall.objects.get(pk=call.pk).approval == ""
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    with pytest.raises(ChatBusyError):
        runs.decide(chat.pk, call, "approved")
    assert ToolCall.objects.get(pk=call.pk).approval == ""


# -- recovery -------------------------------------------------------------------------------------
def test_stale_runs_are_the_heads_nobody_works_on(chat, settings):
    """stale_runs: per chat, its oldest unfinished run when it is running or waited for
    with a lease run out, or queued longer than RECOVER_QUEUED_AFTER with no run of the
    chat working; never a run behind another, never a live one."""
    now = timezone.now()
    dead = taken_run(chat, lease=-1)
    Run.objects.create(chat=chat, lease_expires_at=now - timedelta(seconds=5))  # behind it
    waited = Chat.objects.create()
    lapsed = Run.objects.create(chat=waited, lease_expires_at=now - timedelta(seconds=5))
    lost = Chat.objects.create()
    forgotten = Run.objects.create(chat=lost)
    Run.objects.filter(pk=forgotten.pk).update(created_at=now - timedelta(seconds=301))
    young = Chat.objects.create()
    Run.objects.create(chat=young)
    Run.objects.filter(chat=young).update(created_at=now - timedelta(seconds=299))
    held = Chat.objects.create()
    old = Run.objects.create(chat=held)
    Run.objects.filter(pk=old.pk).update(created_at=now - timedelta(seconds=301))
    Chat.objects.filter(pk=held.pk).update(active_run=old)
    found = runs.stale_runs(now)
    assert sorted(r.pk for r in found) == sorted([dead.pk, lapsed.pk, forgotten.pk])
    assert {r.pk for r in runs.stale_runs()} == {dead.pk, lapsed.pk, forgotten.pk}
    later = runs.stale_runs(now + timedelta(seconds=1000))
    assert {r.pk for r in later} >= {dead.pk, lapsed.pk, forgotten.pk}


def test_recover_sends_a_task_for_each_stale_run(chat, sent):
    """recover: each stale run's task sent (or given to ``dispatch``); returns them."""
    dead = taken_run(chat, lease=-1)
    assert [r.pk for r in runs.recover()] == [dead.pk]
    assert sent == [(chat.pk, dead.pk)]
    seen = []
    assert [r.pk for r in runs.recover(lambda c, r: seen.append((c, r)))] == [dead.pk]
    assert seen == [(chat.pk, dead.pk)] and sent == [(chat.pk, dead.pk)]


def test_send_runs_the_task_for_the_run(chat, fake_llm):
    """send: the task answering the run (here in-process, no broker)."""
    fake_llm.script("Sent.")
    run, _ = runs.enqueue(chat, prompt_of(chat))
    SEND(chat.pk, run.pk, task_id="abc")
    assert fresh(run).status == "succeeded"
    assert chat.messages.filter(role="assistant").get().content == "Sent."


# -- the lease thread ---------------------------------------------------------------------------
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


def test_the_worker_name_is_host_and_pid():
    import os
    import socket

    assert runs.worker_name() == f"{socket.gethostname()}:{os.getpid()}"[:255]


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


# -- the survivors of the claim, the fence and admission (tests/mutation) ---------------------
@pytest.fixture
def told(monkeypatch):
    """What the module tells a chat's followers (``_tell_followers``), recorded."""
    calls: list[tuple] = []
    monkeypatch.setattr(base, "_tell_followers", lambda *args: calls.append(args))
    return calls


def test_giving_up_a_run_tells_its_followers_logs_and_ends_its_pending_attempts(chat, told, caplog):
    """A run given up after RUN_MAX_ATTEMPTS lost workers: its attempts still pending end
    ``lost``, its followers are told it failed (``worker_lost``), its prompt reads after
    the chat's last message, and an error is logged with the run, the chat and the count."""
    from django_llmchat.models import Usage

    prompt = chat.add_message(role="user", content="Q")
    dead = taken_run(chat, prompt, lease=-1, attempt=MAX_ATTEMPTS)
    pending = Usage.objects.create(chat=chat, run=dead, status="pending")
    last = chat.add_message(role="assistant", content="A")
    far = last.position + 10**12  # later than the clock's position
    Message.objects.filter(pk=last.pk).update(position=far)
    Message.objects.filter(pk=prompt.pk).update(position=QUEUED_POSITION + 5)
    with caplog.at_level("ERROR", logger=runs.logger.name):
        assert runs.claim(chat.pk).state == runs.NOTHING
    assert told == [(chat.pk, dead.pk, "failed", "worker_lost")]
    assert Usage.objects.get(pk=pending.pk).status == "lost"
    assert Message.objects.get(pk=prompt.pk).position == far + 1
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"run {dead.pk} of chat {chat.pk} failed: lost its worker {MAX_ATTEMPTS} times"
    ]


def test_a_dead_run_is_resumed_again_a_whole_lease_after_the_last_time(chat, sent, monkeypatch):
    """The task of a dead run ahead is sent again once a whole lease period has passed
    since the last time, not only after more."""
    monkeypatch.setattr(claims, "time", SimpleNamespace(monotonic=lambda: 5_000.0))
    ahead = taken_run(chat, lease=-1)
    mine, _ = runs.enqueue(chat, prompt_of(chat), wait=True)
    claims._resumes_sent[ahead.pk] = 5_000.0 - LEASE
    runs.claim(chat.pk, run_id=mine.pk, waiting=True)
    assert sent == [(chat.pk, ahead.pk)]


def test_wait_for_turn_behind_a_decision_tells_the_followers_and_says_what_to_do(chat, told):
    """The waiting run cancelled behind a decision is told to the chat's followers
    (``chat_busy``), and the error says how to go on."""
    awaiting(chat, "c1")
    run, _ = runs.enqueue(chat, prompt_of(chat, "mine"))
    message = (
        f"chat {chat.pk} is waiting for a decision on its tool calls: approve or deny them "
        "(or cancel the run) first"
    )
    with pytest.raises(ChatBusyError) as raised:
        runs.wait_for_turn(run)
    assert str(raised.value) == message
    assert told == [(chat.pk, run.pk, "cancelled", "chat_busy")]


def test_a_decision_takes_the_chats_lock_and_calls_the_admission_callback(chat):
    """Recording a decision writes the chat's row first (its lock: ``updated_at``), and
    the ``on_admit`` callback gets the run waiting for it."""
    run, (call,) = awaiting(chat, "c1")
    long_ago = timezone.now() - timedelta(days=1)
    Chat.objects.filter(pk=chat.pk).update(updated_at=long_ago)
    seen = []
    with runs.on_admit(lambda admitted: seen.append(admitted.pk)):
        assert runs.decide(chat.pk, call, "approved").pk == run.pk
    assert seen == [run.pk]
    assert Chat.objects.get(pk=chat.pk).updated_at > long_ago


def test_the_last_decision_queues_the_run_whatever_calls_ran_without_one(chat):
    """Calls that needed no decision (their result stored, no approval) do not keep the
    run waiting: the last decision queues it."""
    run, (asked, ran) = awaiting(chat, "c1", "c2")
    Message.objects.create(chat=chat, role="tool", content="done", parent_tool_call=ran)
    assert runs.decide(chat.pk, asked, "approved").pk == run.pk
    assert fresh(run).status == "queued"


def test_deciding_when_no_run_waits_says_to_wait_for_the_pause(chat):
    run = taken_run(chat, lease=60)
    call = waiting_call(chat, run)
    with pytest.raises(ChatBusyError) as raised:
        runs.decide(chat.pk, call, "approved")
    assert str(raised.value) == (
        f"chat {chat.pk} has no run waiting for a decision (it is running: wait for it to pause)"
    )


def test_a_decision_refused_by_a_limit_sends_the_signal_for_the_chat(chat, fake_llm):
    """A last decision whose run would pass a limit: BudgetExceededError, the decision not
    recorded, and the ``budget_exceeded`` signal sent (after the rollback) for the chat."""
    from django.contrib.auth import get_user_model

    from django_llmchat.errors import BudgetExceededError
    from django_llmchat.signals import budget_exceeded

    fake_llm.configure("openai", "gpt-4.1-mini", LIMITS={"default": {"concurrent_runs": 1}})
    user = get_user_model().objects.create_user("decider")
    Chat.objects.filter(pk=chat.pk).update(user=user)
    run, (call,) = awaiting(chat, "c1")
    taken_run(Chat.objects.create(user=user), lease=600)  # the user's one run
    seen = []

    def receiver(sender, **kwargs):
        seen.append((kwargs["chat"].pk, kwargs["limit"], ToolCall.objects.get(pk=call.pk).approval))

    budget_exceeded.connect(receiver)
    try:
        with pytest.raises(BudgetExceededError):
            runs.decide(chat.pk, call, "approved")
    finally:
        budget_exceeded.disconnect(receiver)
    assert seen == [(chat.pk, "concurrent_runs", "")]
    assert fresh(run).status == "awaiting_approval"


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


def test_a_take_over_is_logged_with_the_run_the_chat_the_old_worker_and_the_attempt(chat, caplog):
    dead = taken_run(chat, lease=-1, attempt=1, worker="gone:3")
    with caplog.at_level("WARNING", logger=runs.logger.name):
        assert runs.claim(chat.pk, worker="w:2").execution.attempt == 2
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"run {dead.pk} of chat {chat.pk}: its worker 'gone:3' stopped renewing the lease; "
        "resuming it from its last stored step (attempt 2)"
    ]


def _after_everything(chat, prompt):
    """The chat's last message placed after any clock reading, ``prompt`` queued: the
    place the prompt must move to is right after that message."""
    last = chat.add_message(role="assistant", content="A")
    far = last.position + 10**12
    Message.objects.filter(pk=last.pk).update(position=far)
    Message.objects.filter(pk=prompt.pk).update(position=QUEUED_POSITION + 5)
    return far + 1


def test_a_queued_run_starting_puts_its_prompt_right_after_the_chats_last_message(chat):
    prompt = chat.add_message(role="user", content="Q")
    run = Run.objects.create(chat=chat, prompt=prompt)
    place = _after_everything(chat, prompt)
    assert runs.claim(chat.pk).execution.pk == run.pk
    assert Message.objects.get(pk=prompt.pk).position == place


def test_a_run_ending_puts_its_queued_prompt_right_after_the_chats_last_message(chat):
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    place = _after_everything(chat, Message.objects.get(pk=run.prompt_id))
    assert execution.finish("cancelled")
    assert Message.objects.get(pk=run.prompt_id).position == place


def test_a_lease_ending_this_very_moment_is_over(chat, clock, sent):
    """A lease that ends at ``now`` has run out: a waiting caller behind its run sends the
    run's task, and a claim takes the run over."""
    ahead = taken_run(chat, lease=60)
    Run.objects.filter(pk=ahead.pk).update(lease_expires_at=clock.now)
    mine, _ = runs.enqueue(chat, prompt_of(chat), wait=True)
    assert runs.claim(chat.pk, run_id=mine.pk, waiting=True).state == runs.BUSY
    assert sent == [(chat.pk, ahead.pk)]
    assert runs.claim(chat.pk, worker="w:2").execution.pk == ahead.pk


def test_finish_without_a_reason_stores_none(chat):
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    execution.finish("succeeded")
    assert fresh(run).interrupt_reason == ""


# -- telling followers, recovery (tests/mutation) ------------------------------------------------
@pytest.fixture
def published(monkeypatch):
    """Events fanned out (``streams.publish``), recorded, with EVENTS_URL as if set."""
    events: list[tuple] = []
    monkeypatch.setattr(base.streams, "enabled", lambda: True)
    monkeypatch.setattr(base.streams, "publish", lambda chat_id, e: events.append((chat_id, e)))
    return events


def test_followers_are_told_a_run_ended_once_the_transaction_commits(chat, published, monkeypatch):
    """The chat's followers get ``run_finished`` with the run, its status and its error
    type (none when it has none), after the commit only; nothing without EVENTS_URL."""
    with transaction.atomic():
        runs._tell_followers(chat.pk, 7, "failed", "worker_lost")
        runs._tell_followers(chat.pk, 8, "cancelled")
        assert published == []
    assert [(c, type(e), e.run_id, e.status, e.error_type) for c, e in published] == [
        (chat.pk, RunFinished, "7", "failed", "worker_lost"),
        (chat.pk, RunFinished, "8", "cancelled", None),
    ]
    monkeypatch.setattr(base.streams, "enabled", lambda: False)
    runs._tell_followers(chat.pk, 9, "failed")
    assert len(published) == 2


def test_a_follower_that_cannot_be_told_is_logged(chat, monkeypatch, caplog):
    def down(chat_id, event):
        raise ConnectionError("redis is down")

    monkeypatch.setattr(base.streams, "enabled", lambda: True)
    monkeypatch.setattr(base.streams, "publish", down)
    with caplog.at_level("WARNING", logger=runs.logger.name):
        runs._tell_followers(chat.pk, 7, "failed")
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"could not tell chat {chat.pk}'s followers run 7 ended: redis is down"
    ]


def test_recovery_logs_each_run_it_sends(chat, sent, caplog):
    dead = taken_run(chat, lease=-1)
    with caplog.at_level("INFO", logger=runs.logger.name):
        assert [run.pk for run in runs.recover()] == [dead.pk]
    assert f"recovering run {dead.pk} of chat {chat.pk} (running)" in [
        r.getMessage() for r in caplog.records
    ]


def test_send_passes_the_task_id_on(chat, monkeypatch):
    calls = []
    task = SimpleNamespace(apply_async=lambda *args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.setattr(base, "current_app", SimpleNamespace(tasks={runs.COMPLETE_CHAT: task}))
    SEND(chat.pk, 5, task_id="abc")
    SEND(chat.pk, 6)
    assert calls == [
        (((chat.pk,), {"run_id": 5}), {"task_id": "abc"}),
        (((chat.pk,), {"run_id": 6}), {"task_id": None}),
    ]


def test_a_take_over_ends_the_lost_attempts_of_that_run_only(chat):
    """The attempts still pending of a run taken over end ``lost``, with why; its ended
    attempts and other runs' pending ones stay as they are."""
    from django_llmchat.models import Usage

    dead = taken_run(chat, lease=-1)
    pending = Usage.objects.create(chat=chat, run=dead, status="pending")
    ended = Usage.objects.create(chat=chat, run=dead, status="succeeded")
    other = Usage.objects.create(chat=chat, run=Run.objects.create(chat=chat), status="pending")
    runs.claim(chat.pk)
    row = Usage.objects.get(pk=pending.pk)
    assert (row.status, row.error) == (
        "lost",
        "The process making this attempt stopped before the attempt ended.",
    )
    assert Usage.objects.get(pk=ended.pk).status == "succeeded"
    assert Usage.objects.get(pk=other.pk).status == "pending"


def test_stopping_a_queued_run_tells_the_followers(chat, told, sent):
    """A queued run cancelled by its caller (no error type given: none) or interrupted:
    the followers are told, with the run and its status."""
    first, _ = runs.enqueue(chat, prompt_of(chat, "1"))
    second, _ = runs.enqueue(chat, prompt_of(chat, "2"))
    assert runs.cancel_queued(chat.pk, second.pk)
    assert fresh(second).error_type == ""
    assert runs.interrupt(chat.pk, "cancelled")
    assert told == [(chat.pk, second.pk, "cancelled", ""), (chat.pk, first.pk, "cancelled")]


def test_a_lost_execution_says_why(chat):
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    Run.objects.filter(pk=run.pk).update(attempt=9)
    with pytest.raises(RunLostError) as raised:
        execution.poll(force=True)
    assert str(raised.value) == (
        f"run {run.pk} is no longer this process's (attempt 1): another process took it "
        "over or it was finished"
    )


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
        runs.enqueue(Chat(provider="openai"), prompt_of(chat))
    assert str(raised.value) == (
        "save the chat before running it (Chat.objects.create(...) or chat.save())"
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
    from django_llmchat import limits

    locked = []
    monkeypatch.setattr(admission, "_lock_user", locked.append)
    admitted = []
    monkeypatch.setattr(limits, "admit", lambda c, signal: admitted.append(signal) or "verdict")
    user = django_user_model.objects.create_user("gated")
    settings.LLMCHAT = {**settings.LLMCHAT, "LIMITS": None}
    assert runs._admit(Chat(pk=chat.pk, user_id=user.pk)) is None
    settings.LLMCHAT = {**settings.LLMCHAT, "LIMITS": {"default": {"runs_per_hour": 5}}}
    assert runs._admit(Chat(pk=chat.pk, user_id=None)) is None
    assert locked == [] and admitted == []
    assert runs._admit(Chat(pk=chat.pk, user_id=user.pk)) == "verdict"
    assert locked == [user.pk] and admitted == [False]


def test_the_worker_name_inside_a_celery_task_is_the_workers_cut_to_the_column(monkeypatch):
    import os

    import celery

    def task_on(hostname):
        return SimpleNamespace(request=SimpleNamespace(hostname=hostname))

    monkeypatch.setattr(celery, "current_task", task_on("w1@box"))
    assert runs.worker_name() == f"w1@box:{os.getpid()}"
    monkeypatch.setattr(celery, "current_task", task_on("h" * 300))
    assert runs.worker_name() == "h" * 255


def test_a_prompt_moved_into_place_reads_after_its_chats_messages_only(chat, monkeypatch):
    """The moved prompt takes the clock's position, or the one right after the chat's
    last message when the clock is not past it (equal included); other chats' messages
    do not count."""
    prompt = chat.add_message(role="user", content="Q")
    last = chat.add_message(role="assistant", content="A")
    Message.objects.filter(pk=prompt.pk).update(position=QUEUED_POSITION + 5)
    monkeypatch.setattr(base, "clock_position", lambda: last.position)
    runs._move_prompt_into_place(chat.pk, prompt.pk)
    assert Message.objects.get(pk=prompt.pk).position == last.position + 1
    other = Chat.objects.create()
    far = other.add_message(role="user", content="elsewhere")
    Message.objects.filter(pk=far.pk).update(position=last.position + 10**12)
    Message.objects.filter(pk=prompt.pk).update(position=QUEUED_POSITION + 5)
    monkeypatch.setattr(base, "clock_position", lambda: last.position + 10)
    runs._move_prompt_into_place(chat.pk, prompt.pk)
    assert Message.objects.get(pk=prompt.pk).position == last.position + 10


def test_cancelling_or_interrupting_a_queued_run_locks_the_chat_and_places_its_prompt(chat, sent):
    """Ending a queued run takes the chat's lock (its ``updated_at`` written) and puts the
    run's prompt right after the chat's last message."""
    taken_run(chat, lease=60)
    for end in (
        lambda run: runs.cancel_queued(chat.pk, run.pk),
        lambda run: runs.interrupt(chat.pk, "stop", run_id=run.pk),
    ):
        Run.objects.filter(chat=chat, status="running").update(status="succeeded")
        run, _ = runs.enqueue(chat, prompt_of(chat))
        place = _after_everything(chat, Message.objects.get(pk=run.prompt_id))
        long_ago = timezone.now() - timedelta(days=1)
        Chat.objects.filter(pk=chat.pk).update(updated_at=long_ago)
        assert end(run)
        assert Message.objects.get(pk=run.prompt_id).position == place
        assert Chat.objects.get(pk=chat.pk).updated_at > long_ago


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


def test_a_run_waited_for_or_behind_a_live_one_is_not_stale(chat):
    """A queued run whose caller still waits (a live lease) is not stale however old; nor
    is a lapsed run queued behind a live one (the head is the chat's next run)."""
    now = timezone.now()
    waited = Run.objects.create(chat=chat, lease_expires_at=now + timedelta(seconds=60))
    Run.objects.filter(pk=waited.pk).update(created_at=now - timedelta(seconds=301))
    busy = Chat.objects.create()
    taken_run(busy, lease=60)
    Run.objects.create(chat=busy, lease_expires_at=now - timedelta(seconds=5))
    assert runs.stale_runs(now) == []


def test_lock_chat_and_each_transition_write_the_chats_row(chat):
    """``lock_chat`` (before a last step is stored) and each transition of an execution
    (finish, pause, requeue) take the chat's row lock first: its ``updated_at`` is
    written."""
    long_ago = timezone.now() - timedelta(days=1)
    for act in (
        lambda execution: execution.lock_chat(),
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


def test_a_take_over_and_a_give_up_send_their_run_signals(chat):
    """A run taken over sends ``run_recovered`` (the run, the chat, the new attempt, the
    lost worker); one given up sends ``run_failed`` (``worker_lost``, with the stored
    error)."""
    from django_llmchat import signals

    seen = []

    def recovered(sender, **kwargs):
        seen.append(("recovered", {k: v for k, v in kwargs.items() if k != "signal"}))

    def failed(sender, **kwargs):
        seen.append(("failed", {k: v for k, v in kwargs.items() if k != "signal"}))

    signals.run_recovered.connect(recovered)
    signals.run_failed.connect(failed)
    try:
        dead = taken_run(chat, lease=-1, attempt=1, worker="gone:3")
        runs.claim(chat.pk, worker="w:2")
        Run.objects.filter(pk=dead.pk).update(
            lease_expires_at=timezone.now() - timedelta(seconds=1), attempt=MAX_ATTEMPTS
        )
        runs.claim(chat.pk)
    finally:
        signals.run_recovered.disconnect(recovered)
        signals.run_failed.disconnect(failed)
    error = (
        f"The run stopped {MAX_ATTEMPTS} times before it could finish (its worker was lost "
        "each time); it was not tried again."
    )
    assert seen == [
        (
            "recovered",
            {"run_id": dead.pk, "chat_id": chat.pk, "attempt": 2, "previous_worker": "gone:3"},
        ),
        (
            "failed",
            {"run_id": dead.pk, "chat_id": chat.pk, "error_type": "worker_lost", "error": error},
        ),
    ]
    assert fresh(dead).error == error
