"""The gate: every way into a run (the Python API, REST, REST streamed inline, ui/chat, a
regenerate, a tool-call decision) is admitted under the user's lock in the transaction
that creates the run, so racing requests are admitted one at a time.

Each race releases its threads together at a barrier against the loopback fake provider,
which counts the requests in flight. Threads writing at once need a server database:
on SQLite (one writer at a time, shared-cache locks) the races are skipped; the one-path
tests run everywhere."""

from __future__ import annotations

import json
import threading
import uuid
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Sum
from rest_framework.test import APIClient

from django_llmchat import runs
from django_llmchat.errors import BudgetExceededError
from django_llmchat.models import Chat, Message, Run, ToolCall, Usage
from django_llmchat.tasks import wait_for_background_runs
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call
from django_llmchat.tools import tool
from tests.api.conftest import sse_frames, url
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gpt-4.1-mini"  # $0.40 / $1.60 per million tokens
# a reply costing $0.40: 250,000 output tokens at $1.60 per million
COSTLY = {"input_tokens": 0, "output_tokens": 250_000}
SSE = {"HTTP_ACCEPT": "text/event-stream"}


def needs_server_database():
    if connection.vendor == "sqlite":
        pytest.skip("threads writing at once need a server database (SQLite: one writer)")


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("racer", password="pw")


@pytest.fixture
def limit(fake_llm):
    def limit(**values):
        return fake_llm.configure("openai", MODEL, LIMITS={"default": values})

    return limit


class Provider:
    """The fake provider's responder for a race: counts requests in flight (and the most
    at once), holding each until ``release`` is set when ``hold``."""

    def __init__(self, fake_llm, *, hold: bool, usage: dict | None = None):
        self.lock = threading.Lock()
        self.in_flight = self.most = self.calls = 0
        self.release = threading.Event()
        self.hold = hold
        self.usage = usage or {"input_tokens": 5, "output_tokens": 5}
        fake_llm.server.responder = self

    def __call__(self, request):
        with self.lock:
            self.calls += 1
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            if self.hold:
                assert self.release.wait(60), "the held replies were never released"
            return Reply("answered", usage=self.usage)
        finally:
            with self.lock:
                self.in_flight -= 1


