"""Spending limits: refused before any provider request, stopped between steps with the
paid step kept, one query per check, 429 over REST."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_llmchat import runs, signals
from django_llmchat.errors import BudgetExceededError, ProviderError
from django_llmchat.events import BudgetWarning, Interrupt
from django_llmchat.models import Chat, Limit, Message, Run, Usage
from django_llmchat.runs import limits
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call
from django_llmchat.tools import tool

pytestmark = pytest.mark.django_db(transaction=True)


@tool
def lookup(city: str) -> str:
    """Looks a city up"""
    return f"{city}: sunny"


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("spender", password="pw")


@pytest.fixture
def configure(fake_llm):
    def configure(**limit):
        return fake_llm.configure("openai", "gpt-4.1-mini", LIMITS={"default": limit})

    return configure


@pytest.fixture
def chat(fake_llm, user):
    fake_llm.configure("openai", "gpt-4.1-mini")
    return Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")


def spent(chat, usd: str, *, tokens: int = 0, when=None) -> Usage:
    row = Usage.objects.create(
        chat=chat,
        provider="openai",
        model_id="gpt-4.1-mini",
        status=Usage.SUCCEEDED,
        input_tokens=tokens,
        total_cost=Decimal(usd),
    )
    if when is not None:
        Usage.objects.filter(pk=row.pk).update(created_at=when)
    return row


def test_over_the_daily_limit_ask_raises_before_any_request(configure, chat, fake_llm):
    configure(usd_per_day="2.00")
    spent(chat, "1.50")
    spent(chat, "0.50")
    fake_llm.script(Reply("never sent"))
    with pytest.raises(BudgetExceededError) as info:
        chat.ask("hello")
    exc = info.value
    assert exc.limit == "usd_per_day"
    assert exc.used == Decimal("2.00") and exc.allowed == Decimal("2.00")
    tomorrow = timezone.localdate() + timedelta(days=1)
    assert timezone.localtime(exc.resets_at).date() == tomorrow
    assert fake_llm.requests == []
    assert not Message.objects.exists()  # refused before the prompt was stored
    assert not Run.objects.exists()
    with pytest.raises(BudgetExceededError):
        chat.ask_later("hello")
    with pytest.raises(BudgetExceededError):
        next(iter(chat.stream("hello")))
    assert fake_llm.requests == [] and not Message.objects.exists()


def test_yesterday_and_other_users_do_not_count(configure, chat, fake_llm, django_user_model):
    configure(usd_per_day="2.00", usd_per_month="100")
    spent(chat, "5.00", when=timezone.now() - timedelta(days=2))
    other = Chat.objects.create(user=django_user_model.objects.create_user("o"))
    spent(other, "9.00")
    fake_llm.script(Reply("fine"))
    assert chat.ask("hello").content == "fine"


def test_the_monthly_and_token_limits(configure, chat, fake_llm):
    configure(usd_per_month="3.00")
    spent(chat, "2.00", when=timezone.now() - timedelta(hours=1))
    spent(chat, "1.00")
    with pytest.raises(BudgetExceededError) as info:
        chat.ask("hello")
    assert info.value.limit == "usd_per_month"
    assert timezone.localtime(info.value.resets_at).day == 1
    configure(tokens_per_day=1000)
    with pytest.raises(BudgetExceededError) as info:
        spent(chat, "0", tokens=1000)
        chat.ask("hello")
    assert info.value.limit == "tokens_per_day" and info.value.used == 1000
    assert fake_llm.requests == []


def test_a_run_crossing_the_limit_after_a_tool_step_ends_interrupted(configure, chat, fake_llm):
    configure(usd_per_day="0.10")
    chat.tools = ["lookup"]
    chat.save()
    # a million input tokens of gpt-4.1-mini cost $0.40: over the limit after step one
    fake_llm.script(
        Reply(
            tool_calls=[Call("lookup", {"city": "Paris"})],
            usage={"input_tokens": 1_000_000, "output_tokens": 10},
        ),
        Reply("never asked"),
    )
    events = list(chat.stream("weather?"))
    assert len(fake_llm.requests) == 1
    assert Interrupt(reason="budget") in events
    run = chat.last_run
    run.refresh_from_db()
    assert run.status == Run.INTERRUPTED
    assert run.interrupt_reason == "budget"
    assert run.error_type == "budget"
    assert run.error == "The daily spending limit is reached."
    assert run.steps == 1
    # the paid step and its tool result are stored, with the usage row
    roles = list(chat.messages.order_by("position", "id").values_list("role", flat=True))
    assert roles == ["user", "assistant", "tool"]
    assert chat.messages.get(role="tool").content == "Paris: sunny"
    assert Usage.objects.get(run=run).total_cost > Decimal("0.10")
    assert Usage.objects.get(run=run).user_id == chat.user_id  # what the limits sum by


def test_a_queued_run_over_the_limit_in_a_worker_ends_interrupted(configure, chat, fake_llm):
    from django_llmchat.loop.runner import Runner

    configure(usd_per_day="1.00")
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="hi"))
    spent(chat, "1.00")  # spent meanwhile by another run
    runner = Runner(chat)
    runner.resume(run)
    list(runner.run(stream=False))
    run.refresh_from_db()
    assert (run.status, run.interrupt_reason, run.steps) == (Run.INTERRUPTED, "budget", 0)
    assert fake_llm.requests == []


def test_concurrent_runs_the_third_is_refused(configure, chat, fake_llm, user):
    configure(concurrent_runs=2)
    other = Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")
    first, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="one"))
    runs.enqueue(other, Message(chat=other, role="user", content="two"))
    with pytest.raises(BudgetExceededError) as info:
        chat.ask_later("three")
    assert info.value.limit == "concurrent_runs"
    assert info.value.resets_at is None
    assert Run.objects.count() == 2 and Message.objects.count() == 2
    # a run waiting for a decision holds no slot; one that ended frees its own
    assert runs.interrupt(chat.pk, "cancelled", run_id=first.pk)
    fake_llm.script(Reply("three it is"))
    assert chat.ask("three").content == "three it is"


def test_runs_per_hour(configure, chat, fake_llm):
    configure(runs_per_hour=2)
    fake_llm.script(Reply("a"), Reply("b"), Reply("c"))
    chat.ask("1")
    chat.ask("2")
    with pytest.raises(BudgetExceededError) as info:
        chat.ask("3")
    first = Run.objects.order_by("id").first()
    assert info.value.limit == "runs_per_hour"
    assert info.value.resets_at == first.created_at + timedelta(hours=1)
    assert len(fake_llm.requests) == 2


def test_a_limit_row_overrides_the_default_and_unlimited_lifts_it(configure, chat, fake_llm, user):
    configure(usd_per_day="1.00")
    spent(chat, "1.50")
    row = Limit.objects.create(user=user, usd_per_day=Decimal("5.00"))
    fake_llm.script(Reply("ok"), Reply("ok"))
    chat.ask("hello")
    row.usd_per_day = Decimal("1.50")
    row.save()
    with pytest.raises(BudgetExceededError):
        chat.ask("hello")
    row.unlimited = True
    row.save()
    chat.ask("hello")
    assert len(fake_llm.requests) == 2


def group_limits(user):
    return {"usd_per_day": "0.50"} if user.username == "spender" else {}


def test_limits_for_a_group_or_tenant(fake_llm, chat, user):
    fake_llm.configure(
        "openai",
        "gpt-4.1-mini",
        LIMITS={"default": {"usd_per_day": "10"}},
        LIMITS_FOR="tests.runs.test_limits.group_limits",
    )
    spent(chat, "0.60")
    with pytest.raises(BudgetExceededError) as info:
        chat.ask("hello")
    assert info.value.allowed == Decimal("0.50")
    Limit.objects.create(user=user, usd_per_day=Decimal("1"))  # the user's row wins
    fake_llm.script(Reply("ok"))
    chat.ask("hello")


def test_chats_without_a_user_and_limits_off_are_not_checked(fake_llm, chat):
    free = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    fake_llm.configure("openai", "gpt-4.1-mini", LIMITS={"default": {"usd_per_day": "0"}})
    fake_llm.script(Reply("ok"))
    with CaptureQueriesContext(connection) as off:
        free.ask("hello")
    assert not [q for q in off.captured_queries if "llmchat_limit" in q["sql"]]
    fake_llm.configure("openai", "gpt-4.1-mini")  # LIMITS None
    spent(chat, "100")
    fake_llm.script(Reply("ok"))
    chat.ask("hello")


def test_soft_limit_sends_a_signal_and_an_event_once_per_run(configure, chat, fake_llm):
    configure(usd_per_day="1.00", soft="0.5")
    chat.tools = ["lookup"]
    chat.save()
    spent(chat, "0.60")
    seen = []

    def receiver(sender, **kw):
        seen.append((kw["limit"], kw["used"], kw["allowed"], kw["user_id"]))

    signals.budget_warning.connect(receiver)
    try:
        fake_llm.script(Reply(tool_calls=[Call("lookup", {"city": "Oslo"})]), Reply("done"))
        events = list(chat.stream("weather?"))
    finally:
        signals.budget_warning.disconnect(receiver)
    warnings = [e for e in events if isinstance(e, BudgetWarning)]
    assert len(warnings) == 1  # two provider calls, one warning
    assert warnings[0].to_dict()["limit"] == "usd_per_day"
    assert warnings[0].allowed == "1.00"
    assert seen == [("usd_per_day", Decimal("0.60"), Decimal("1.00"), chat.user_id)]
    assert chat.last_run.status == Run.SUCCEEDED


def test_hard_limit_sends_budget_exceeded(configure, chat):
    configure(usd_per_day="1")
    spent(chat, "1")
    seen = []
    signals.budget_exceeded.connect(lambda sender, **kw: seen.append(kw["limit"]), weak=False)
    try:
        with pytest.raises(BudgetExceededError):
            chat.ask("hi")
    finally:
        signals.budget_exceeded.receivers.clear()
    assert seen == ["usd_per_day"]


def budget_queries(captured):
    return [q for q in captured if "llmchat_limit" in q["sql"]]


def test_one_query_per_check_whatever_the_usage(configure, chat, fake_llm):
    configure(
        usd_per_day="100",
        usd_per_month="1000",
        tokens_per_day=10**9,
        runs_per_hour=100,
        concurrent_runs=5,
    )
    chat.tools = ["lookup"]
    chat.save()

    def run_two_steps():
        fake_llm.script(Reply(tool_calls=[Call("lookup", {"city": "Rome"})]), Reply("done"))
        with CaptureQueriesContext(connection) as ctx:
            chat.ask("weather?")
        return ctx.captured_queries

    run_two_steps()  # the chat's first run reads and writes a little more
    few = run_two_steps()
    for _ in range(40):
        spent(chat, "0.01", tokens=10)
    many = run_two_steps()
    # one query admits the run and serves its first call, one more before the second
    assert len(budget_queries(few)) == len(budget_queries(many)) == 2
    assert len(few) == len(many)
    # the same queries read the reservations of the user's unfinished runs, and the
    # admission the chat's last answered request (for the new run's own): no query more
    admission, before_second = (q["sql"] for q in budget_queries(many))
    assert "reserved_cost" in admission and "reserved_cost" in before_second
    assert '"operation" = ' in admission and '"operation" = ' not in before_second
    # limits off: the same run makes exactly those two queries fewer
    fake_llm.configure("openai", "gpt-4.1-mini")
    run_two_steps()  # the settings changed: per-process caches (the registry) fill again
    fake_llm.script(Reply(tool_calls=[Call("lookup", {"city": "Rome"})]), Reply("done"))
    with CaptureQueriesContext(connection) as off:
        chat.ask("weather?")
    # (and on PostgreSQL the user's admission lock, taken only when limits are on; with
    # limits, the admission's call goes in a transaction of its own after the gate's
    # reads: BEGIN, the chat's row lock, COMMIT, where without limits the call goes alone;
    # the transcript is read before it either way)
    postgresql = connection.vendor == "postgresql"
    lock, one_call = (1, 3) if postgresql else (0, 0)
    assert len(off.captured_queries) == len(many) - 2 - lock - one_call
    if postgresql:
        assert "llmchat_message" in off.captured_queries[0]["sql"]
        assert any("llmchat_run_enqueue_v5" in q["sql"] for q in off.captured_queries)


def test_spend_reads_everything_in_one_query(configure, chat, user):
    configure(usd_per_day="1")
    spent(chat, "0.25", tokens=100)
    runs.enqueue(chat, Message(chat=chat, role="user", content="x"))
    Limit.objects.create(user=user, concurrent_runs=3)
    with CaptureQueriesContext(connection) as ctx:
        found = limits.spend(user.pk)
    assert len(ctx.captured_queries) == 1
    assert found["usd_per_day"] == Decimal("0.25") and found["tokens_per_day"] == 100
    assert found["runs_per_hour"] == 1 and found["concurrent_runs"] == 1
    assert found["row"]["concurrent_runs"] == 3 and found["row"]["unlimited"] is False


def test_budget_exceeded_error_pickles():
    import pickle

    exc = BudgetExceededError(
        "usd_per_day", used=Decimal("2"), allowed=Decimal("1"), resets_at=timezone.now()
    )
    back = pickle.loads(pickle.dumps(exc))
    assert back.to_dict() == exc.to_dict() and str(back) == str(exc)


@pytest.mark.parametrize(
    "llmchat, id, words",
    [
        ({"LIMITS": []}, "llmchat.E020", 'LLMCHAT["LIMITS"] must be a dict'),
        ({"LIMITS": {"users": {}}}, "llmchat.E020", "unknown key 'users'"),
        ({"LIMITS": {"default": {"usd_a_day": "1"}}}, "llmchat.E020", "is not a limit"),
        ({"LIMITS": {"default": {"usd_per_day": 2.5}}}, "llmchat.E020", "a float loses cents"),
        ({"LIMITS": {"default": {"usd_per_day": "lots"}}}, "llmchat.E020", "must be a number"),
        ({"LIMITS": {"default": {"concurrent_runs": -1}}}, "llmchat.E020", "not be negative"),
        ({"LIMITS": {"default": {"soft": "1.5"}}}, "llmchat.E020", "between 0 and 1"),
        (
            {"LIMITS": {"default": {}, "reserve_output_tokens": -1}},
            "llmchat.E020",
            '["reserve_output_tokens"] must be a whole number of tokens from 0, got -1',
        ),
        ({"LIMITS_FOR": "no.such.function"}, "llmchat.E021", "'no.such.function'"),
        ({"LIMITS_FOR": 42}, "llmchat.E021", "42"),
        ({"ALLOWED_MODELS": "openai/*"}, "llmchat.E022", "ALLOWED_MODELS"),
        ({"ALLOWED_MODELS": ["gpt-4.1"]}, "llmchat.E022", "provider/model_id"),
    ],
)
def test_system_checks_name_the_setting(settings, llmchat, id, words):
    from django_llmchat.checks import check_settings

    settings.LLMCHAT = llmchat
    found = [e for e in check_settings() if e.id == id]
    assert found and words in found[0].msg, check_settings()


def test_good_limit_settings_pass_the_checks(settings):
    from django_llmchat.checks import check_settings

    settings.LLMCHAT = {
        "LIMITS": {"default": {"usd_per_day": "2", "concurrent_runs": 2, "soft": "0.8"}},
        "LIMITS_FOR": "tests.runs.test_limits.group_limits",
        "ALLOWED_MODELS": ["openai/gpt-4.1-mini", "anthropic/*"],
    }
    assert check_settings() == []


def test_the_months_closed_days_are_summed_once_a_day(configure, chat, user):
    configure(usd_per_month="100")
    moment = timezone.localtime().replace(day=15, hour=12, minute=0)
    spent(chat, "1.00", when=moment - timedelta(days=3))
    spent(chat, "0.50", when=moment - timedelta(hours=1))
    first = limits.spend(user.pk, runs=False, now=moment)
    assert (first["usd_per_month"], first["usd_per_day"]) == (Decimal("1.5"), Decimal("0.5"))
    spent(chat, "0.25", when=moment - timedelta(minutes=5))  # today's rows: read each time
    spent(chat, "2.00", when=moment - timedelta(days=2))  # an edit of a closed day
    with CaptureQueriesContext(connection) as ctx:
        again = limits.spend(user.pk, runs=False, now=moment)
    assert len(ctx.captured_queries) == 1
    assert '"created_at" <' not in ctx.captured_queries[0]["sql"]  # the closed days: kept
    assert (again["usd_per_month"], again["usd_per_day"]) == (Decimal("1.75"), Decimal("0.75"))
    limits.forget()
    assert limits.spend(user.pk, runs=False, now=moment)["usd_per_month"] == Decimal("3.75")
    tomorrow = limits.spend(user.pk, runs=False, now=moment + timedelta(days=1))
    assert tomorrow["usd_per_month"] == Decimal("3.75") and tomorrow["usd_per_day"] == 0


# -- reservations: a run reserves its expected cost while it is unfinished -------------------
PER_MILLION = Decimal(1_000_000)
INPUT, OUTPUT = Decimal("0.40"), Decimal("1.60")  # gpt-4.1-mini's prices per million


def priced(input_tokens: int, output_tokens: int) -> Decimal:
    return (input_tokens * INPUT + output_tokens * OUTPUT) / PER_MILLION


def reserved(user) -> Decimal:
    return limits.spend(user.pk)["usd_reserved"]


def test_a_run_reserves_its_first_requests_input_and_its_output_reservation(
    configure, chat, user, fake_llm
):
    """The reservation: the chat's last answered request and its reply (1,000 + 200
    tokens), the new prompt's estimate (400 characters: 104 tokens) and 4,096 output
    tokens by default (the chat's ``max_tokens`` when set; the setting otherwise),
    priced for the chat's model, written on the run and counted while it is unfinished."""
    configure(usd_per_day="5.00")
    Usage.objects.create(
        chat=chat,
        provider="openai",
        model_id="gpt-4.1-mini",
        status=Usage.SUCCEEDED,
        input_tokens=900,
        cache_read_tokens=60,
        cache_write_tokens=40,
        output_tokens=200,
        total_cost=Decimal("0.001"),
    )
    # a failed attempt and a summary are not the chat's last answered request
    later = {"chat": chat, "provider": "openai", "model_id": "gpt-4.1-mini"}
    Usage.objects.create(**later, status=Usage.FAILED, input_tokens=50_000)
    Usage.objects.create(**later, status=Usage.SUCCEEDED, operation="summary", input_tokens=7)
    assert limits.prompt_tokens("x" * 400) == 104
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="x" * 400))
    expected = priced(1_200 + 104, 4_096)
    assert Run.objects.get(pk=run.pk).reserved_cost == expected == run.reserved_cost
    assert reserved(user) == expected
    runs.cancel_queued(chat.pk, run.pk)
    assert reserved(user) == 0
    chat.params = {"max_tokens": 100}
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="x" * 400))
    assert run.reserved_cost == priced(1_304, 100)
    runs.cancel_queued(chat.pk, run.pk)
    fake_llm.configure(
        "openai",
        "gpt-4.1-mini",
        LIMITS={"default": {"usd_per_day": "5.00"}, "reserve_output_tokens": 10},
    )
    chat.params = {"max_tokens": True}  # not a number of tokens: the setting's
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="x" * 400))
    assert run.reserved_cost == priced(1_304, 10)
    runs.cancel_queued(chat.pk, run.pk)
    chat.params = {"max_tokens": 0}
    assert limits.output_reservation(chat) == 10
    chat.params = {"max_tokens": 1}
    assert limits.output_reservation(chat) == 1
    chat.params = None
    assert limits.output_reservation(chat) == 10
    configure(usd_per_day="5.00")
    chat.params = {}
    assert limits.output_reservation(chat) == 4096 == limits.DEFAULT_RESERVE_OUTPUT_TOKENS


