"""A provider attempt stopped mid-stream is billed: whatever stopped it (the stream
closed or dropped, ``chat.cancel()`` or ``interrupt()`` from anywhere, the run taken
over), its usage row keeps the request's estimated input tokens and the output tokens
counted from what streamed, priced, marked ``estimated``, and the limits count it.

The stops over REST and ``ui/chat`` are in tests/api/test_stopped_billing.py, the
worker's in tests/integration/test_follow_ends.py."""

from __future__ import annotations

import pytest

from django_llmchat.events import ReasoningDelta, TextDelta, ToolCallDelta
from django_llmchat.models import Chat, Run, Usage
from django_llmchat.providers.types import ProviderMessage
from django_llmchat.runs import limits
from django_llmchat.runs.estimates import estimate_tokens
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing import ToolCall as ScriptedCall
from django_llmchat.values import Thinking

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gpt-4.1-mini"


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("payer", password="pw")


@pytest.fixture
def chat(user, fake_llm):
    fake_llm.configure("openai", MODEL)
    return Chat.objects.create(user=user, provider="openai", model_id=MODEL)


def slow(reply: Reply | None = None) -> Fault:
    return Fault(chunk_delay=0.01, reply=reply or Reply("word " * 100, chunk_size=5))


def weigh(text: str) -> int:
    return estimate_tokens(ProviderMessage(role="assistant", content=text))


def assert_billed(row: Usage, text: str, *, unseen: str = "") -> None:
    """``row`` is a stopped attempt billed as estimated: its input as the pending row
    estimated it, its output the estimate of ``text`` (what streamed; with at most
    ``unseen`` more, received but not shown: the delta the stop was noticed at), priced."""
    assert row.status == Usage.CANCELLED
    assert row.estimated is True
    assert row.input_tokens and row.input_tokens > 0
    assert weigh(text) <= row.output_tokens <= weigh(text + unseen)
    assert row.output_tokens > 0
    assert row.total_cost is not None and row.total_cost > 0
    assert row.input_cost > 0 and row.output_cost > 0


def stop_after(events, deltas: int, stop=None) -> list:
    """Iterate ``events`` until ``deltas`` text deltas came, then ``stop()`` (else close
    the iterator); the events seen."""
    seen, n = [], 0
    for event in events:
        seen.append(event)
        if isinstance(event, TextDelta):
            n += 1
            if n == deltas:
                if stop is None:
                    events.close()
                    break
                stop()
                stop = lambda: None  # noqa: E731 - once
    return seen


def test_a_stream_closed_mid_reply_bills_its_attempt_as_estimated(chat, fake_llm):
    fake_llm.script(slow())
    stop_after(chat.stream("Talk"), 3)
    reply = chat.messages.get(role="assistant")
    assert reply.finish_reason == "cancelled" and reply.content == "word " * 3
    row = Usage.objects.get(chat=chat)
    assert row.message_id == reply.pk
    assert_billed(row, reply.content)
    assert chat.runs.get().status == Run.CANCELLED


def test_a_cancel_from_anywhere_bills_the_attempt_it_stopped(chat, fake_llm):
    """``chat.cancel()`` on another instance (what another process does: a flag in the
    database the loop polls) stops the stream; its attempt is billed."""
    fake_llm.script(slow())
    stop_after(chat.stream("Talk"), 3, stop=lambda: Chat.objects.get(pk=chat.pk).cancel())
    reply = chat.messages.get(role="assistant")
    row = Usage.objects.get(chat=chat)
    assert row.message_id == reply.pk and reply.content.startswith("word " * 3)
    assert_billed(row, reply.content, unseen="word ")


def test_an_interrupt_bills_the_attempt_it_stopped(chat, fake_llm):
    fake_llm.script(slow())
    stop_after(chat.stream("Talk"), 2, stop=lambda: Chat.objects.get(pk=chat.pk).interrupt("x"))
    assert chat.runs.get().status == Run.INTERRUPTED
    reply = chat.messages.get(role="assistant")
    assert_billed(Usage.objects.get(chat=chat), reply.content, unseen="word ")