def race(n: int, work) -> list:
    """Run ``work(i)`` in ``n`` threads released together; their outcomes (a value or
    the exception raised), in order."""
    barrier = threading.Barrier(n)
    outcomes: list = [None] * n

    def one(i):
        try:
            barrier.wait(30)
            outcomes[i] = work(i)
        except Exception as exc:
            outcomes[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return threads, outcomes


def finish(threads, provider: Provider | None = None, *, settled=None) -> None:
    """Release the held replies once ``settled()`` (every refusal is in), then join."""
    if provider is not None and provider.hold:
        if settled is not None:  # or a second call came in: the race is lost, fail now
            wait_until(lambda: settled() or provider.calls > 1, timeout=60)
        provider.release.set()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a racing request never ended"
    # a queued REST post is answered by a task run in a background thread (no broker)
    assert wait_for_background_runs(120), "a run in the background never ended"


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


# -- the paths, each one request -------------------------------------------------------------
def python_ask(chat):
    return Chat.objects.get(pk=chat.pk).ask("Go?")


def rest_post(chat):
    response = client_for(chat.user).post(
        url("chat-messages", pk=chat.pk), {"content": "Go?"}, format="json"
    )
    return response.status_code, response.json()


def rest_inline(chat):
    response = client_for(chat.user).post(
        url("chat-messages", pk=chat.pk), {"content": "Go?"}, format="json", **SSE
    )
    if not response.streaming:
        return response.status_code, response.json()
    body = b"".join(response.streaming_content).decode()
    response.close()
    return response.status_code, sse_frames(body)


def ui_post(chat, body):
    """``POST ui/chat`` as the chat's user: the status and the streamed text (or the JSON
    refusal)."""
    response = client_for(chat.user).post(
        url("ui-chat"), body, format="json", HTTP_ACCEPT="application/json"
    )
    if not response.streaming:
        return response.status_code, response.json()
    text = b"".join(response.streaming_content).decode()
    response.close()
    return response.status_code, text


def ui_chat(chat):
    # the new message alone, as a client that sends only the last message does (a list
    # holding only it, on a chat that has messages, would be an edit of the first one: a
    # branch, refused with 409 while a run is in progress, before any limit is read);
    # a new message id each time: the same id would be one retried request
    body = {
        "id": str(chat.pk),
        "message": {
            "id": uuid.uuid4().hex,
            "role": "user",
            "parts": [{"type": "text", "text": "Go?"}],
        },
        "trigger": "submit-message",
    }
    return ui_post(chat, body)


def python_ask_new_chat(chat):
    """``Chat(...).ask()``: a chat of the same user, unsaved, saved with its first prompt
    in the admission's transaction (``chat`` only names the user)."""
    return Chat(user=chat.user, provider="openai", model_id=MODEL).ask("Go?")


PATHS = {
    "python": python_ask,
    "new_chat": python_ask_new_chat,
    "rest": rest_post,
    "inline": rest_inline,
    "ui_chat": ui_chat,
}


def refused(outcome) -> bool:
    """A refusal by a limit: the Python exception, or the API's 429."""
    if isinstance(outcome, BudgetExceededError):
        return True
    return isinstance(outcome, tuple) and outcome[0] == 429


def chats_of(user, n: int, *, shared: bool) -> list[Chat]:
    if shared:
        one = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
        return [one] * n
    return [Chat.objects.create(user=user, provider="openai", model_id=MODEL) for _ in range(n)]


# -- concurrent_runs is exact ------------------------------------------------------------------
@pytest.mark.parametrize("shared", [False, True], ids=["own-chats", "one-chat"])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_one_concurrent_run_never_has_two_provider_calls_in_flight(
    path, shared, user, limit, fake_llm
):
    """Eight requests of one user released together under ``concurrent_runs: 1``: one is
    admitted, seven refused, one provider call."""
    needs_server_database()
    limit(concurrent_runs=1)
    provider = Provider(fake_llm, hold=True)
    chats = chats_of(user, 8, shared=shared)
    threads, outcomes = race(8, lambda i: PATHS[path](chats[i]))
    finish(threads, provider, settled=lambda: sum(map(refused, outcomes)) == 7)
    assert sum(map(refused, outcomes)) == 7, outcomes
    assert provider.most == 1 and provider.calls == 1
    assert Run.objects.filter(chat__user=user).count() == 1  # refusals store nothing
    assert Message.objects.filter(chat__user=user, role="user").count() == 1


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_budget_below_one_reply_pays_at_most_one_call_per_concurrent_run(
    path, user, limit, fake_llm
):
    """``usd_per_day: 0.01`` and ``concurrent_runs: 2``, twenty $0.40 asks at once
    (replies not held: runs end while others arrive): at most two are paid for."""
    needs_server_database()
    limit(usd_per_day="0.01", concurrent_runs=2)
    provider = Provider(fake_llm, hold=False, usage=COSTLY)
    chats = chats_of(user, 20, shared=False)
    threads, outcomes = race(20, lambda i: PATHS[path](chats[i]))
    finish(threads)
    paid = Usage.objects.filter(user_id=user.pk, status=Usage.SUCCEEDED)
    admitted = Run.objects.filter(chat__user=user).count()
    assert provider.calls <= admitted <= 2 and paid.count() == provider.calls >= 1
    # an admitted run whose turn came after the first reply was paid is stopped by the
    # budget before its call: admitted, not refused at the door
    assert sum(map(refused, outcomes)) == 20 - admitted, outcomes
    stopped = Run.objects.filter(chat__user=user, status=Run.INTERRUPTED).count()
    assert stopped == admitted - provider.calls
    assert paid.aggregate(s=Sum("total_cost"))["s"] <= Decimal("0.80")


def test_every_path_together_under_one_concurrent_run(user, limit, fake_llm):
    """Two requests on each path, all released together: one provider call in all."""
    needs_server_database()
    limit(concurrent_runs=1)
    provider = Provider(fake_llm, hold=True)
    names = sorted(PATHS) * 2
    chats = chats_of(user, len(names), shared=False)
    threads, outcomes = race(len(names), lambda i: PATHS[names[i]](chats[i]))
    finish(threads, provider, settled=lambda: sum(map(refused, outcomes)) == len(names) - 1)
    assert provider.most == 1 and provider.calls == 1


# -- regenerate --------------------------------------------------------------------------------
def ui_regenerate(chat):
    body = {"id": str(chat.pk), "messages": [], "trigger": "regenerate-message"}
    return ui_post(chat, body)


def test_racing_regenerates_leave_one_reply(user, fake_llm):
    """Ten regenerates of one chat's reply at once: one wins, the others get 409 (a run is
    in progress) or, arriving after it ended, regenerate that reply; one reply is left."""
    needs_server_database()
    fake_llm.configure("openai", MODEL)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    fake_llm.script("First reply.")
    chat.ask("Tell me.")
    provider = Provider(fake_llm, hold=True)
    threads, outcomes = race(10, lambda i: ui_regenerate(chat))
    finish(
        threads,
        provider,
        settled=lambda: sum(1 for o in outcomes if isinstance(o, tuple) and o[0] == 409) == 9,
    )
    assert [o[0] for o in outcomes].count(409) == 9, outcomes
    replies = Message.objects.filter(chat=chat, role="assistant")
    assert [m.content for m in chat.transcript()] == ["Tell me.", "answered"]
    assert list(replies.values_list("content", flat=True)) == ["First reply.", "answered"]
    assert list(chat.messages.filter(role="user").values_list("content", flat=True)) == ["Tell me."]
    assert Usage.objects.filter(chat=chat).count() == 2  # the first reply's usage stays


def test_a_regenerate_while_a_run_works_is_a_409_and_drops_nothing(user, fake_llm, limit):
    fake_llm.configure("openai", MODEL)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    fake_llm.script("First reply.")
    chat.ask("Tell me.")
    Run.objects.create(chat=chat, status=Run.QUEUED)
    status, body = ui_regenerate(chat)
    assert status == 409 and "in progress" in body["detail"]
    assert chat.messages.filter(role="assistant", on_path=True).count() == 1


def test_a_regenerate_over_a_limit_is_a_429_and_keeps_the_reply(user, fake_llm, limit):
    limit(runs_per_hour=1)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    fake_llm.script("First reply.")
    chat.ask("Tell me.")
    status, body = ui_regenerate(chat)
    assert status == 429 and body["code"] == "budget_exceeded" and body["limit"] == "runs_per_hour"
    # refused in the transaction that would have dropped it: the reply is still there
    assert list(chat.messages.values_list("content", flat=True)) == ["Tell me.", "First reply."]


# -- tool-call decisions -----------------------------------------------------------------------
@tool(requires_approval=True)
def launch(target: str) -> str:
    """Launches at a target"""
    return f"launched at {target}"


def test_the_last_decision_queues_its_run_through_the_gate(user, limit, fake_llm):
    """A decision that would resume a run over ``concurrent_runs`` is refused (429) and
    not recorded: the run still waits, the call can be decided later."""
    limit(concurrent_runs=1)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    chat.with_tools(launch)
    fake_llm.script(Reply(tool_calls=[Call("launch", {"target": "moon"}, call_id="c1")]))
    chat.ask("Launch.")
    assert chat.last_run.status == Run.AWAITING_APPROVAL
    other = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    Run.objects.create(chat=other, status=Run.RUNNING, attempt=1)  # the user's one run
    response = client_for(user).post(
        url("tool-call-approve", pk=chat.pk, call_id="c1"), format="json"
    )
    assert response.status_code == 429 and response.json()["limit"] == "concurrent_runs"
    call = ToolCall.objects.get(call_id="c1")
    assert call.approval == "" and chat.runs.get().status == Run.AWAITING_APPROVAL
    Run.objects.filter(chat=other).update(status=Run.SUCCEEDED)
    fake_llm.script("Launched.")
    response = client_for(user).post(
        url("tool-call-approve", pk=chat.pk, call_id="c1"), format="json"
    )
    assert response.status_code == 202
    wait_until(lambda: chat.runs.get().status == Run.SUCCEEDED)


def test_racing_decisions_on_one_call_record_one(user, fake_llm):
    needs_server_database()
    fake_llm.configure("openai", MODEL)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    chat.with_tools(launch)
    fake_llm.script(Reply(tool_calls=[Call("launch", {"target": "moon"}, call_id="c1")]))
    chat.ask("Launch.")
    provider = Provider(fake_llm, hold=False)
    verbs = ["tool-call-approve", "tool-call-deny"] * 4

    def decide(i):
        response = client_for(user).post(url(verbs[i], pk=chat.pk, call_id="c1"), format="json")
        return response.status_code

    threads, outcomes = race(len(verbs), decide)
    finish(threads)
    assert sorted(outcomes) == [202] + [409] * (len(verbs) - 1), outcomes
    wait_until(lambda: chat.runs.get().status == Run.SUCCEEDED)
    assert provider.calls == 1
    assert Message.objects.filter(chat=chat, role="tool").count() == 1


# -- cancel ------------------------------------------------------------------------------------
def test_racing_cancels_end_the_run_once(user, fake_llm):
    needs_server_database()
    fake_llm.configure("openai", MODEL)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="Later."))

    def cancel(i):
        return client_for(user).post(url("chat-cancel", pk=chat.pk), format="json").status_code

    threads, outcomes = race(8, cancel)
    finish(threads)
    run.refresh_from_db()
    assert run.status == Run.CANCELLED
    assert all(code in (200, 202, 409) for code in outcomes), outcomes


