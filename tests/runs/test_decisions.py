"""Stopping and deciding (``django_llmchat/runs/decisions.py``): :func:`cancel_queued`,
:func:`interrupt`, and :func:`decide` of a tool call waiting for a decision.

One transition at a time, as tests/runs/conftest.py says."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_llmchat import runs
from django_llmchat.errors import ArgumentError, ChatBusyError
from django_llmchat.models import Chat, Message, Run, ToolCall
from django_llmchat.models.message import QUEUED_POSITION
from tests.factories import (
    _after_everything,
    awaiting,
    chat_row,
    fresh,
    prompt_of,
    taken_run,
    waiting_call,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("bystanders")]


# -- cancel_queued ----------------------------------------------------------------------------
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


def test_stopping_a_queued_run_tells_the_followers(chat, told, sent):
    """A queued run cancelled by its caller (no error type given: none) or interrupted:
    the followers are told, with the run and its status."""
    first, _ = runs.enqueue(chat, prompt_of(chat, "1"))
    second, _ = runs.enqueue(chat, prompt_of(chat, "2"))
    assert runs.cancel_queued(chat.pk, second.pk)
    assert fresh(second).error_type == ""
    assert runs.interrupt(chat.pk, "cancelled")
    assert told == [(chat.pk, second.pk, "cancelled", ""), (chat.pk, first.pk, "cancelled")]


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
