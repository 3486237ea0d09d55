"""complete_chat and Chat.ask_later in this process: queued runs, idempotency, runs whose
worker died, task retries, cancellation and where the task runs (no broker needed)."""

from __future__ import annotations

import sys
import traceback
from datetime import timedelta

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_llmchat import runs, tasks
from django_llmchat.agents import Agent
from django_llmchat.errors import ProviderError, RateLimitError
from django_llmchat.guardrails import Guardrail, GuardrailResult
from django_llmchat.models import Chat, Message, Run, ToolCall, Usage
from django_llmchat.tasks import complete_chat, in_process_mode, run_chat
from django_llmchat.testing import Fault, Reply
from django_llmchat.tools import tool
from tests.factories import taken_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def inline(fake_llm):
    """The fake provider, with tasks run in the committing thread and no retry waits."""
    fake_llm.configure(
        "openai",
        "gpt-4.1-mini",
        TASKS_EAGER_WITHOUT_BROKER="inline",
        MAX_RETRIES=0,
        TASK_RETRY_MAX_WAIT=0.0,
    )
    return fake_llm


def transcript(chat):
    return [(m.role, m.content) for m in chat.transcript()]


def inputs(request):
    return [m.get("content") or m.get("output") for m in request.body["input"]]


def statuses(chat):
    return list(chat.runs.order_by("id").values_list("status", flat=True))


def test_ask_later_saves_the_prompt_and_the_task_fills_in_the_reply(inline):
    inline.script("Paris.")
    chat = Chat.objects.create()
    prompt = chat.ask_later("Capital of France?")
    assert prompt.role == "user" and prompt.content == "Capital of France?"
    chat.refresh_from_db()
    assert transcript(chat) == [("user", "Capital of France?"), ("assistant", "Paris.")]
    assert chat.status == "idle" and chat.active_run is None
    run = chat.last_run
    assert Run.objects.get(pk=run.pk).status == "succeeded"
    run.refresh_from_db()
    assert run.prompt_id == prompt.pk and run.attempt == 1 and run.steps == 1
    reply = Message.objects.get(chat=chat, role="assistant")
    assert reply.run == run and [u.run_id for u in reply.usages.all()] == [run.pk]
    assert Message.objects.get(pk=prompt.pk).raw is None  # nothing is marked on raw


def test_a_tasks_reply_without_usage_is_billed_estimated(inline):
    """The task's attempt, its vendor reporting no usage: our estimate, priced."""
    inline.script(Reply("Paris.", usage=False))
    chat = Chat.objects.create()
    chat.ask_later("Capital of France?")
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated) == (Usage.SUCCEEDED, True)
    assert row.input_tokens > 0 and row.output_tokens > 0 and row.total_cost > 0
    assert row.message_id == Message.objects.get(chat=chat, role="assistant").pk


def test_the_task_is_queued_when_the_transaction_commits(inline):
    chat = Chat.objects.create()
    with transaction.atomic():
        prompt = chat.ask_later("Hello?")
        assert Chat.objects.get(pk=chat.pk).status == "queued"
        assert statuses(chat) == ["queued"] and chat.last_run.prompt_id == prompt.pk
        assert not inline.requests
    assert len(inline.requests) == 1
    with transaction.atomic():
        chat.ask_later("Rolled back")
        transaction.set_rollback(True)
    assert len(inline.requests) == 1 and chat.messages.count() == 2 and chat.runs.count() == 1


def test_prompts_queued_together_get_one_reply_each_in_order(inline):
    inline.script("One.", "Two.", "Three.")
    chat = Chat.objects.create()
    with transaction.atomic():
        for text in ("1?", "2?", "3?"):
            chat.ask_later(text)
        # queued prompts read after everything else until their turn comes
        assert [m.content for m in chat.transcript()] == ["1?", "2?", "3?"]
    assert transcript(chat) == [
        ("user", "1?"),
        ("assistant", "One."),
        ("user", "2?"),
        ("assistant", "Two."),
        ("user", "3?"),
        ("assistant", "Three."),
    ]
    assert [inputs(r)[-1] for r in inline.requests] == ["1?", "2?", "3?"]
    assert len(inline.requests[0].body["input"]) == 1  # the later prompts waited
    assert len(inline.requests[2].body["input"]) == 5
    assert statuses(chat) == ["succeeded"] * 3
    # created_at is never rewritten: it says when each prompt was asked
    prompts = list(Message.objects.filter(chat=chat, role="user").order_by("id"))
    assert prompts[0].created_at <= prompts[1].created_at <= prompts[2].created_at


