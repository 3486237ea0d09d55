"""The double-texting policy in the gate (``django_llmchat/runs/policy.py``, applied by
:func:`runs.enqueue` under the chat's lock): a prompt while the chat's run is queued,
running or waiting for a decision, per policy, and the race of prompts under ``reject``.

One transition at a time, as tests/runs/conftest.py says. A live run worked on in
another process is a run row left as that process leaves it (``taken_run``); the whole
path, with real runs, is in tests/test_double_texting.py."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from django_llmchat import runs
from django_llmchat.errors import ArgumentError, DoubleTextingRejected
from django_llmchat.models import Chat, Message, Run, ToolCall, Usage, branches
from django_llmchat.models.message import QUEUED_POSITION
from django_llmchat.runs import admission, policy
from django_llmchat.testing.invariants import assert_one_path
from tests.factories import LEASE, awaiting, fresh, prompt_of, taken_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("bystanders")]


def queued(chat, text="First"):
    run, _ = runs.enqueue(chat, prompt_of(chat, text))
    return run


def live_run(chat, text="First") -> Run:
    """A run another process works on, with its prompt on the path."""
    prompt = chat.add_message(role="user", content=text)
    return taken_run(chat, prompt, lease=LEASE)


def test_enqueue_queues_the_prompt_behind_the_live_run(chat):
    """The default: the new prompt's run is queued behind; the live run is untouched."""
    first = live_run(chat)
    run, execution = runs.enqueue(chat, prompt_of(chat, "Second"), start=True)
    assert execution is None and fresh(run).status == Run.QUEUED
    row = fresh(first)
    assert (row.status, row.cancel_requested) == (Run.RUNNING, False)
    assert Message.objects.get(pk=run.prompt_id).position >= QUEUED_POSITION


@pytest.mark.parametrize("state", ["queued", "running", "awaiting_approval"])
def test_reject_refuses_the_prompt_and_stores_nothing(chat, state):
    """Under ``reject`` a prompt while a run is unfinished raises DoubleTextingRejected
    (a ChatBusyError naming the policy): no message, no run, the live run untouched."""
    if state == "queued":
        first = queued(chat)
    elif state == "running":
        first = live_run(chat)
    else:
        first, _ = awaiting(chat, "call_1")
    before = (Message.objects.filter(chat=chat).count(), fresh(first).status)
    with pytest.raises(DoubleTextingRejected, match="policy 'reject'"):
        runs.enqueue(chat, prompt_of(chat, "Second"), double_texting="reject")
    assert (Message.objects.filter(chat=chat).count(), fresh(first).status) == before
    assert list(chat.runs.values_list("pk", flat=True)) == [first.pk]
    assert not fresh(first).cancel_requested


def test_reject_admits_on_an_idle_chat_and_after_the_run_ended(chat):
    run, _ = runs.enqueue(chat, prompt_of(chat), double_texting="reject")
    assert fresh(run).status == Run.QUEUED
    Run.objects.filter(pk=run.pk).update(status=Run.SUCCEEDED)
    runs.enqueue(chat, prompt_of(chat, "again"), double_texting="reject")


def test_a_continuation_and_a_regenerate_are_not_new_prompts(chat):
    """No prompt: the policy is not asked (a continuation queues as before)."""
    live_run(chat)
    run, _ = runs.enqueue(chat, None, double_texting="reject")
    assert fresh(run).status == Run.QUEUED


@pytest.mark.parametrize("chosen", ["interrupt", "rollback"])
def test_a_running_run_is_asked_to_stop_and_the_new_one_waits_behind_it(chat, chosen):
    """``interrupt``/``rollback``: the running run is asked to stop (its process sees it at
    its next poll) with the policy's reason; the new run is queued behind it."""
    first = live_run(chat)
    run, execution = runs.enqueue(
        chat, prompt_of(chat, "Second"), start=True, double_texting=chosen
    )
    assert execution is None
    row = fresh(first)
    reason = "rollback" if chosen == "rollback" else "double_texting"
    assert (row.status, row.cancel_requested, row.interrupt_reason) == (
        Run.RUNNING,
        True,
        reason,
    )
    assert fresh(run).status == Run.QUEUED