def test_prompt_tokens_count_the_attachments():
    """A prompt's estimate: its text, a thousand for an image or a document, a text file's
    bytes by four."""
    assert limits.prompt_tokens("abcd") == 5
    assert limits.prompt_tokens("abcd", [("a.png", b"\x89PNG", "image/png")]) == 1005
    assert limits.prompt_tokens("", [("a.txt", b"x" * 400, "text/plain")]) == 104
    assert limits.prompt_tokens("", [("a.bin", b"x" * 400)]) == 1004  # no type: a document
    assert limits.prompt_tokens(None, [("a.bin", "text", None)]) == 1004
    assert limits.prompt_tokens("", [("a.txt", "not bytes", "text/plain")]) == 4


def test_an_unlimited_user_or_a_model_without_a_price_reserves_nothing(configure, chat, user):
    configure(usd_per_day="5.00")
    Limit.objects.create(user=user, unlimited=True)
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="hi"))
    assert run.reserved_cost == 0
    runs.cancel_queued(chat.pk, run.pk)
    Limit.objects.filter(user=user).delete()
    # a model served locally: whatever its name, no known price
    priceless = Chat.objects.create(user=user, provider="ollama", model_id="gpt-4.1-mini")
    run, _ = runs.enqueue(priceless, Message(chat=priceless, role="user", content="hi"))
    assert run.reserved_cost == 0 and reserved(user) == 0


