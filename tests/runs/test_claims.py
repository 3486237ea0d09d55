"""Claims (``django_llmchat/runs/claims.py``): :func:`claim` of a chat's next run (a
queued one, one whose process died, one lost too often), :func:`wait_for_turn`, and the
recovery of runs nobody works on (:func:`stale_runs`, :func:`recover`).

One transition at a time, as tests/runs/conftest.py says."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import transaction
from django.utils import timezone

from django_llmchat import runs
from django_llmchat.errors import ChatBusyError, RunLostError
from django_llmchat.models import Chat, Message, Run
from django_llmchat.models.message import QUEUED_POSITION
from django_llmchat.runs import claims
from tests.factories import LEASE, MAX_ATTEMPTS, awaiting, chat_row, fresh, prompt_of, taken_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("bystanders")]


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
    (below one second too), for its own task (``run_id``, a redelivery) as for any."""
    run = taken_run(chat, lease=60)
    for seconds in (0.5, 90.0):
        Run.objects.filter(pk=run.pk).update(
            lease_expires_at=clock.now + timedelta(seconds=seconds)
        )
        for run_id in (None, run.pk):
            found = runs.claim(chat.pk, run_id=run_id, worker="w:2")
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


# -- survivors of tests/mutation --------------------------------------------------------------
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


def test_a_take_over_is_logged_with_the_run_the_chat_the_old_worker_and_the_attempt(chat, caplog):
    dead = taken_run(chat, lease=-1, attempt=1, worker="gone:3")
    with caplog.at_level("WARNING", logger=runs.logger.name):
        assert runs.claim(chat.pk, worker="w:2").execution.attempt == 2
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"run {dead.pk} of chat {chat.pk}: its worker 'gone:3' stopped renewing the lease; "
        "resuming it from its last stored step (attempt 2)"
    ]


def test_a_lease_ending_this_very_moment_is_over(chat, clock, sent):
    """A lease that ends at ``now`` has run out: a waiting caller behind its run sends the
    run's task, and a claim takes the run over."""
    ahead = taken_run(chat, lease=60)
    Run.objects.filter(pk=ahead.pk).update(lease_expires_at=clock.now)
    mine, _ = runs.enqueue(chat, prompt_of(chat), wait=True)
    assert runs.claim(chat.pk, run_id=mine.pk, waiting=True).state == runs.BUSY
    assert sent == [(chat.pk, ahead.pk)]
    assert runs.claim(chat.pk, worker="w:2").execution.pk == ahead.pk


def test_recovery_logs_each_run_it_sends(chat, sent, caplog):
    dead = taken_run(chat, lease=-1)
    with caplog.at_level("INFO", logger=runs.logger.name):
        assert [run.pk for run in runs.recover()] == [dead.pk]
    assert f"recovering run {dead.pk} of chat {chat.pk} (running)" in [
        r.getMessage() for r in caplog.records
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