@pytest.mark.parametrize("chosen", ["interrupt", "rollback"])
def test_queued_runs_end_now_and_the_new_one_starts(chat, sent, chosen):
    """Every queued run ends ``cancelled`` at once (its prompt placed on the path); the
    new run is claimed with ``start=True``."""
    first, second = queued(chat, "One"), queued(chat, "Two")
    run, execution = runs.enqueue(chat, prompt_of(chat, "Three"), start=True, double_texting=chosen)
    assert execution is not None and execution.pk == run.pk
    for old in (first, second):
        row = fresh(old)
        assert row.status == Run.CANCELLED and row.finished_at is not None
        assert row.interrupt_reason == ("rollback" if chosen == "rollback" else "double_texting")
    texts = [m.content for m in chat.messages.all()]
    assert texts == ["One", "Two", "Three"]
    assert all(m.position < QUEUED_POSITION for m in chat.messages.all())
    assert Chat.objects.get(pk=chat.pk).active_run_id == run.pk
    assert_one_path(chat.pk)


def test_rollback_of_a_queued_run_deletes_its_stored_steps(chat):
    """A run given back to the queue after a stored step (a retry later): ``rollback``
    deletes its reply and tool calls, keeps its prompt and its usage rows."""
    first = queued(chat, "One")
    execution = runs.claim(chat.pk).execution
    assert execution.pk == first.pk
    step = Message.objects.create(chat=chat, role="assistant", content="half", run=first)
    ToolCall.objects.create(message=step, chat=chat, call_id="c1", name="lookup", arguments={})
    Message.objects.create(
        chat=chat,
        role="tool",
        content="done",
        run=first,
        parent_tool_call=ToolCall.objects.get(call_id="c1"),
    )
    usage = Usage.objects.create(chat=chat, run=first, message=step, status=Usage.SUCCEEDED)
    assert execution.requeue("provider_error", "later")
    runs.enqueue(chat, prompt_of(chat, "Two"), double_texting="rollback")
    assert [(m.role, m.content) for m in chat.messages.all()] == [("user", "One"), ("user", "Two")]
    assert not ToolCall.objects.filter(chat=chat).exists()
    usage.refresh_from_db()
    assert usage.run_id == first.pk and usage.message_id is None
    assert_one_path(chat.pk)


def test_interrupt_keeps_a_queued_runs_stored_steps(chat):
    first = queued(chat, "One")
    execution = runs.claim(chat.pk).execution
    Message.objects.create(chat=chat, role="assistant", content="half", run=first)
    execution.requeue("provider_error", "later")
    runs.enqueue(chat, prompt_of(chat, "Two"), double_texting="interrupt")
    assert [m.content for m in chat.messages.all()] == ["One", "half", "Two"]


@pytest.mark.parametrize("chosen", ["interrupt", "rollback"])
def test_a_run_waiting_for_decisions_ends_with_its_calls_answered(chat, chosen):
    """A run waiting for tool-call decisions ends now; ``interrupt`` leaves each waiting
    call with an error result, ``rollback`` deletes the step with its calls."""
    first, calls = awaiting(chat, "call_1")
    runs.enqueue(chat, prompt_of(chat, "Second"), double_texting=chosen)
    assert fresh(first).status == Run.CANCELLED
    if chosen == "interrupt":
        (call,) = calls
        assert Message.objects.filter(parent_tool_call=call, role="tool").count() == 1
    else:
        assert not ToolCall.objects.filter(chat=chat).exists()
    assert_one_path(chat.pk)


