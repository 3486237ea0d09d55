"""What one reply costs the database on each path that makes one, counted from what the
database receives (:class:`tests.wire.Wire`: libpq's trace on PostgreSQL, the sqlite3
module's trace on SQLite): the statements in order and the transactions that wrote (each
one commit). The REST paths are counted in ``tests/api/test_reply_statements.py``.

On PostgreSQL a transition of a run is one call of its function (``django_llmchat/sql/``);
on SQLite the same transitions are statements in one transaction each. Either way a
reply commits twice: the prompt with its run and the first attempt's pending usage row
(before the provider is called, so a process dying mid-call leaves the attempt on the
ledger), then the reply with its usage, the run's end and, on a chat's first reply, its
automatic title.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_llmchat.loop.transcript import forget_history
from django_llmchat.models import Chat, Usage
from django_llmchat.testing import Reply
from tests.wire import Wire

pytestmark = pytest.mark.django_db(transaction=True)

PG = connection.vendor == "postgresql"

# the prompt with its run, started, and the first attempt's pending usage row
ADMISSION = (
    ["SELECT llmchat_run_enqueue_v5"]
    if PG
    else [
        "UPDATE llmchat_chat",  # the chat's lock
        "SELECT llmchat_run",  # the run ahead, if any
        "SELECT llmchat_message",  # the active leaf the prompt follows
        "INSERT llmchat_message",
        "INSERT llmchat_run",
        "UPDATE llmchat_chat",  # running
        "SELECT llmchat_message",  # the path is still the one the request was built on
        "INSERT llmchat_usage",  # the attempt, pending
    ]
)
# the reply, its attempt closed, the run ended (and the chat's title, on its first reply)
REPLY = (
    ["SELECT llmchat_run_store_last_step_v3"]
    if PG
    else [
        "INSERT llmchat_message",  # its write locks the database: no lock statement first
        "UPDATE llmchat_usage",
        "UPDATE llmchat_run",  # fenced by the attempt
        # its status (the run queued next's, else idle), its updated_at and, on the
        # chat's first reply, its title; the next run read only when there is one
        "UPDATE llmchat_chat",
    ]
)
READ = ["SELECT llmchat_message"]  # the transcript


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    made = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    made.ask("warm up")  # the statements compiled, the functions found
    return made


def test_a_plain_ask(chat, fake_llm):
    """A chat this process answered last: its transcript is kept, nothing is read."""
    fake_llm.script(Reply("fine", usage={"input_tokens": 3, "output_tokens": 1}))
    with Wire() as wire:
        reply = chat.ask("hello")
    assert wire.statements == ADMISSION + REPLY
    assert wire.commits == 2
    assert reply.usages.get().output_tokens == 1


def test_a_new_chats_first_turn(chat, fake_llm):
    """The chat's row, then the ask: the transcript of a chat this instance created is
    known to be empty (nothing read), and its title goes with the reply."""
    fake_llm.script(Reply("fine"))
    with Wire() as wire:
        made = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
        made.ask("Plan a trip to Lisbon")
    assert wire.statements == ["INSERT llmchat_chat", *ADMISSION, *REPLY]
    assert wire.commits == 3  # the chat's row is the caller's
    made.refresh_from_db()
    assert (made.title, made.title_source) == ("Plan a trip to Lisbon", "prompt")


# an unsaved chat's first prompt: its row first, in the admission's transaction; nothing
# else can see it yet, so its lock, its run ahead and its leaf are not read
NEW_CHAT_ADMISSION = (
    ["SELECT llmchat_run_enqueue_v5"]  # the chat's row in the call
    if PG
    else [
        "INSERT llmchat_chat",
        "INSERT llmchat_message",
        "INSERT llmchat_run",
        "UPDATE llmchat_chat",  # running
        "INSERT llmchat_usage",  # the attempt, pending
    ]
)


def test_an_unsaved_chats_first_turn(chat, fake_llm):
    """``Chat(...).ask()``: the chat's row commits with its first prompt and run, two
    commits in all; the next turn reads no transcript either."""
    fake_llm.script(Reply("fine"), Reply("again"))
    made = Chat(provider="openai", model_id="gpt-4.1-mini")
    with Wire() as wire:
        reply = made.ask("Plan a trip to Lisbon")
    assert wire.statements == [*NEW_CHAT_ADMISSION, *REPLY]
    assert wire.commits == 2
    assert made.pk is not None and reply.chat_id == made.pk
    made.refresh_from_db()
    assert (made.title, made.title_source) == ("Plan a trip to Lisbon", "prompt")
    assert made.status == "idle" and reply.usages.get().status == Usage.SUCCEEDED
    with Wire() as wire:
        made.ask("and then?")
    assert wire.statements == ADMISSION + REPLY
    assert [m.content for m in made.messages.order_by("position")] == [
        "Plan a trip to Lisbon",
        "fine",
        "and then?",
        "again",
    ]


def test_the_first_turn_of_a_chat_read_from_the_database(chat, fake_llm):
    """A chat loaded (not created by this instance): its transcript is read once."""
    fresh = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    loaded = Chat.objects.get(pk=fresh.pk)
    fake_llm.script(Reply("fine"))
    with Wire() as wire:
        loaded.ask("hello")
    assert wire.statements == [*READ, *ADMISSION, *REPLY]
    assert wire.commits == 2


def test_a_cold_ask_reads_the_transcript_once(chat, fake_llm):
    """A process that kept no history of the chat (a new one, or another process answered
    it last): one read before the admission, the same two commits."""
    forget_history(chat.pk)
    fake_llm.script(Reply("fine"))
    with Wire() as wire:
        chat.ask("hello")
    assert wire.statements == READ + ADMISSION + REPLY
    assert wire.commits == 2


def test_a_streamed_reply(chat, fake_llm):
    """``stream()``: the same, and the terminal event's totals (one read)."""
    fake_llm.script(Reply("fine"))
    with Wire() as wire:
        events = list(chat.stream("hello"))
    assert wire.statements == [*ADMISSION, *REPLY, "SELECT llmchat_run"]
    assert wire.commits == 2
    assert events[-1].type == "run_finished" and events[-1].message_id is not None


