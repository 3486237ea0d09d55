"""The run session (django_llmchat.loop.session): every run, however it ends, is one sequence
from ``RunStarted`` to one ``RunFinished``, published as it is yielded; a refusal at the
door yields nothing and stores nothing."""

from __future__ import annotations

from decimal import Decimal

import pytest

from django_llmchat import runs
from django_llmchat.errors import BudgetExceededError, ProviderError
from django_llmchat.events import (
    GuardrailTripwire,
    Interrupt,
    RunFinished,
    RunStarted,
    StreamEvent,
    TextDelta,
)
from django_llmchat.guardrails import Guardrail, GuardrailResult
from django_llmchat.loop.session import RunSession
from django_llmchat.models import Chat, Message, Run, Usage
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing import ToolCall as Call
from django_llmchat.tools import tool

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gpt-4.1-mini"


@pytest.fixture
def chat(fake_llm, django_user_model):
    fake_llm.configure("openai", MODEL)
    user = django_user_model.objects.create_user("sam", password="pw")
    return Chat.objects.create(user=user, provider="openai", model_id=MODEL)


class Sent(list):
    """A publisher: keeps every event, answers with an id as a Redis stream would."""

    def __call__(self, event: StreamEvent) -> str:
        self.append(event)
        return f"{len(self)}-0"


def session_of(chat, prompt="Hi", **options) -> tuple[RunSession, Sent]:
    sent = Sent()
    return RunSession(chat.runner(), prompt, publish=sent, **options), sent


@tool
def order_status(order: str) -> str:
    """Where an order is"""
    return f"{order} shipped"


@tool(requires_approval=True)
def refund(order: str) -> str:
    """Refunds an order"""
    return f"refunded {order}"


class NoPasswords(Guardrail):
    id = "no-passwords"

    def check(self, text, *, phase, context):
        return GuardrailResult(action="block", reason="a password") if "password" in text else None


def test_a_reply_is_one_sequence_from_run_started_to_run_finished(chat, fake_llm):
    fake_llm.script(Reply("Hello there.", chunk_size=4))
    session, sent = session_of(chat)
    events = list(session)
    run = chat.runs.get()
    prompt, reply = chat.transcript()
    assert events[0] == RunStarted(run_id=str(run.pk), message_id=prompt.pk)
    assert any(isinstance(e, TextDelta) for e in events)
    finished = events[-1]
    assert finished is session.finished and session.status == "succeeded" == run.status
    assert finished == RunFinished(
        run_id=str(run.pk),
        status="succeeded",
        message_id=reply.pk,
        token_usage=run.tokens,
        cost=finished.cost,
    )
    assert finished.token_usage.output_tokens and finished.cost is not None
    # one RunStarted, one terminal event, every event published as it was yielded
    assert [type(e) for e in events].count(RunStarted) == 1
    assert [type(e) for e in events].count(RunFinished) == 1
    assert sent == events and session.last_id == f"{len(events)}-0"


def test_a_failed_run_ends_with_its_run_finished_then_raises(chat, fake_llm):
    fake_llm.script(Fault(status=400))
    events = []
    with pytest.raises(ProviderError):
        for event in chat.stream("Hi"):
            events.append(event)
    run = chat.runs.get()
    assert run.status == "failed"
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunFinished)
    assert (events[-1].status, events[-1].error_type) == ("failed", run.error_type)
    assert events[-1].error == run.error and "sk-" not in (run.error or "")
    assert Usage.objects.get(run=run).status == "failed"  # the attempt is on the ledger


def test_a_session_that_keeps_its_errors_reports_them(chat, fake_llm):
    fake_llm.script(Fault(status=400))
    session, sent = session_of(chat, raise_errors=False)
    events = list(session)  # no exception
    assert isinstance(session.error, ProviderError) and session.status == "failed"
    assert events[-1].status == "failed" and sent[-1] is session.finished


def test_a_blocked_prompt_tells_the_block_and_stores_nothing(chat, fake_llm, settings):
    runner = chat.runner()
    runner.guardrails = [NoPasswords()]
    sent = Sent()
    session = RunSession(runner, "my password is hunter2", publish=sent)
    events = list(session)
    assert [type(e) for e in events] == [GuardrailTripwire, RunFinished]
    assert events[-1] == RunFinished(run_id="", status="blocked") and session.status == "blocked"
    assert not Message.objects.exists() and not Run.objects.exists() and not fake_llm.requests
    assert sent == events