# -- admission happens once, in the run's transaction ------------------------------------------
def test_a_refused_ask_sends_the_signal_after_nothing_was_stored(user, limit, fake_llm):
    from django_llmchat.signals import budget_exceeded

    limit(runs_per_hour=0)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    seen = []

    def receiver(sender, **kwargs):
        # the refused run's transaction was rolled back before the signal: a receiver
        # writing here is not undone with it
        seen.append((kwargs["limit"], Message.objects.filter(chat=chat).count()))

    budget_exceeded.connect(receiver)
    try:
        with pytest.raises(BudgetExceededError):
            chat.ask("Go?")
    finally:
        budget_exceeded.disconnect(receiver)
    assert seen == [("runs_per_hour", 0)]
    assert fake_llm.requests == []


def test_the_admission_check_runs_once_per_ask(user, limit, fake_llm):
    """The check admitting a run also serves its first provider call: one spend query."""
    from django.test.utils import CaptureQueriesContext

    limit(usd_per_day="5.00")
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    fake_llm.script("warm", "Hi.")
    chat.ask("warm up")
    with CaptureQueriesContext(connection) as ctx:
        chat.ask("Hello")
    spend = [q for q in ctx.captured_queries if "llmchat_usage" in q["sql"] and "SUM" in q["sql"]]
    assert len(spend) == 1