def test_a_prompt_added_by_hand_goes_with_the_next_queued_one(inline):
    inline.script("Summary.")
    chat = Chat.objects.create()
    chat.add_message(role="user", content="A long document.")
    chat.ask_later("Summarise it")
    assert transcript(chat) == [
        ("user", "A long document."),
        ("user", "Summarise it"),
        ("assistant", "Summary."),
    ]
    assert inputs(inline.requests[0]) == ["A long document.", "Summarise it"]


def test_a_duplicated_or_redelivered_task_makes_no_second_reply(inline):
    inline.script("Once.")
    chat = Chat.objects.create()
    chat.ask_later("Once?")
    run = chat.last_run
    assert run_chat(chat.pk, run.pk) == "nothing"
    complete_chat.delay(chat.pk, run_id=run.pk)
    assert complete_chat.apply(args=(chat.pk,), kwargs={"run_id": run.pk}).get() == "nothing"
    # a task of an earlier version names the prompt
    assert complete_chat.apply(args=(chat.pk,), kwargs={"reply_to": run.prompt_id}).get() == (
        "nothing"
    )
    assert len(inline.requests) == 1
    assert transcript(chat) == [("user", "Once?"), ("assistant", "Once.")]


def _dead_run(chat, prompt=None, **fields):
    """A run a worker took and then died on: running, its lease run out."""
    return taken_run(chat, prompt, lease=-1, worker="gone:1", **fields)


@tool
def task_lookup(key: str) -> str:
    """Looks a key up"""
    return f"value of {key}"


def test_a_run_whose_worker_died_after_a_tool_round_resumes_from_it(inline):
    # the worker stored user, assistant tool call and tool result, then was killed
    chat = Chat.objects.create()
    chat.with_tools(task_lookup)
    prompt = chat.add_message(role="user", content="Look up k")
    run = _dead_run(chat, prompt, steps=1)
    call_msg = chat.add_message(role="assistant", content="", run=run, finish_reason="tool_calls")
    call = ToolCall.objects.create(
        chat=chat, message=call_msg, call_id="call_1", name="task_lookup", arguments={"key": "k"}
    )
    chat.add_message(role="tool", content="value of k", parent_tool_call=call, run=run)
    inline.script("k is value of k.")
    assert run_chat(chat.pk, run.pk) == "done"
    run.refresh_from_db()
    assert run.status == "succeeded" and run.attempt == 2 and run.steps == 2
    assert transcript(chat) == [
        ("user", "Look up k"),
        ("assistant", ""),
        ("tool", "value of k"),
        ("assistant", "k is value of k."),
    ]
    assert len(inline.requests) == 1  # the stored tool round was not run again
    assert Chat.objects.get(pk=chat.pk).status == "idle"


def test_a_run_cut_mid_step_is_retried_from_the_step(inline):
    chat = Chat.objects.create()
    prompt = chat.add_message(role="user", content="Q")
    run = _dead_run(chat, prompt)
    inline.script("A")
    assert run_chat(chat.pk, run.pk) == "done"
    assert transcript(chat) == [("user", "Q"), ("assistant", "A")]
    assert statuses(chat) == ["succeeded"]


def test_a_live_lease_is_left_alone_and_the_task_comes_back_later(inline):
    chat = Chat.objects.create()
    prompt = chat.add_message(role="user", content="Q")
    run = taken_run(chat, prompt, lease=20)
    with pytest.raises(tasks.RetryLater) as info:
        run_chat(chat.pk, run.pk)
    assert 19 <= info.value.countdown <= 21
    assert not inline.requests
    run.refresh_from_db()
    assert run.status == "running" and run.attempt == 1