def test_a_stop_counts_the_reasoning_and_tool_arguments_that_streamed(chat, fake_llm):
    """A reply stopped in its tool call's arguments, after its reasoning: nothing is
    stored of the step, and the attempt is billed for both."""
    reasoning = "Let me think about it. " * 4
    fake_llm.script(
        slow(
            Reply(
                thinking=reasoning,
                tool_calls=[ScriptedCall("look_up", {"query": "q" * 200})],
                chunk_size=6,
            )
        )
    )
    seen, events = [], chat.stream("Look it up")
    for event in events:
        seen.append(event)
        if sum(isinstance(e, ToolCallDelta) for e in seen) == 3:
            events.close()
            break
    streamed = "".join(e.content for e in seen if isinstance(e, ReasoningDelta))
    arguments = "".join(e.arguments_delta for e in seen if isinstance(e, ToolCallDelta))
    assert streamed == reasoning and arguments
    assert not chat.messages.filter(role="assistant").exists()
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated) == (Usage.CANCELLED, True)
    assert row.output_tokens == estimate_tokens(  # the call's name streamed with it
        ProviderMessage(
            role="assistant", content="look_up" + arguments, thinking=Thinking(streamed)
        )
    )
    assert row.thinking_tokens == estimate_tokens(
        ProviderMessage(role="assistant", content="", thinking=Thinking(streamed))
    )
    assert row.input_tokens > 0 and row.total_cost > 0


def test_a_model_without_a_price_keeps_its_estimated_tokens(user, fake_llm):
    """The one cost left unknown: a model the registry has no price for."""
    fake_llm.configure("openai", "house-model-7")
    chat = Chat.objects.create(user=user, provider="openai", model_id="house-model-7")
    fake_llm.script(slow())
    stop_after(chat.stream("Talk"), 2)
    row = Usage.objects.get(chat=chat)
    assert row.estimated and row.input_tokens > 0 and row.output_tokens > 0
    assert row.total_cost is None


def test_five_stops_are_five_priced_rows_the_limits_count(chat, fake_llm, user):
    for _ in range(5):
        fake_llm.script(slow())
        stop_after(chat.stream("Talk"), 2)
    rows = list(Usage.objects.filter(chat=chat))
    assert len(rows) == 5 and len(fake_llm.requests) == 5
    assert all(r.estimated and r.status == Usage.CANCELLED and r.total_cost > 0 for r in rows)
    spent = limits.spend(user.pk)
    assert spent["usd_per_day"] == sum(r.total_cost for r in rows) > 0
    assert spent["tokens_per_day"] == sum(r.input_tokens + r.output_tokens for r in rows)


def test_a_limit_refuses_once_stopped_replies_spent_it(chat, fake_llm, user):
    """Stopped replies are what the budget sees: once they spent the day's dollars, the
    next prompt is refused at the door."""
    from django_llmchat.errors import BudgetExceededError

    fake_llm.script(slow())
    stop_after(chat.stream("Talk"), 3)
    spent = Usage.objects.get(chat=chat).total_cost
    fake_llm.configure("openai", MODEL, LIMITS={"default": {"usd_per_day": str(spent)}})
    with pytest.raises(BudgetExceededError):
        chat.ask("More")
    assert len(fake_llm.requests) == 1


def test_a_reply_that_finished_keeps_the_vendors_counts(chat, fake_llm):
    fake_llm.script(Reply("Hi.", usage={"input_tokens": 7, "output_tokens": 2}))
    chat.ask("Hello")
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated, row.input_tokens, row.output_tokens) == (
        Usage.SUCCEEDED,
        False,
        7,
        2,
    )


def test_a_stream_that_broke_mid_reply_bills_what_streamed(chat, fake_llm):
    """The vendor's stream broke after text came (no terminal event): the attempt
    failed, and is billed for what it sent, estimated."""
    from django_llmchat.errors import IncompleteStreamError

    fake_llm.configure("openai", MODEL, MAX_RETRIES=0)
    fake_llm.script(Fault(cut_after=6, cut_cleanly=True, reply=Reply("word " * 40, chunk_size=5)))
    text = ""
    with pytest.raises(IncompleteStreamError):
        for event in chat.stream("Talk"):
            if isinstance(event, TextDelta):
                text += event.content
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated) == (Usage.FAILED, True)
    assert text and row.output_tokens == weigh(text)
    assert row.input_tokens > 0 and row.total_cost > 0


