"""Runs in this process: every reply has a Run row that ends, whatever happens to the
caller (a stream never read or dropped, a provider that repeats tool-call ids, a guardrail
that blocks a streamed reply, two processes racing for one transition)."""

from __future__ import annotations

import gc
import json
import threading
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_llmchat import runs
from django_llmchat.agents import Agent
from django_llmchat.errors import ChatBusyError, RunLostError
from django_llmchat.events import GuardrailTripwire, RunFinished, RunStarted, TextDelta, TextDone
from django_llmchat.guardrails import Guardrail, GuardrailResult
from django_llmchat.models import Chat, Message, Run, ToolCall, Usage
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing import ToolCall as Call
from django_llmchat.tools import tool
from tests.factories import taken_run
from tests.waiting import wait_until, when_unlocked

pytestmark = pytest.mark.django_db(transaction=True)


@tool
def echo(n: int) -> str:
    """Echoes a number"""
    return f"echo {n}"


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    return Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")


def run_statuses(chat):
    return list(chat.runs.order_by("id").values_list("status", flat=True))


# -- every run has a row and an end --------------------------------------------------------
def test_a_reply_knows_its_run_and_the_chat_its_last_run(chat, fake_llm):
    fake_llm.script("Hi.")
    reply = chat.ask("Hello")
    run = chat.last_run
    assert reply.run == run and run.status == "succeeded" and run.message == reply
    assert run.prompt.content == "Hello" and run.steps == 1 and run.attempt == 1
    assert run.started_at and run.finished_at and run.lease_expires_at is None
    assert run.tokens == reply.tokens and run.cost() == reply.cost()
    fresh = Chat.objects.get(pk=chat.pk)
    assert fresh.last_run == run and fresh.status == "idle" and fresh.active_run is None


def test_a_stream_never_iterated_stores_and_marks_nothing(chat, fake_llm):
    events = chat.stream("hi")
    del events
    gc.collect()
    assert not chat.messages.exists() and not chat.runs.exists()
    assert Chat.objects.get(pk=chat.pk).status == "idle"
    assert fake_llm.requests == []


def test_a_stream_dropped_mid_reply_ends_cancelled_with_its_usage_row(chat, fake_llm):
    fake_llm.script(Fault(chunk_delay=0.01, reply=Reply("word " * 100, chunk_size=5)))
    events = chat.stream("talk")
    started = next(events)
    assert isinstance(started, RunStarted) and started.run_id == str(chat.runs.get().pk)
    assert isinstance(next(events), TextDelta)
    assert Chat.objects.get(pk=chat.pk).status == "running"
    del events  # dropped: the generator is closed
    gc.collect()
    run = chat.runs.get()
    assert run.status == "cancelled" and run.interrupt_reason == "stream_closed"
    usage = Usage.objects.get(run=run)
    assert usage.status == "cancelled"
    # the text the caller had seen is the reply, linked to the attempt's usage row
    user, reply = chat.transcript()
    assert (user.role, reply.role, reply.finish_reason) == ("user", "assistant", "cancelled")
    assert reply.content == "word "[:5] and usage.message_id == reply.pk
    assert Chat.objects.get(pk=chat.pk).status == "idle"
    fake_llm.script("Again.")
    assert chat.ask("Once more").content == "Again."  # the chat is free


def test_a_stream_closed_mid_reply_ends_cancelled(chat, fake_llm):
    fake_llm.script(Fault(chunk_delay=0.01, reply=Reply("word " * 100, chunk_size=5)))
    events = chat.stream("talk")
    next(events)
    next(events)
    events.close()
    assert run_statuses(chat) == ["cancelled"]


def test_a_stream_closed_at_run_started_ends_cancelled(chat, fake_llm):
    """Closed after its first event, before the loop began: the run still ends."""
    events = chat.stream("talk")
    assert isinstance(next(events), RunStarted)
    events.close()
    run = chat.runs.get()
    assert (run.status, run.interrupt_reason) == ("cancelled", "stream_closed")
    assert Chat.objects.get(pk=chat.pk).status == "idle"
    fake_llm.script("Again.")
    assert chat.ask("Once more").content == "Again."


def test_an_unsaved_chat_stream_without_a_prompt_fails_at_once(fake_llm):
    """Nothing to continue: refused when called, not at the first ``next()`` (with a
    prompt, the stream saves the chat with it)."""
    from django_llmchat.errors import ArgumentError

    with pytest.raises(ArgumentError, match="saved with its first prompt"):
        Chat().stream()