def test_a_run_that_keeps_losing_its_worker_ends_failed(inline):
    chat = Chat.objects.create()
    prompt = chat.add_message(role="user", content="Q")
    with override_settings(LLMCHAT={**inline_settings(), "RUN_MAX_ATTEMPTS": 3}):
        run = _dead_run(chat, prompt, attempt=3)
        inline.script("A")
        chat.ask_later("Next")
    run.refresh_from_db()
    assert run.status == "failed" and run.error_type == "worker_lost"
    assert "3 times" in run.error
    # the queue went on: the next prompt was answered (with the failed one in its history)
    assert transcript(chat)[-1] == ("assistant", "A")
    assert statuses(chat) == ["failed", "succeeded"]


def test_a_prompt_queued_during_a_run_moves_after_its_reply(inline):
    inline.script(Reply("A1"), Reply("A2"))
    chat = Chat.objects.create()
    q1 = chat.add_message(role="user", content="Q1")
    first = _dead_run(chat, q1)
    chat.ask_later("Q2")  # queued behind the dead run: the task answers both, in order
    assert transcript(chat) == [
        ("user", "Q1"),
        ("assistant", "A1"),
        ("user", "Q2"),
        ("assistant", "A2"),
    ]
    assert inputs(inline.requests[0]) == ["Q1"] and inputs(inline.requests[1])[-1] == "Q2"
    first.refresh_from_db()
    assert first.attempt == 2 and statuses(chat) == ["succeeded", "succeeded"]


def _queued(chat, *texts):
    """Runs queued on ``chat`` with no task sent (as if their tasks were in a broker)."""
    return [runs.enqueue(chat, Message(chat=chat, role="user", content=t))[0] for t in texts]


