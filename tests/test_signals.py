"""The run lifecycle signals (django_llmchat.signals) for alerts: run_failed wherever a
run fails (in a session, given up after its workers died), run_lost when a process finds
its run taken over, run_recovered when a dead process's run is taken over; a receiver
that raises never stops a run."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_llmchat import runs, signals
from django_llmchat.errors import ProviderError, RunLostError
from django_llmchat.models import Chat, Message, Run
from django_llmchat.testing import Fault, Reply
from tests.factories import taken_run

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gpt-4.1-mini"


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure("openai", MODEL)
    return Chat.objects.create(provider="openai", model_id=MODEL)


@pytest.fixture
def received():
    """Every run lifecycle signal sent during the test, as (name, kwargs)."""
    seen: list[tuple[str, dict]] = []
    hooks = []
    for name in ("run_failed", "run_lost", "run_recovered"):

        def receiver(sender, name=name, **kwargs):
            assert sender is Run
            kwargs.pop("signal")
            seen.append((name, kwargs))

        getattr(signals, name).connect(receiver, weak=False)
        hooks.append((name, receiver))
    yield seen
    for name, receiver in hooks:
        getattr(signals, name).disconnect(receiver)


def test_a_failed_run_is_told_once(chat, fake_llm, received):
    fake_llm.script(Fault(status=400))
    with pytest.raises(ProviderError):
        chat.ask("Hi")
    run = chat.runs.get()
    assert received == [
        (
            "run_failed",
            {
                "run_id": run.pk,
                "chat_id": chat.pk,
                "error_type": run.error_type,
                "error": run.error,
            },
        )
    ]
    fake_llm.script("Fine.")
    chat.ask("Again")
    assert len(received) == 1  # a success tells nothing


def test_a_run_given_up_after_its_workers_died_is_a_failure(chat, received):
    prompt = Message.objects.create(chat=chat, role="user", content="Hi")
    with override_settings(LLMCHAT={"RUN_MAX_ATTEMPTS": 2}):
        run = taken_run(chat, prompt, lease=-5, attempt=2)
        runs.claim(chat.pk)
    run.refresh_from_db()
    assert run.status == Run.FAILED and run.error_type == "worker_lost"
    assert received == [
        (
            "run_failed",
            {"run_id": run.pk, "chat_id": chat.pk, "error_type": "worker_lost", "error": run.error},
        )
    ]


def test_a_dead_processs_run_taken_over_is_recovered(chat, received):
    prompt = Message.objects.create(chat=chat, role="user", content="Hi")
    run = taken_run(chat, prompt, lease=-5, attempt=1, worker="gone:7")
    found = runs.claim(chat.pk)
    assert found.execution is not None and found.execution.pk == run.pk
    assert received == [
        (
            "run_recovered",
            {"run_id": run.pk, "chat_id": chat.pk, "attempt": 2, "previous_worker": "gone:7"},
        )
    ]
    found.execution.finish(Run.FAILED)


def test_a_process_that_finds_its_run_taken_over_says_so(chat, fake_llm, received):
    fake_llm.script(Fault(chunk_delay=0.02, reply=Reply("late " * 20, chunk_size=5)))
    events = chat.stream("Q")
    next(events), next(events)
    run = chat.runs.get()
    Run.objects.filter(pk=run.pk).update(attempt=run.attempt + 1, worker="other:2")
    with pytest.raises(RunLostError):
        list(events)
    assert [name for name, _ in received] == ["run_lost"]
    assert received[0][1]["run_id"] == run.pk and received[0][1]["chat_id"] == chat.pk


def test_a_receiver_that_raises_never_stops_a_run(chat, fake_llm, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("the pager is down")

    signals.run_failed.connect(broken, weak=False)
    try:
        fake_llm.script(Fault(status=400))
        with pytest.raises(ProviderError):  # the run's own error, not the receiver's
            chat.ask("Hi")
    finally:
        signals.run_failed.disconnect(broken)
    assert chat.runs.get().status == Run.FAILED
    assert "a receiver of a run signal, failed" in caplog.text