def test_a_refusal_at_the_door_yields_nothing_and_stores_nothing(chat, fake_llm):
    fake_llm.configure("openai", MODEL, LIMITS={"default": {"runs_per_hour": 1}})
    fake_llm.script("first")
    chat.ask("one")
    session, sent = session_of(chat, "two")
    with pytest.raises(BudgetExceededError):
        session.admit()
    with pytest.raises(BudgetExceededError):
        next(session)
    assert sent == [] and chat.runs.count() == 1
    assert list(chat.messages.filter(role="user").values_list("content", flat=True)) == ["one"]


def test_a_session_closed_mid_reply_publishes_its_end(chat, fake_llm):
    fake_llm.script(Fault(chunk_delay=0.01, reply=Reply("word " * 100, chunk_size=5)))
    session, sent = session_of(chat)
    assert isinstance(next(session), RunStarted)
    assert isinstance(next(session), TextDelta)
    session.close()
    run = chat.runs.get()
    assert (run.status, run.interrupt_reason) == ("cancelled", "stream_closed")
    assert isinstance(sent[-1], RunFinished) and sent[-1] is session.finished
    assert sent[-1].status == "cancelled" and sent[-1].message_id == list(chat.transcript())[-1].pk


def test_a_session_admitted_but_never_read_is_cancelled_and_told(chat, fake_llm):
    session, sent = session_of(chat)
    session.admit()
    run = chat.runs.get()
    assert run.status == "running"  # an idle chat: the run is this process's at once
    session.close()
    run.refresh_from_db()
    assert (run.status, run.interrupt_reason) == ("cancelled", "stream_closed")
    assert [e.status for e in sent] == ["cancelled"] and not fake_llm.requests


def test_a_paused_run_ends_awaiting_approval_and_resumes_as_the_same_run(chat, fake_llm):
    chat.with_tools(refund)
    fake_llm.script(
        Reply(tool_calls=[Call("refund", {"order": "A17"}, call_id="call_r1")]),
        Reply("Refunded."),
    )
    session, sent = session_of(chat, "Refund A17")
    *_, pause, finished = session
    run = chat.runs.get()
    assert pause == Interrupt(reason="approval_required")
    assert (finished.status, run.status) == ("awaiting_approval", "awaiting_approval")
    call = chat.tool_calls.get()
    resumed = runs.decide(chat.pk, call, "approved")
    again = RunSession(Chat.objects.get(pk=chat.pk).runner(), resume=resumed, publish=sent)
    events = list(again)
    assert events[0] == RunStarted(run_id=str(run.pk), message_id=run.prompt_id)
    assert events[-1].status == "succeeded" and events[-1].run_id == str(run.pk)
    assert list(chat.transcript())[-1].content == "Refunded."


def test_a_run_given_back_to_the_queue_ends_retrying(chat, fake_llm):
    fake_llm.script(Fault(status=400))
    session, sent = session_of(chat, retry_on=lambda exc: True, raise_errors=False)
    events = list(session)
    run = chat.runs.get()
    assert events[-1].status == "retrying" and session.status == "retrying"
    assert run.status == "queued"  # the same run starts again later
    assert isinstance(session.error, ProviderError)


def test_a_claimed_run_that_cannot_start_here_ends_failed(chat, fake_llm):
    message = Message(chat=chat, role="user", content="Hi")
    run, _ = runs.enqueue(chat, message, [], task_id="t1")
    execution = runs.claim(chat.pk, run_id=run.pk, task_id="t1").execution

    def gone():
        raise LookupError("the agent is gone")

    sent = Sent()
    session = RunSession(build_runner=gone, execution=execution, publish=sent, raise_errors=False)
    events = list(session)
    run.refresh_from_db()
    assert run.status == "failed" and session.status == "failed"
    assert [type(e) for e in events] == [RunStarted, RunFinished] and sent == events
    assert events[-1].status == "failed" and events[-1].run_id == str(run.pk)


def test_the_terminal_event_reads_its_totals_in_one_query(chat, fake_llm):
    """``run_finished``: the run's last stored message (a tool run's final reply, not its
    prompt or a tool result before it), its tokens and cost over every attempt, one
    query."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_llmchat.loop.session import run_finished

    chat.tools = ["order_status"]
    chat.save()
    fake_llm.script(
        Reply(
            tool_calls=[Call("order_status", {"order": "A1"})],
            usage={"input_tokens": 9, "output_tokens": 2},
        ),
        Reply("Refunded.", usage={"input_tokens": 20, "output_tokens": 3}),
    )
    reply = chat.ask("Where is A1?")
    with CaptureQueriesContext(connection) as ctx:
        event = run_finished(reply.run_id, "succeeded")
    assert len(ctx) == 1
    assert event.message_id == reply.pk and event.status == "succeeded"
    assert (event.token_usage.input_tokens, event.token_usage.output_tokens) == (29, 5)
    expected = Run.objects.with_totals().get(pk=reply.run_id).cost().total
    assert Decimal(event.cost) == expected and expected > 0