def test_the_policy_comes_from_the_call_the_context_the_chat_the_setting(chat, settings):
    assert policy.resolve(chat) == "enqueue"
    settings.LLMCHAT = {**settings.LLMCHAT, "DOUBLE_TEXTING": "interrupt"}
    assert policy.resolve(chat) == "interrupt"
    chat.double_texting = "rollback"
    assert policy.resolve(chat) == "rollback"
    with runs.double_texting("reject"):
        assert policy.resolve(chat) == "reject"
        assert policy.resolve(chat, "enqueue") == "enqueue"
    assert policy.resolve(chat) == "rollback"
    chat.double_texting = "bogus"
    with pytest.raises(ArgumentError, match="Chat.double_texting must be one of"):
        policy.resolve(chat)
    with pytest.raises(ArgumentError, match="double_texting must be one of"):
        with runs.double_texting("later"):
            pass


def test_a_non_enqueue_policy_takes_the_statements(chat):
    """The policy is applied where the chat's lock is held in the admission's own
    transaction: never the one call of the enqueue function."""
    using = connection.alias
    assert not admission._in_one_call(chat, None, False, using, "reject")
    assert not admission._in_one_call(chat, None, False, using, "rollback")


def test_roll_back_mends_the_parent_of_a_message_after_a_deleted_one(chat):
    """A message following a deleted reply follows that reply's first kept ancestor."""
    prompt = chat.add_message(role="user", content="One")
    run = Run.objects.create(chat=chat, prompt=prompt, status=Run.CANCELLED)
    reply = Message.objects.create(chat=chat, role="assistant", content="half", run=run)
    after = chat.add_message(role="user", content="Two")
    assert after.parent_id == reply.pk
    assert branches.roll_back(chat.pk, run.pk, prompt.pk) == 1
    after.refresh_from_db()
    assert after.parent_id == prompt.pk
    assert branches.roll_back(chat.pk, run.pk, prompt.pk) == 0
    assert_one_path(chat.pk)


# -- the race -------------------------------------------------------------------------------
def test_racing_prompts_under_reject_admit_exactly_one(chat):
    """Prompts sent at once to an idle chat under ``reject``: the chat's lock orders them,
    the first is admitted, every other is refused (on PostgreSQL: a server database lets
    the threads write at once)."""
    if connection.vendor == "sqlite":
        pytest.skip("threads writing at once need a server database (SQLite: one writer)")
    n = 6
    for round_ in range(3):
        barrier = threading.Barrier(n)
        outcomes: list = [None] * n

        def one(i, round_=round_, barrier=barrier, outcomes=outcomes):
            try:
                barrier.wait(30)
                mine = Chat.objects.get(pk=chat.pk)
                outcomes[i] = runs.enqueue(
                    mine, prompt_of(mine, f"{round_}-{i}"), double_texting="reject"
                )[0]
            except Exception as exc:
                outcomes[i] = exc
            finally:
                connection.close()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        admitted = [o for o in outcomes if isinstance(o, Run)]
        refused = [o for o in outcomes if isinstance(o, DoubleTextingRejected)]
        assert (len(admitted), len(refused)) == (1, n - 1), outcomes
        assert chat.runs.unfinished().count() == 1
        assert Message.objects.filter(chat=chat, content__startswith=f"{round_}-").count() == 1
        Run.objects.filter(pk=admitted[0].pk).update(status=Run.SUCCEEDED)
        Chat.objects.filter(pk=chat.pk).update(status="idle", active_run=None)


def test_stop_status_names_the_runs_statuses():
    from django_llmchat.models import Run
    from django_llmchat.runs.policy import INTERRUPTED_BY_PROMPT, ROLLED_BACK, stop_status

    assert stop_status("cancelled") == Run.CANCELLED
    assert stop_status(INTERRUPTED_BY_PROMPT) == Run.CANCELLED
    assert stop_status(ROLLED_BACK) == Run.CANCELLED
    assert stop_status(None) == stop_status("shutdown") == Run.INTERRUPTED