def test_an_ask_with_spending_limits_on(fake_llm, django_user_model):
    """With limits, the gate's reads before the admission, in its transaction: on
    PostgreSQL the chat's row lock, the user's lock and the limits read under them, then
    the admission's one call (the prompt, the run with its reservation, the first
    attempt); on SQLite the admission's statements with the user's row and spend among
    them. The reply commits twice."""
    user = django_user_model.objects.create_user("spender")
    fake_llm.configure("openai", "gpt-4.1-mini", LIMITS={"default": {"usd_per_day": "5"}})
    limited = Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")
    limited.ask("warm up")
    with Wire() as wire:
        limited.ask("hello")
    admission = (
        [
            "SELECT llmchat_chat",  # the chat's row lock
            "SELECT pg_advisory_xact_lock",  # the user's
            "SELECT auth_user",  # the user's row and its spend, one statement
            "SELECT llmchat_run_enqueue_v5",
        ]
        if PG
        else [
            "UPDATE llmchat_chat",
            "SELECT llmchat_run",
            "SELECT auth_user",  # the user's row and its spend, one statement
            "SELECT llmchat_message",
            "INSERT llmchat_message",
            "INSERT llmchat_run",
            "UPDATE llmchat_chat",
            "SELECT llmchat_message",
            "INSERT llmchat_usage",
        ]
    )
    assert wire.statements == admission + REPLY
    assert wire.commits == 2
    assert Usage.objects.filter(chat=limited).count() == 2
    assert limited.runs.order_by("-id").first().reserved_cost > 0  # reserved at admission