def test_a_run_whose_reservation_alone_exceeds_the_budget_is_refused(configure, chat, fake_llm):
    """A budget below one run's expected cost (here $0.005 < $0.0066): refused at the door
    with the reason, nothing stored, no request; with ``max_tokens`` small enough to fit,
    admitted."""
    configure(usd_per_day="0.005")
    with pytest.raises(BudgetExceededError) as info:
        chat.ask("Go?")
    exc = info.value
    assert (exc.limit, exc.used, exc.allowed) == ("usd_per_day", 0, Decimal("0.005"))
    assert exc.message == "The daily spending limit leaves too little for this run's expected cost."
    assert fake_llm.requests == [] and not Message.objects.exists() and not Run.objects.exists()
    chat.params = {"max_tokens": 1000}  # $0.0016 of output
    chat.save()
    fake_llm.script(Reply("Fine.", usage={"input_tokens": 10, "output_tokens": 5}))
    assert chat.ask("Go?").content == "Fine."


def test_the_monthly_budget_counts_the_reservations_too(configure, chat, fake_llm):
    configure(usd_per_month="0.005")
    with pytest.raises(BudgetExceededError) as info:
        chat.ask("Go?")
    assert info.value.limit == "usd_per_month"
    assert info.value.message == (
        "The monthly spending limit leaves too little for this run's expected cost."
    )