def test_a_refused_request_is_not_billed(chat, fake_llm):
    """An HTTP error before any answer: the vendor charged nothing, the row says so."""
    from django_llmchat.errors import ProviderError

    fake_llm.configure("openai", MODEL, MAX_RETRIES=0)
    fake_llm.script(Fault(status=400))
    with pytest.raises(ProviderError):
        list(chat.stream("Talk"))
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated, row.output_tokens, row.total_cost) == (
        Usage.FAILED,
        False,
        None,
        None,
    )


def test_the_admin_shows_a_stopped_replys_tokens_and_cost_as_estimated(
    chat, fake_llm, admin_client
):
    from django.urls import reverse

    from django_llmchat.admin.base import _money

    fake_llm.script(slow())
    stop_after(chat.stream("Talk"), 3)
    row = Usage.objects.get(chat=chat)
    page = admin_client.get(reverse("admin:django_llmchat_chat_change", args=[chat.pk]))
    html = page.content.decode()
    assert f"~{_money(row.total_cost)} (estimated)" in html  # the reply, and the total
    assert html.count("(estimated)") == 2 and "cost unknown" not in html
    ledger = admin_client.get(reverse("admin:django_llmchat_usage_changelist")).content.decode()
    assert ledger.count("(estimated)") == 3  # its input, output and cost


def _first_text(events) -> None:
    for event in events:
        if isinstance(event, TextDelta):
            return


def test_a_run_taken_over_mid_stream_bills_the_attempt_it_lost(chat, fake_llm):
    """Its lease ran out and another process took the run over: this process stores no
    step, and the attempt it was making is billed for what it received."""
    from django_llmchat.errors import RunLostError

    fake_llm.script(slow())
    events = chat.stream("Talk")
    _first_text(events)
    run = chat.runs.get()
    Run.objects.filter(pk=run.pk).update(attempt=run.attempt + 1, worker="other:2")
    with pytest.raises(RunLostError):
        list(events)
    assert not chat.messages.filter(role="assistant").exists()
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated) == (Usage.CANCELLED, True)
    assert row.input_tokens > 0 and row.output_tokens >= weigh("word ") and row.total_cost > 0


def test_the_attempt_of_a_process_that_died_stays_counted_as_lost(chat, fake_llm, user):
    """A process that dies mid-attempt writes nothing more: the process taking the run
    over marks its pending row ``lost``, the estimate written before the call kept, and
    the limits count it."""
    from datetime import timedelta

    from django.utils import timezone

    from django_llmchat import runs
    from django_llmchat.errors import RunLostError

    fake_llm.script(slow())
    events = chat.stream("Talk")
    _first_text(events)
    run = chat.runs.get()
    # the process is gone: its lease ran out, another worker claims the run
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
    taken = runs.claim(chat.pk, worker="other:2")
    assert taken.execution is not None and taken.execution.attempt == run.attempt + 1
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated) == (Usage.LOST, True)
    assert row.input_tokens > 0 and row.total_cost > 0
    assert limits.spend(user.pk)["usd_per_day"] == row.total_cost
    taken.execution.finish(Run.CANCELLED)
    with pytest.raises(RunLostError):  # what the dead process would have seen
        list(events)


def test_a_stream_closed_after_its_run_was_taken_over_bills_without_a_reply(chat, fake_llm):
    """The client leaves a stream whose run another process took over meanwhile: the
    text shown is not stored (the run is not this process's), and the attempt is
    billed, linked to no message (the reply it would have had was never written)."""
    fake_llm.script(slow())
    events = chat.stream("Talk")
    _first_text(events)
    run = chat.runs.get()
    Run.objects.filter(pk=run.pk).update(attempt=run.attempt + 1, worker="other:2")
    events.close()  # raises nothing: the close is the client's, the loss is logged
    assert not chat.messages.filter(role="assistant").exists()
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated, row.message_id) == (Usage.CANCELLED, True, None)
    assert row.input_tokens > 0 and row.output_tokens >= weigh("word ") and row.total_cost > 0