@pytest.fixture
def handed_off(monkeypatch):
    """The tasks a run's end sends (``runs.base.send``), recorded instead of run."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(
        runs.base, "send", lambda chat_id, run_id, **kw: calls.append((chat_id, run_id))
    )
    return calls


def test_a_workers_task_answers_its_run_and_hands_the_next_to_the_queue(inline, handed_off):
    """In a worker (``drain=False``) a task answers its own run, then stops: the run's end
    sends the task of the chat's next queued run, to the back of the broker's queue, so a
    chat's queued runs never hold a thread while other chats' tasks wait."""
    inline.script("One.", "Two.", "Three.")
    chat = Chat.objects.create()
    first, second, third = _queued(chat, "1?", "2?", "3?")
    assert run_chat(chat.pk, first.pk, drain=False) == "done"
    assert statuses(chat) == ["succeeded", "queued", "queued"]
    assert handed_off == [(chat.pk, second.pk)]
    # a task for a later run answers the runs ahead of it first, in order, and hands
    # on only after its own
    assert run_chat(chat.pk, third.pk, drain=False) == "done"
    assert statuses(chat) == ["succeeded"] * 3
    assert transcript(chat)[-1] == ("assistant", "Three.")
    assert handed_off == [(chat.pk, second.pk)]  # nothing was queued after the third
    # a task with no run named answers one run
    fourth, fifth = _queued(chat, "4?", "5?")
    inline.script("Four.", "Five.")
    assert run_chat(chat.pk, drain=False) == "done"
    assert statuses(chat)[3:] == ["succeeded", "queued"]
    assert handed_off[-1] == (chat.pk, fifth.pk)


def test_a_process_answering_in_place_drains_the_chats_queue(inline, handed_off):
    """Outside a worker (``drain=True``, the default) the call answers every queued run
    and sends no task."""
    inline.script("One.", "Two.")
    chat = Chat.objects.create()
    first, _ = _queued(chat, "1?", "2?")
    assert run_chat(chat.pk, first.pk) == "done"
    assert statuses(chat) == ["succeeded", "succeeded"] and handed_off == []


def test_a_rate_limit_retries_the_task_then_one_reply(inline):
    inline.script(Fault(status=429, retry_after=0), "Done.")
    chat = Chat.objects.create()
    chat.ask_later("Busy?")
    assert transcript(chat) == [("user", "Busy?"), ("assistant", "Done.")]
    rows = list(
        Usage.objects.filter(chat=chat).order_by("id").values_list("status", "message", "run")
    )
    reply = Message.objects.get(chat=chat, role="assistant")
    run = chat.last_run
    assert rows == [("failed", None, run.pk), ("succeeded", reply.pk, run.pk)]
    run.refresh_from_db()
    assert run.status == "succeeded" and run.attempt == 2
    assert Chat.objects.get(pk=chat.pk).status == "idle"


def test_after_the_last_retry_the_run_is_failed_and_a_new_prompt_goes_on(inline):
    inline.script(*[Fault(status=503) for _ in range(3)])
    chat = Chat.objects.create()
    with override_settings(LLMCHAT={**inline_settings(), "TASK_MAX_RETRIES": 2}):
        chat.ask_later("Anyone?")
        run = Run.objects.get(pk=chat.last_run.pk)
        assert run.status == "failed" and run.error_type == "provider_error"
        assert run.error == "The provider returned an error."  # not the provider's own text
        assert len(inline.requests) == 3
        assert Chat.objects.get(pk=chat.pk).status == "idle"
        # a redelivered copy does not try again; a new prompt sees the failed one
        complete_chat.delay(chat.pk, run_id=run.pk)
        assert len(inline.requests) == 3
        inline.script("Both answered.")
        chat.ask_later("Still there?")
    assert inputs(inline.requests[-1]) == ["Anyone?", "Still there?"]
    assert transcript(chat)[-1] == ("assistant", "Both answered.")


def inline_settings():
    from django.conf import settings

    return dict(settings.LLMCHAT)


def test_a_non_retryable_error_fails_at_once(inline):
    inline.script(Fault(status=401))
    chat = Chat.objects.create()
    chat.ask_later("Key?")
    run = Run.objects.get(pk=chat.last_run.pk)
    assert run.status == "failed" and run.error_type == "auth"
    assert "test-key" not in run.error and len(inline.requests) == 1


def test_cancel_before_the_worker_starts(inline, monkeypatch):
    queued = []
    monkeypatch.setattr(
        tasks.ChatTask,
        "apply_async",
        lambda self, args=None, kwargs=None, **o: queued.append(kwargs),
    )
    chat = Chat.objects.create()
    chat.ask_later("Never mind")
    run = chat.last_run
    assert queued == [{"run_id": run.pk}]
    assert chat.cancel() is True
    assert chat.cancel() is False  # nothing left to cancel
    monkeypatch.undo()
    assert run_chat(chat.pk, run.pk) == "nothing"
    chat.refresh_from_db()
    assert chat.status == "idle" and not chat.cancel_requested
    assert statuses(chat) == ["cancelled"]
    assert not inline.requests
    assert transcript(chat) == [("user", "Never mind")]


def stacks_of_background_runs() -> str:
    """Where each background run still going is, for a failure's message."""
    frames = sys._current_frames()
    return "\n".join(
        f"{thread.name}:\n{''.join(traceback.format_stack(frames[thread.ident]))}"
        for thread in list(tasks._threads)
        if thread.ident in frames
    )


class Strict(Guardrail):
    id = "strict"

    def check(self, text, *, phase, context):
        return GuardrailResult.block("no") if "forbidden" in text else None


class Guarded(Agent):
    guardrails = [Strict]


def test_a_blocked_prompt_is_not_saved_nor_queued(inline):
    chat = Guarded.start_chat()
    assert chat.ask_later("something forbidden") is None
    assert chat.last_run.tripwire.reason == "no"
    assert chat.last_run.pk is None and chat.last_run.error_type == "guardrail_tripwire"
    assert chat.messages.count() == 0 and chat.runs.count() == 0 and not inline.requests