def test_a_reservation_is_refused_when_it_reaches_the_budget_exactly(configure, chat):
    """Admitted while spent + reserved stays under the budget: a reservation filling it
    exactly is refused, a ten-billionth more budget admits it."""
    chat.params = {"max_tokens": 1000}
    expected = priced(limits.prompt_tokens("Go?"), 1000)
    configure(usd_per_day=str(expected))
    with pytest.raises(BudgetExceededError):
        runs.enqueue(chat, Message(chat=chat, role="user", content="Go?"))
    configure(usd_per_day=str(expected + Decimal("0.0000000001")))
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="Go?"))
    assert run.reserved_cost == expected


def test_other_unfinished_runs_reservations_count_at_admission_and_before_a_call(
    configure, chat, user, fake_llm
):
    """A queued run of another chat reserves $0.0066 of a $0.01 budget: a second run is
    refused at the door, and a run already admitted stops before its next call."""
    configure(usd_per_day="0.01")
    other = Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")
    first, _ = runs.enqueue(other, Message(chat=other, role="user", content="Go?"))
    with pytest.raises(BudgetExceededError) as info:
        chat.ask("Go?")
    assert info.value.used == first.reserved_cost
    assert limits.check(chat).used["usd_per_day"] == first.reserved_cost
    Run.objects.filter(pk=first.pk).update(reserved_cost=Decimal("0.01"))
    with pytest.raises(BudgetExceededError) as info:
        limits.check(chat)
    assert info.value.message == "The daily spending limit is reached."
    assert info.value.used == Decimal("0.01")
    assert fake_llm.requests == []