def test_a_failed_call_leaves_its_attempt_billed_with_the_same_commits(chat, fake_llm):
    """The attempt's pending row went in with the admission: a provider error closes it
    (failed) with the run's end."""
    from django_llmchat.errors import ProviderError
    from django_llmchat.testing import Fault

    fake_llm.script(Fault(status=400, body={"error": {"message": "bad request"}}))
    with Wire() as wire, pytest.raises(ProviderError):
        chat.ask("hello")
    assert wire.statements[: len(ADMISSION)] == ADMISSION
    assert wire.commits == 3  # the admission, the attempt closed failed, the run's end
    row = Usage.objects.filter(chat=chat).latest("id")
    assert row.status == Usage.FAILED


def test_after_a_new_chats_first_run_with_tool_calls_the_next_ask_reads_once(fake_llm):
    """The empty history a new chat starts from is the run's to extend: a first run that
    called a tool did not keep it, so the next ask reads the transcript (once) and its
    first attempt still goes in with the admission."""
    from django_llmchat.testing import ToolCall as Call
    from django_llmchat.tools import tool

    @tool
    def lookup(city: str) -> str:
        """Looks a city up"""
        return f"{city}: sunny"

    fake_llm.configure("openai", "gpt-4.1-mini")
    made = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini").with_tools(lookup)
    fake_llm.script(Reply(tool_calls=[Call("lookup", {"city": "Rome"})]), Reply("sunny"))
    made.ask("weather in Rome?")
    fake_llm.script(Reply("fine"))
    with Wire() as wire:
        made.ask("and tomorrow?")
    assert wire.statements[0] == "SELECT llmchat_message"  # the transcript
    assert wire.statements.count("INSERT llmchat_usage") == (0 if PG else 1)
    assert wire.commits == 2
    sent = [m.get("role") or m.get("type") for m in fake_llm.last_request.body["input"]]
    assert sent == ["user", "function_call", "function_call_output", "assistant", "user"]


def test_a_workers_reply(fake_llm):
    """A prompt answered by a worker (``ask_later``, the task run after the request): the
    worker reads the chat and its path, makes the run's first call ready, and its claim
    opens that call's attempt (on PostgreSQL in ``llmchat_run_claim_v4``'s call); the reply
    as any other. Two commits, as a reply asked in-process; then the run's end read for its
    ``run_finished`` event."""
    import uuid

    from django.test.utils import CaptureQueriesContext

    from django_llmchat.tasks import complete_chat
    from tests.api.test_reply_statements import current_app, statements
    from tests.celery_app import make_app

    fake_llm.configure("openai", "gpt-4.1-mini", TASKS_EAGER_WITHOUT_BROKER=False)
    with current_app(make_app("memory://", f"worker-{uuid.uuid4().hex}")):
        made = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
        made.ask("warm up")
        fake_llm.script(Reply("fine", usage={"input_tokens": 3, "output_tokens": 1}))
        made.ask_later("hello")
        run = made.last_run
        with CaptureQueriesContext(connection) as ctx:
            complete_chat.apply(args=(made.pk,), kwargs={"run_id": run.pk})
    claim = (
        ["SELECT llmchat_run_claim_v4"]
        if PG
        else [
            "BEGIN",
            "UPDATE llmchat_chat",  # the chat's lock
            "SELECT llmchat_run",  # its head
            "UPDATE llmchat_run",  # claimed
            "SELECT llmchat_message",  # the active leaf (a queued prompt moves after it)
            "UPDATE llmchat_message",
            "SELECT llmchat_message",  # the path is still the one the request was built on
            "INSERT llmchat_usage",  # the first attempt, pending
            "UPDATE llmchat_chat",  # running
            "COMMIT",
        ]
    )
    reply = ["BEGIN", *REPLY, "COMMIT"] if not PG else REPLY
    assert statements(ctx) == [
        "SELECT llmchat_chat",  # the runner's chat
        *READ,  # its path, before the claim
        *claim,
        *reply,
        "SELECT llmchat_run",  # the run's end, for its run_finished
    ]
    assert statements(ctx).count("COMMIT") == (0 if PG else 2)
    (usage,) = Usage.objects.filter(run=run)
    assert usage.status == "succeeded" and usage.input_tokens == 3
    assert [m.content for m in made.transcript()][-2:] == ["hello", "fine"]