def test_background_thread_without_a_broker(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script("From a thread.")
    assert in_process_mode() == "thread"
    chat = Chat.objects.create()
    chat.ask_later("Hi")
    assert tasks.wait_for_background_runs(timeout=60), stacks_of_background_runs()
    assert transcript(chat) == [("user", "Hi"), ("assistant", "From a thread.")]


def test_where_the_task_runs(settings):
    from celery import Celery

    assert in_process_mode() == "thread"
    with override_settings(LLMCHAT={"TASKS_EAGER_WITHOUT_BROKER": "inline"}):
        assert in_process_mode() == "inline"
    with override_settings(LLMCHAT={"TASKS_EAGER_WITHOUT_BROKER": False}):
        assert in_process_mode() is None
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"
    assert in_process_mode() is None
    del settings.CELERY_BROKER_URL
    assert in_process_mode(Celery("x", broker="amqp://localhost//", set_as_current=False)) is None
    assert in_process_mode(Celery("x", broker="memory://", set_as_current=False)) == "thread"
    eager = Celery("x", broker="amqp://localhost//", set_as_current=False)
    eager.conf.task_always_eager = True
    assert in_process_mode(eager) == "inline"


def test_task_options():
    assert complete_chat.acks_late is True
    assert complete_chat.reject_on_worker_lost is True
    assert complete_chat.name == "django_llmchat.tasks.complete_chat"


def test_retry_delays():
    with override_settings(LLMCHAT={"TASK_MAX_RETRIES": 2, "TASK_RETRY_MAX_WAIT": 30}):
        hinted = RateLimitError("slow down", status=429, retry_after=12)
        assert tasks._retry_delay(hinted, 0) == 12
        assert tasks._retry_delay(RateLimitError("x", retry_after=600), 0) == 30
        assert tasks._retry_delay(hinted, 2) is None  # no retries left
        assert 1.0 <= tasks._retry_delay(ProviderError("x", status=503), 0) <= 2.0
        assert 2.0 <= tasks._retry_delay(ProviderError("x", status=503), 1) <= 4.0
        assert tasks._retry_delay(ProviderError("bad", status=400), 0) is None
        assert tasks._retry_delay(ValueError("bug"), 0) is None


def test_events_url_without_redis_fails_the_run_with_a_clear_error(inline, monkeypatch):
    import sys

    from django_llmchat import streams_redis

    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.setattr(streams_redis, "_clients", {})
    with override_settings(LLMCHAT={**inline_settings(), "EVENTS_URL": "redis://127.0.0.1:1/0"}):
        chat = Chat.objects.create()
        chat.ask_later("Hello?")
    run = Run.objects.get(pk=chat.last_run.pk)
    assert run.status == "failed" and run.error_type == "configuration_error"
    assert "LLMCHAT['EVENTS_URL']" in run.error
    assert Chat.objects.get(pk=chat.pk).status == "idle"
    assert not inline.requests


def test_the_recovery_finds_runs_nobody_works_on_and_sends_their_tasks(inline, monkeypatch):
    chat = Chat.objects.create()
    prompt = chat.add_message(role="user", content="Q")
    dead = _dead_run(chat, prompt)
    other = Chat.objects.create()
    alive = Run.objects.create(
        chat=other, status="running", attempt=1, lease_expires_at=timezone.now() + timedelta(60)
    )
    assert [r.pk for r in runs.stale_runs()] == [dead.pk]
    sent = []
    monkeypatch.setattr(
        tasks.ChatTask,
        "apply_async",
        lambda self, args=None, kwargs=None, **o: sent.append((args, kwargs)),
    )
    assert tasks.recover_runs() == 1
    assert sent == [((chat.pk,), {"run_id": dead.pk})]
    alive.refresh_from_db()
    assert alive.status == "running" and alive.attempt == 1


def test_a_queued_run_whose_task_was_lost_is_sent_again(inline, monkeypatch):
    monkeypatch.setattr(tasks.ChatTask, "apply_async", lambda *a, **k: None)  # the task is lost
    chat = Chat.objects.create()
    chat.ask_later("Q")
    run = chat.last_run
    assert runs.stale_runs() == []  # not yet: its task may still come
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=1))
    assert [r.pk for r in runs.stale_runs()] == [run.pk]