def test_the_check_before_each_call_counts_the_runs_own_reservation(configure, chat, fake_llm):
    """A tool run under $0.01: its first step costs $0.005, under the budget, but with its
    own reservation ($0.0066, the next call's expected cost) the budget is passed: it
    stops before the second call, the paid step kept, the reservation released."""
    configure(usd_per_day="0.01")
    chat.tools = ["lookup"]
    chat.save()
    fake_llm.script(
        Reply(
            tool_calls=[Call("lookup", {"city": "Paris"})],
            usage={"input_tokens": 12_500, "output_tokens": 0},  # $0.005
        ),
        Reply("never asked"),
    )
    events = list(chat.stream("weather?"))
    assert len(fake_llm.requests) == 1 and Interrupt(reason="budget") in events
    run = Run.objects.get(pk=chat.last_run.pk)
    assert (run.status, run.interrupt_reason, run.steps) == (Run.INTERRUPTED, "budget", 1)
    assert run.error == "The daily spending limit is reached."
    assert Usage.objects.get(run=run).total_cost == Decimal("0.005")
    assert reserved(chat.user) == 0


def test_a_reservation_is_released_however_the_run_ends(configure, chat, user, fake_llm):
    """Counted while the run is queued, running or waiting for a decision; released by its
    end: succeeded, failed, cancelled while queued, stopped while running, interrupted
    while waiting, given up after its workers died."""
    from django_llmchat.testing import Fault

    configure(usd_per_day="5.00")
    seen = []
    fake_llm.server.responder = lambda request: seen.append(reserved(user)) or Reply("Hi.")
    assert chat.ask("one").content == "Hi."
    assert seen[0] == chat.last_run.reserved_cost > 0  # counted during the call
    assert reserved(user) == 0  # succeeded
    fake_llm.server.responder = None
    fake_llm.script(Fault(status=400))
    with pytest.raises(ProviderError):
        chat.ask("two")
    assert Run.objects.get(pk=chat.last_run.pk).status == Run.FAILED
    assert reserved(user) == 0  # failed
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="three"))
    assert reserved(user) == run.reserved_cost > 0
    assert runs.interrupt(chat.pk, "cancelled")
    assert Run.objects.get(pk=run.pk).status == Run.CANCELLED and reserved(user) == 0
    run, execution = runs.enqueue(chat, Message(chat=chat, role="user", content="four"), start=True)
    assert reserved(user) == run.reserved_cost
    assert execution.finish(Run.CANCELLED)
    assert reserved(user) == 0  # stopped while running
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="five"))
    Run.objects.filter(pk=run.pk).update(status=Run.AWAITING_APPROVAL)
    assert reserved(user) == run.reserved_cost  # a run waiting for a decision holds it
    assert runs.interrupt(chat.pk, "stop")
    assert reserved(user) == 0
    run, execution = runs.enqueue(chat, Message(chat=chat, role="user", content="six"), start=True)
    execution.lost = True
    Run.objects.filter(pk=run.pk).update(attempt=99, lease_expires_at="2000-01-01T00:00:00Z")
    assert runs.claim(chat.pk).execution is None  # given up: failed, worker lost
    assert Run.objects.get(pk=run.pk).status == Run.FAILED and reserved(user) == 0