# -- tool-call ids as vendors send them -----------------------------------------------------
def test_repeated_and_empty_tool_call_ids_are_stored_and_replayed(provider_chat, fake_llm):
    chat = provider_chat
    chat.with_tools(echo)
    fake_llm.script(
        Reply(
            tool_calls=[
                Call("echo", {"n": 0}, call_id="call_0"),
                Call("echo", {"n": 1}, call_id="call_0"),  # a repeated id
                Call("echo", {"n": 2}, call_id=""),  # no id at all
            ]
        ),
        Reply("0, 1 and 2."),
    )
    reply = chat.ask("Echo 0, 1 and 2")
    assert reply.content == "0, 1 and 2." and chat.last_run.status == "succeeded"
    calls = list(ToolCall.objects.filter(chat=chat).order_by("id"))
    assert [c.call_id for c in calls] == ["call_0", "call_0", ""]
    # each result answers its own call
    for call in calls:
        assert call.get_result().content == f"echo {call.arguments['n']}"
    # the follow-up request carries the three results, in the calls' order
    body = json.dumps(fake_llm.requests[1].body)
    places = [body.index(f"echo {n}") for n in range(3)]
    assert places == sorted(places)
    # GET on the API and the Python API both read them
    assert [m.tool_call_id for m in chat.transcript() if m.role == "tool"] == [
        "call_0",
        "call_0",
        "",
    ]


# -- after-guardrails hold streamed text back -----------------------------------------------
class NoSecrets(Guardrail):
    id = "no_secrets"

    def check(self, text, *, phase, context):
        if phase == "after" and "secret" in text:
            return GuardrailResult.block("it told a secret")
        if phase == "after" and "shout" in text:
            return GuardrailResult.transform(text.upper())
        return None


class Careful(Agent):
    guardrails = [NoSecrets]