def test_a_run_taken_over_marks_its_dead_attempt_lost_and_the_limits_count_it(
    user, limit, fake_llm
):
    """A process died mid-attempt: its pending row (estimated) is marked lost by the
    takeover, and counts against the limits as what it is known to have cost."""
    limit(tokens_per_day=10_000_000)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    run, execution = runs.enqueue(chat, Message(chat=chat, role="user", content="Hi"), start=True)
    Usage.objects.create(
        chat=chat,
        user_id=user.pk,
        run=run,
        provider="openai",
        model_id=MODEL,
        status=Usage.PENDING,
        estimated=True,
        input_tokens=1234,
        total_cost=Decimal("0.0004936"),
    )
    execution.lost = True  # the dead process renews nothing
    Run.objects.filter(pk=run.pk).update(lease_expires_at="2000-01-01T00:00:00Z")
    from django_llmchat.runs import limits

    before = limits.spend(user.pk)["tokens_per_day"]
    found = runs.claim(chat.pk)
    assert found.execution is not None and found.execution.attempt == 2
    row = Usage.objects.get(run=run)
    assert row.status == Usage.LOST and row.estimated and row.input_tokens == 1234
    assert "stopped" in row.error
    assert limits.spend(user.pk)["tokens_per_day"] == before == 1234
    found.execution.finish(Run.FAILED)


def test_a_regenerate_keeps_the_dropped_replys_usage_on_the_ledger(user, fake_llm):
    fake_llm.configure("openai", MODEL)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    fake_llm.script(Reply("One.", usage=COSTLY))
    chat.ask("Q")
    runner = chat.runner()
    fake_llm.script("Two.")
    runner.admit(None, regenerate=True)
    runner.take_turn()
    list(runner.run(stream=False))
    assert [m.content for m in chat.transcript()] == ["Q", "Two."]
    assert list(chat.messages.values_list("content", flat=True)) == ["Q", "One.", "Two."]
    assert Usage.objects.filter(chat=chat).count() == 2
    assert json.dumps(fake_llm.requests[-1].body).count("One.") == 0


# -- a USD budget holds without a concurrency limit --------------------------------------------
def python_ask_later(chat):
    """``chat.ask_later()``: the run is queued, the task (in a background thread, no
    broker) answers it."""
    return Chat.objects.get(pk=chat.pk).ask_later("Go?")


PATHS_LATER = {**PATHS, "ask_later": python_ask_later}