def test_a_run_queued_again_by_a_decision_keeps_its_one_reservation(configure, chat, user):
    """A run waiting for a tool-call decision holds its reservation; the last decision
    queues it again through the gate without reserving a second time."""
    from django_llmchat.runs import decisions

    configure(usd_per_day="5.00")
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="Launch."))
    Run.objects.filter(pk=run.pk).update(status=Run.AWAITING_APPROVAL)
    from django_llmchat.models import ToolCall

    message = Message.objects.create(chat=chat, role="assistant", content="")
    call = ToolCall.objects.create(
        chat=chat, message=message, call_id="c1", name="lookup", arguments={}
    )
    with CaptureQueriesContext(connection) as ctx:
        queued = decisions.decide(chat.pk, call, "approved")
    assert queued is not None and queued.pk == run.pk
    # its admission reads no chat's last request: it reserves nothing
    (admission,) = budget_queries(ctx.captured_queries)
    assert "reserved_cost" in admission["sql"] and '"operation" = ' not in admission["sql"]
    assert Run.objects.get(pk=run.pk).reserved_cost == run.reserved_cost
    assert reserved(user) == run.reserved_cost


def test_the_reservation_setting_is_checked():
    assert limits.validate_setting({"reserve_output_tokens": 0}) == []
    for bad in (-1, "4096", 1.5, True, None):
        assert limits.validate_setting({"reserve_output_tokens": bad}) == [
            'LLMCHAT["LIMITS"]["reserve_output_tokens"] must be a whole number of tokens '
            f"from 0, got {bad!r}"
        ]


def test_a_prompts_attachments_are_in_its_reservation(configure, chat, user):
    """A prompt sent with a file reserves the file's estimate too (a text file: its bytes
    by four)."""
    configure(usd_per_day="5.00")
    notes = [("notes.txt", b"x" * 4000, "text/plain")]
    assert limits.prompt_tokens("Read it.", notes) == limits.prompt_tokens("Read it.") + 1000
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="Read it."), notes)
    assert run.reserved_cost == priced(limits.prompt_tokens("Read it.", notes), 4096)
    assert Run.objects.get(pk=run.pk).reserved_cost == run.reserved_cost