def test_a_streamed_reply_an_after_guardrail_blocks_never_leaves(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Careful.start_chat()
    fake_llm.script(Reply("The secret is swordfish.", chunk_size=3))
    events = list(chat.stream("Tell me"))
    assert not any(isinstance(e, TextDelta | TextDone) for e in events)
    # a word, not a number: the events carry ids, which may hold any digits
    assert "swordfish" not in json.dumps([e.to_dict() for e in events])
    tripwire = next(e for e in events if isinstance(e, GuardrailTripwire))
    assert tripwire.phase == "after" and tripwire.reason == "it told a secret"
    assert not chat.messages.filter(role="assistant").exists()
    run = chat.runs.get()
    assert run.status == "failed" and run.error_type == "guardrail_tripwire"
    # the tokens were spent: the attempt has its usage row
    assert Usage.objects.filter(run=run).count() == 1


def test_a_streamed_reply_that_passes_comes_out_whole_after_the_check(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Careful.start_chat()
    fake_llm.script(Reply("All fine here.", chunk_size=3), Reply("please shout", chunk_size=3))
    events = list(chat.stream("Hi"))
    assert "".join(e.content for e in events if isinstance(e, TextDelta)) == "All fine here."
    assert len([e for e in events if isinstance(e, TextDelta)]) > 1  # still deltas
    events = list(chat.stream("Loud"))
    assert [e.content for e in events if isinstance(e, TextDelta)] == ["PLEASE SHOUT"]
    assert chat.messages.filter(role="assistant").last().content == "PLEASE SHOUT"


# -- one owner per transition ---------------------------------------------------------------
def _working(chat, seconds=60):
    return taken_run(chat, lease=seconds)


def test_ask_waits_for_the_run_ahead_then_answers(chat, fake_llm, monkeypatch):
    ahead = _working(chat)
    fake_llm.script("Second.")
    done = threading.Event()
    answers, errors = [], []
    # The run ahead ends while the asking thread sleeps between two looks at its turn, so
    # that the two never write at once: shared-cache SQLite refuses a write beside another
    # thread's transaction at once ("table is locked"), where a server database waits.
    between, go_on = threading.Event(), threading.Event()

    class _GatedTime:
        def __getattr__(self, name):
            return getattr(time, name)

        def sleep(self, seconds):
            if threading.current_thread() is asker and not go_on.is_set():
                between.set()
                go_on.wait(30)
            else:
                time.sleep(seconds)

    monkeypatch.setattr(runs.claims, "time", _GatedTime())

    def ask():
        try:
            answers.append(chat.ask("Me next").content)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()
            done.set()

    asker = threading.Thread(target=ask)
    asker.start()
    # queued behind the working run, its caller waiting for it (holding its lease)
    wait_until(
        lambda: (
            Run.objects.filter(chat=chat, status="queued", lease_expires_at__isnull=False)
            .order_by("id")
            .first()
        ),
        interval=0.1,  # few reads beside the asking thread's writes (shared-cache SQLite)
    )
    assert between.wait(30), errors
    assert not done.is_set()  # cannot end before the run ahead does
    try:
        when_unlocked(lambda: runs.Execution(ahead, worker="elsewhere:1").finish("succeeded"))
    finally:
        go_on.set()
    assert done.wait(60) and not errors and answers == ["Second."]
    assert run_statuses(chat) == ["succeeded", "succeeded"]


def test_two_asks_on_one_chat_at_once_never_overlap(chat, fake_llm):
    """A chat's runs exclude each other: while the first ask waits on the provider, a
    second ask on the chat queues behind it, and sends its request only once the first
    reply is stored (its history carries it)."""
    if connection.vendor == "sqlite":
        pytest.skip("two writers at once need a server database (shared-cache SQLite locks)")
    release = threading.Event()

    def held(request):
        assert release.wait(30), "the first reply was never released"
        return Reply("First answer.")

    fake_llm.script(held, "Second answer.")
    answers, errors = {}, []

    def ask(text):
        try:
            answers[text] = Chat.objects.get(pk=chat.pk).ask(text).content
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    first = threading.Thread(target=ask, args=("First?",))
    second = threading.Thread(target=ask, args=("Second?",))
    first.start()
    try:
        fake_llm.server.wait_for_requests(1, timeout=15)  # the first run is on the provider
        second.start()
        # the second ask stored its run: queued behind the first, not running beside it
        wait_until(lambda: chat.runs.count() == 2)
        assert run_statuses(chat) == ["running", "queued"]
        assert len(fake_llm.requests) == 1
    finally:
        release.set()
        first.join(30)
        if second.ident is not None:
            second.join(30)
    assert not errors
    assert answers == {"First?": "First answer.", "Second?": "Second answer."}
    _, later = fake_llm.requests
    assert "First answer." in json.dumps(later.body)  # sent after the first reply was stored
    assert [m.content for m in chat.transcript()] == [
        "First?",
        "First answer.",
        "Second?",
        "Second answer.",
    ]
    assert run_statuses(chat) == ["succeeded", "succeeded"]


def test_ask_while_the_run_waits_for_a_decision_is_refused(chat, fake_llm):
    Run.objects.create(chat=chat, status="awaiting_approval", attempt=1)
    with pytest.raises(ChatBusyError, match="approve or deny"):
        chat.ask("Hello?")
    assert not chat.messages.exists()


def test_a_process_that_lost_its_run_stores_no_step(chat, fake_llm):
    fake_llm.script(Fault(chunk_delay=0.02, reply=Reply("late " * 20, chunk_size=5)))
    events = chat.stream("Q")
    next(events)
    run = chat.runs.get()
    # its lease ran out and another process took the run over
    Run.objects.filter(pk=run.pk).update(attempt=run.attempt + 1, worker="other:2")
    with pytest.raises(RunLostError):
        list(events)
    assert not chat.messages.filter(role="assistant").exists()
    run.refresh_from_db()
    assert run.status == "running" and run.worker == "other:2"  # left to its new owner
    assert list(Usage.objects.filter(run=run).values_list("status", flat=True)) == ["cancelled"]


def test_two_claims_of_one_run_one_wins(chat):
    prompt = chat.add_message(role="user", content="Q")
    dead = taken_run(chat, prompt, lease=-1)
    first = runs.claim(chat.pk, worker="a:1")
    second = runs.claim(chat.pk, worker="b:2")
    assert first.execution is not None and first.execution.attempt == 2
    assert second.execution is None and second.state == runs.BUSY
    dead.refresh_from_db()
    assert dead.worker == "a:1"
    first.execution.finish("succeeded")


@tool(requires_approval=True)
def guarded_pay(amount: int) -> str:
    """Pays"""
    return f"paid {amount}"


def test_concurrent_decisions_on_one_call_one_wins(chat, fake_llm):
    if connection.vendor != "postgresql":
        pytest.skip("eight writers at once need a server database")
    chat.with_tools(guarded_pay)
    fake_llm.script(Reply(tool_calls=[Call("guarded_pay", {"amount": 5}, call_id="c1")]))
    chat.ask("Pay")
    call = ToolCall.objects.get(chat=chat)
    outcomes = []
    barrier = threading.Barrier(8)

    def decide(i):
        try:
            barrier.wait()
            runs.decide(chat.pk, call, "approved" if i % 2 else "denied")
            outcomes.append("won")
        except runs.AlreadyDecided:
            outcomes.append("already")
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(outcomes) == ["already"] * 7 + ["won"]
    assert chat.runs.get().status == "queued"  # the last decision queued the run again


def test_interrupting_a_run_that_waits_for_decisions_answers_its_calls(chat, fake_llm):
    chat.with_tools(guarded_pay)
    fake_llm.script(
        Reply(
            tool_calls=[
                Call("guarded_pay", {"amount": 1}, call_id="c1"),
                Call("guarded_pay", {"amount": 2}, call_id="c2"),
            ]
        )
    )
    chat.ask("Pay both")
    assert Chat.objects.get(pk=chat.pk).status == "awaiting_approval"
    assert chat.interrupt("changed my mind") is True
    run = chat.runs.get()
    assert run.status == "interrupted" and run.interrupt_reason == "changed my mind"
    results = Message.objects.filter(chat=chat, role="tool").order_by("id")
    assert [r.tool_call_id for r in results] == ["c1", "c2"]
    assert Chat.objects.get(pk=chat.pk).status == "idle"
    fake_llm.script("Fine.")
    assert chat.ask("Forget it").content == "Fine."  # a valid transcript to go on from


def test_saving_a_chat_loaded_before_a_run_never_overwrites_its_run_state(chat):
    stale = Chat.objects.get(pk=chat.pk)
    run = _working(chat)
    stale.title = "Renamed"
    stale.save()  # status "idle" and no active run in memory: not written back
    fresh = Chat.objects.get(pk=chat.pk)
    assert fresh.title == "Renamed"
    assert fresh.status == "running" and fresh.active_run_id == run.pk


def test_ask_behind_a_run_whose_process_died_gets_it_resumed_then_answers(chat, fake_llm):
    prompt = chat.add_message(role="user", content="First")
    taken_run(chat, prompt, lease=-1)  # its process is gone and no task will come
    fake_llm.configure("openai", "gpt-4.1-mini", TASKS_EAGER_WITHOUT_BROKER=True)
    fake_llm.script("First answer.", "Second answer.")
    reply = chat.ask("Second")  # waits behind it: the dead run is resumed in a thread
    assert reply.content == "Second answer."
    assert [m.content for m in chat.transcript()] == [
        "First",
        "First answer.",
        "Second",
        "Second answer.",
    ]
    assert run_statuses(chat) == ["succeeded", "succeeded"]


def test_runs_one_after_another_share_the_lease_thread_which_then_ends(chat, fake_llm):
    if connection.vendor == "sqlite":
        pytest.skip("an in-memory database has no other process to prove alive to")
    fake_llm.configure("openai", "gpt-4.1-mini", RUN_LEASE=0.6)
    fake_llm.script("One.", "Two.", "Three.")
    keeper = runs._keeper()
    threads = []
    for prompt in ("1", "2", "3"):
        chat.ask(prompt)
        threads.append(keeper.thread)
    assert threads[0] is not None and threads == [threads[0]] * 3
    assert [t.name for t in threading.enumerate()].count("llmchat-leases") == 1
    threads[0].join(timeout=30)  # nothing to renew for a whole tick: it ends
    assert not threads[0].is_alive() and keeper.thread is None and not keeper.connected
    chat.ask("again")  # and the next run starts one
    assert keeper.thread is not None and keeper.thread is not threads[0]


def test_a_run_inside_an_open_transaction_is_not_taken_for_lost(chat, fake_llm):
    """``ATOMIC_REQUESTS`` or a caller's ``atomic`` block: the run row is not committed, so
    the keeper's own connection cannot see it. Its lease is renewed once the block commits,
    never before: a streamed reply slower than a lease tick is still stored."""
    if connection.vendor == "sqlite":
        pytest.skip("an in-memory database has no other process to prove alive to")
    fake_llm.configure("openai", "gpt-4.1-mini", RUN_LEASE=0.6)  # a tick every 0.2 s
    fake_llm.server.first_byte_delay = 1.0
    fake_llm.script("Slow, but mine.")
    keeper = runs._keeper()
    with transaction.atomic():
        events = list(chat.stream("Q"))
        assert not keeper.live
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    assert "".join(e.content for e in events if isinstance(e, TextDelta)) == "Slow, but mine."
    assert run_statuses(chat) == ["succeeded"]
    assert list(chat.messages.values_list("content", flat=True)) == ["Q", "Slow, but mine."]


def test_a_run_claimed_in_an_open_transaction_is_renewed_once_it_commits(chat, fake_llm):
    if connection.vendor == "sqlite":
        pytest.skip("an in-memory database has no other process to prove alive to")
    fake_llm.configure("openai", "gpt-4.1-mini", RUN_LEASE=3.0)
    keeper = runs._keeper()
    with transaction.atomic():
        prompt = chat.add_message(role="user", content="Q")
        run = Run.objects.create(chat=chat, prompt=prompt, status="queued")
        execution = runs.claim(chat.pk, run_id=run.pk).execution
        assert execution not in keeper.live
    assert execution in keeper.live  # committed: now the keeper renews it
    execution.finish("succeeded")
    assert execution not in keeper.live
    with transaction.atomic():
        run = Run.objects.create(chat=chat, prompt=prompt, status="queued")
        execution = runs.claim(chat.pk, run_id=run.pk).execution
        execution.finish("succeeded")
    assert execution not in keeper.live  # ended before the commit: nothing to renew


def test_a_working_process_keeps_renewing_its_lease(chat, fake_llm, settings):
    if connection.vendor == "sqlite":
        pytest.skip("an in-memory database has no other process to prove alive to")

    # A lease of 3 s is renewed every second: a busy machine may delay a renewal by up to
    # two seconds before the lease would lapse.
    fake_llm.configure("openai", "gpt-4.1-mini", RUN_LEASE=3.0)
    prompt = chat.add_message(role="user", content="Q")
    run = Run.objects.create(chat=chat, prompt=prompt, status="queued")
    execution = runs.claim(chat.pk, run_id=run.pk).execution
    first = Run.objects.get(pk=run.pk).lease_expires_at
    # renewed (every third of the lease) before the first lease runs out...
    wait_until(lambda: Run.objects.get(pk=run.pk).lease_expires_at > first, timeout=10)
    # ...and, once the first lease has run out, the run still holds a live one
    wait_until(lambda: timezone.now() > first, timeout=10)
    renewed = Run.objects.get(pk=run.pk).lease_expires_at
    assert renewed > first and renewed > timezone.now()
    assert runs.claim(chat.pk, worker="other:2").state == runs.BUSY  # nobody takes it over
    execution.finish("succeeded")
    assert Run.objects.get(pk=run.pk).lease_expires_at is None


def test_a_stop_mid_reply_stores_the_text_shown_as_the_reply(chat, fake_llm):
    """A cancel asked while the reply streams: the text the caller saw is stored as the
    reply (finish reason ``cancelled``, the attempt's usage row linked), a
    ``StepFinished`` names it, then the run ends cancelled."""
    from django_llmchat.events import Interrupt, StepFinished

    fake_llm.script(Fault(chunk_delay=0.02, reply=Reply("word " * 200, chunk_size=5)))
    seen, texts = [], []
    for event in chat.stream("talk"):
        seen.append(event)
        if isinstance(event, TextDelta):
            texts.append(event.content)
            if len(texts) == 3:
                assert chat.interrupt("cancelled")
    run = chat.runs.get()
    assert run.status == "cancelled"
    reply = chat.messages.get(role="assistant")
    assert reply.content == "".join(texts) and reply.finish_reason == "cancelled"
    finished = [e for e in seen if isinstance(e, StepFinished)]
    assert [e.message_id for e in finished] == [reply.pk]
    assert isinstance(seen[-2], Interrupt) and seen.index(finished[0]) == len(seen) - 3
    assert seen[-1] == RunFinished(
        run_id=str(run.pk),
        status="cancelled",
        message_id=reply.pk,
        token_usage=run.tokens,
        cost=seen[-1].cost,
        estimated=True,  # the stopped attempt is billed by our estimate
    )
    assert list(Usage.objects.filter(run=run).values_list("status", "message_id")) == [
        ("cancelled", reply.pk)
    ]


def test_a_stop_before_any_text_stores_no_reply(chat, fake_llm):
    fake_llm.script(Fault(first_byte_delay=0.5, reply=Reply("late")))
    events = chat.stream("talk")
    pending = threading.Thread(target=lambda: list(events))
    pending.start()
    wait_until(lambda: chat.runs.filter(status="running").exists())
    fake_llm.server.wait_for_requests(1, timeout=15)
    assert chat.interrupt("cancelled")
    pending.join(30)
    assert run_statuses(chat) == ["cancelled"]
    assert not chat.messages.filter(role="assistant").exists()
    assert list(Usage.objects.filter(chat=chat).values_list("status", flat=True)) == ["cancelled"]
