"""complete_chat and Chat.ask_later in this process: queued prompts, idempotency, crash
leftovers, task retries, cancellation and where the task runs (no broker needed)."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import override_settings

from django_llmchat import tasks
from django_llmchat.agents import Agent
from django_llmchat.errors import ProviderError, RateLimitError
from django_llmchat.guardrails import Guardrail, GuardrailResult
from django_llmchat.models import Chat, Message, Usage
from django_llmchat.tasks import QUEUED, complete_chat, in_process_mode, plan, run_chat
from django_llmchat.testing import Fault

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
    return [m["content"] for m in request.body["input"]]


def test_ask_later_saves_the_prompt_and_the_task_fills_in_the_reply(inline):
    inline.script("Paris.")
    chat = Chat.objects.create()
    prompt = chat.ask_later("Capital of France?")
    assert prompt.role == "user" and prompt.content == "Capital of France?"
    chat.refresh_from_db()
    assert transcript(chat) == [("user", "Capital of France?"), ("assistant", "Paris.")]
    assert chat.status == "idle" and chat.error == ""
    assert Message.objects.get(pk=prompt.pk).raw is None


def test_the_task_is_queued_when_the_transaction_commits(inline):
    chat = Chat.objects.create()
    with transaction.atomic():
        prompt = chat.ask_later("Hello?")
        assert Message.objects.get(pk=prompt.pk).raw == {QUEUED: True}
        assert Chat.objects.get(pk=chat.pk).status == "running"
        assert not inline.requests
    assert len(inline.requests) == 1
    with transaction.atomic():
        chat.ask_later("Rolled back")
        transaction.set_rollback(True)
    assert len(inline.requests) == 1 and chat.messages.count() == 2


def test_prompts_queued_together_get_one_reply_each_in_order(inline):
    inline.script("One.", "Two.", "Three.")
    chat = Chat.objects.create()
    with transaction.atomic():
        for text in ("1?", "2?", "3?"):
            chat.ask_later(text)
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
    prompt = chat.ask_later("Once?")
    assert run_chat(chat.pk, prompt.pk) == "nothing"
    complete_chat.delay(chat.pk, reply_to=prompt.pk)
    assert complete_chat.apply(args=(chat.pk,), kwargs={"reply_to": prompt.pk}).get() == "nothing"
    assert len(inline.requests) == 1
    assert transcript(chat) == [("user", "Once?"), ("assistant", "Once.")]


def test_a_reply_stored_before_the_worker_died_is_not_made_again(inline):
    # the worker stored the reply, then died before closing the prompt's turn
    chat = Chat.objects.create()
    prompt = chat.add_message(role="user", content="Q", raw={QUEUED: True})
    chat.add_message(role="assistant", content="A")
    assert run_chat(chat.pk, prompt.pk) == "nothing"
    assert not inline.requests
    assert Message.objects.get(pk=prompt.pk).raw is None
    assert transcript(chat) == [("user", "Q"), ("assistant", "A")]


def test_a_prompt_queued_during_a_run_that_died_moves_after_its_reply(inline):
    inline.script("A2")
    chat = Chat.objects.create()
    chat.add_message(role="user", content="Q1", raw={QUEUED: True})
    q2 = chat.add_message(role="user", content="Q2", raw={QUEUED: True})
    chat.add_message(role="assistant", content="A1")  # stored after Q2 arrived
    assert run_chat(chat.pk, q2.pk) == "done"
    assert transcript(chat) == [
        ("user", "Q1"),
        ("assistant", "A1"),
        ("user", "Q2"),
        ("assistant", "A2"),
    ]
    assert inputs(inline.requests[0])[-1] == "Q2"


def test_a_prompt_without_ask_later_is_answered_when_named(inline):
    inline.script("Hi!")
    chat = Chat.objects.create()
    prompt = chat.add_message(role="user", content="Hello")
    complete_chat.delay(chat.pk, reply_to=prompt.pk)
    assert transcript(chat) == [("user", "Hello"), ("assistant", "Hi!")]
    complete_chat.delay(chat.pk, reply_to=prompt.pk)
    complete_chat.delay(chat.pk)  # nothing awaits a reply
    assert len(inline.requests) == 1


def test_without_reply_to_the_task_continues_a_waiting_chat(inline):
    inline.script("Continued.")
    chat = Chat.objects.create()
    assert plan(chat.pk) is None
    chat.add_message(role="user", content="Go on")
    complete_chat.delay(chat.pk)
    assert transcript(chat)[-1] == ("assistant", "Continued.")


def test_a_rate_limit_retries_the_task_then_one_reply(inline):
    inline.script(Fault(status=429, retry_after=0), "Done.")
    chat = Chat.objects.create()
    chat.ask_later("Busy?")
    assert transcript(chat) == [("user", "Busy?"), ("assistant", "Done.")]
    rows = list(Usage.objects.filter(chat=chat).order_by("id").values_list("status", "message"))
    reply = Message.objects.get(chat=chat, role="assistant")
    assert rows == [("failed", None), ("succeeded", reply.pk)]
    assert Chat.objects.get(pk=chat.pk).status == "idle"


def test_after_the_last_retry_the_chat_is_failed_and_stays_answered_once(inline):
    inline.script(*[Fault(status=503) for _ in range(3)])
    chat = Chat.objects.create()
    with override_settings(LLMCHAT={**inline_settings(), "TASK_MAX_RETRIES": 2}):
        prompt = chat.ask_later("Anyone?")
        chat.refresh_from_db()
        assert chat.status == "failed"
        assert "503" in chat.error and "test-key" not in chat.error
        assert len(inline.requests) == 3
        assert Message.objects.get(pk=prompt.pk).raw == {QUEUED: False}
        # a redelivered copy does not try again; a new prompt goes with the failed one
        complete_chat.delay(chat.pk, reply_to=prompt.pk)
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
    chat.refresh_from_db()
    assert chat.status == "failed" and len(inline.requests) == 1


def test_cancel_before_the_worker_starts(inline, monkeypatch):
    queued = []
    monkeypatch.setattr(
        tasks.ChatTask,
        "apply_async",
        lambda self, args=None, kwargs=None, **o: queued.append(kwargs),
    )
    chat = Chat.objects.create()
    prompt = chat.ask_later("Never mind")
    assert queued == [{"reply_to": prompt.pk}]
    assert chat.cancel() is True
    monkeypatch.undo()
    assert run_chat(chat.pk, prompt.pk) == "done"
    chat.refresh_from_db()
    assert chat.status == "interrupted" and not chat.cancel_requested
    assert not inline.requests
    assert transcript(chat) == [("user", "Never mind")]
    assert Message.objects.get(pk=prompt.pk).raw == {QUEUED: False}


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
    assert chat.messages.count() == 0 and not inline.requests


def test_background_thread_without_a_broker(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script("From a thread.")
    assert in_process_mode() == "thread"
    chat = Chat.objects.create()
    chat.ask_later("Hi")
    assert tasks.wait_for_background_runs(timeout=10)
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


def test_a_second_task_finds_the_chat_busy(inline):
    from django_llmchat.locks import ChatLock

    chat = Chat.objects.create()
    prompt = chat.add_message(role="user", content="Q", raw={QUEUED: True})
    with ChatLock(chat.pk, namespace=Chat._meta.db_table):
        assert run_chat(chat.pk, prompt.pk, wait=0.1) == "busy"
    assert not inline.requests


def test_events_url_without_redis_fails_the_run_with_a_clear_error(inline, monkeypatch):
    import sys

    from django_llmchat import streams

    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.setattr(streams, "_clients", {})
    with override_settings(LLMCHAT={**inline_settings(), "EVENTS_URL": "redis://127.0.0.1:1/0"}):
        chat = Chat.objects.create()
        chat.ask_later("Hello?")
    chat.refresh_from_db()
    assert chat.status == "failed"
    assert "LLMCHAT['EVENTS_URL']" in chat.error
    assert not inline.requests