def reservation_of_a_go() -> Decimal:
    """What a run asking "Go?" on a new chat reserves: its prompt's estimate and the
    default output reservation (4,096 tokens), at gpt-4.1-mini's prices."""
    from django_llmchat.runs import limits

    found = limits.reservation(Chat(provider="openai", model_id=MODEL), limits.prompt_tokens("Go?"))
    assert Decimal("0.0065") < found < Decimal("0.0066")  # 4,100 tokens, nearly all output
    return found


@pytest.mark.parametrize("held", [True, False], ids=["held", "not-held"])
@pytest.mark.parametrize("path", sorted(PATHS_LATER))
def test_a_usd_budget_alone_pays_at_most_one_call_past_it(path, held, user, limit, fake_llm):
    """Only ``usd_per_day: 0.01`` (no ``concurrent_runs``), twenty asks of a reply costing
    $0.40 released together: the first run admitted reserves its expected cost ($0.0066),
    which leaves too little for a second; once it is paid for, the budget is spent. One
    paid call, every other request refused at the door, nothing reserved at the end."""
    needs_server_database()
    reservation_of_a_go()
    limit(usd_per_day="0.01")
    provider = Provider(fake_llm, hold=held, usage=COSTLY)
    chats = chats_of(user, 20, shared=False)
    threads, outcomes = race(20, lambda i: PATHS_LATER[path](chats[i]))
    finish(threads, provider, settled=lambda: sum(map(refused, outcomes)) == 19)
    paid = Usage.objects.filter(user_id=user.pk, status=Usage.SUCCEEDED)
    assert provider.calls == 1 and paid.count() == 1, outcomes
    assert sum(map(refused, outcomes)) == 19, outcomes
    assert Run.objects.filter(chat__user=user).count() == 1  # refusals store nothing
    assert Run.objects.get(chat__user=user).status == Run.SUCCEEDED
    assert paid.aggregate(s=Sum("total_cost"))["s"] == Decimal("0.40")
    from django_llmchat.runs import limits

    assert limits.spend(user.pk)["usd_reserved"] == 0  # released with the run's end


def test_racing_runs_are_admitted_while_their_reservations_fit(user, limit, fake_llm):
    """A budget of two reservations and a bit: of twenty racing asks two are admitted and
    call the provider at once, the others are refused with the reason (the budget leaves
    too little for their expected cost)."""
    needs_server_database()
    each = reservation_of_a_go()
    limit(usd_per_day=str(each * 2 + Decimal("0.0001")))
    provider = Provider(fake_llm, hold=True)
    chats = chats_of(user, 20, shared=False)
    threads, outcomes = race(20, lambda i: python_ask(chats[i]))
    # the two calls are held until every refusal is in (or a third call came: lost)
    wait_until(lambda: sum(map(refused, outcomes)) == 18 or provider.calls > 2, timeout=60)
    finish(threads, provider)
    refusals = [o for o in outcomes if refused(o)]
    assert len(refusals) == 18 and provider.most == provider.calls == 2, outcomes
    assert {o.limit for o in refusals} == {"usd_per_day"}
    assert {o.message for o in refusals} == {
        "The daily spending limit leaves too little for this run's expected cost."
    }
    # what counted: the two admitted runs' reservations, and the estimated input of their
    # calls in flight (their pending usage rows)
    assert all(each * 2 < o.used < each * 2 + Decimal("0.0001") for o in refusals)


@pytest.mark.parametrize("path", sorted(PATHS_LATER))
def test_a_run_whose_reservation_alone_passes_the_budget_is_refused_on_every_path(
    path, user, limit, fake_llm
):
    """``usd_per_day: 0.005``, below one run's expected cost: refused before anything is
    stored (REST and ui/chat: 429 with the reason)."""
    limit(usd_per_day="0.005")
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    try:
        outcome = PATHS_LATER[path](chat)
    except BudgetExceededError as exc:
        outcome = exc
    reason = "The daily spending limit leaves too little for this run's expected cost."
    if isinstance(outcome, tuple):
        status, body = outcome
        assert (status, body["code"], body["limit"]) == (429, "budget_exceeded", "usd_per_day")
        assert body["detail"] == reason and Decimal(body["used"]) == 0
    else:
        assert isinstance(outcome, BudgetExceededError) and outcome.message == reason
    assert fake_llm.requests == []
    assert not Run.objects.exists() and not Message.objects.exists()
    assert list(Chat.objects.values_list("pk", flat=True)) == [chat.pk]  # a new one unsaved
