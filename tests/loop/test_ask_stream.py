"""ask / stream / complete against the loopback server, asserting stored rows and events."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat.errors import IncompleteStreamError, RateLimitError
from django_llmchat.events import (
    FinishReasonDone,
    ReasoningDone,
    TextDelta,
    TextDone,
    TokenUsageDone,
    ToolCallDone,
)
from django_llmchat.models import Chat, Message, Usage
from django_llmchat.testing import Fault, Reply, ToolCall
from django_llmchat.tools import tool

pytestmark = pytest.mark.django_db(transaction=True)


@tool
def weather(city: str) -> str:
    """Gets the current weather for a city"""
    return f"18C and sunny in {city}"


@pytest.fixture
def chat(provider_chat):
    return provider_chat


def test_ask_stores_prompt_reply_and_usage(chat, fake_llm):
    fake_llm.script(Reply("Paris.", usage={"input_tokens": 12, "output_tokens": 3}))
    reply = chat.ask("What is the capital of France?")
    assert reply.content == "Paris." and reply.is_stopped
    assert [m.role for m in chat.transcript()] == ["user", "assistant"]
    usage = Usage.objects.get()
    assert usage.status == "succeeded" and usage.message == reply
    assert (reply.tokens.input_tokens, reply.tokens.output_tokens) == (12, 3)
    chat.refresh_from_db()
    assert chat.status == "idle"


def test_stream_events_and_one_transaction_per_step(chat, fake_llm):
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall("weather", {"city": "Paris"}),
                ToolCall("weather", {"city": "Rome"}),
            ],
            usage={"input_tokens": 20, "output_tokens": 10},
        ),
        Reply("Sunny in both.", usage={"input_tokens": 40, "output_tokens": 5}),
    )
    chat.with_tools(weather)
    events = list(chat.stream("Weather in Paris and Rome?"))
    kinds = [type(e) for e in events]
    done_calls = [e for e in events if isinstance(e, ToolCallDone)]
    assert [e.name for e in done_calls] == ["weather", "weather"]
    texts = [e for e in events if isinstance(e, TextDone)]
    assert len(texts) == 1 and texts[0].content == "Sunny in both."
    assert "".join(e.content for e in events if isinstance(e, TextDelta)) == "Sunny in both."
    assert kinds.count(TokenUsageDone) == 2 and kinds.count(FinishReasonDone) == 2
    assert kinds.index(TextDone) > max(i for i, k in enumerate(kinds) if k is TextDelta)
    roles = [m.role for m in chat.transcript()]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    first = chat.transcript()[1]
    assert first.is_tool_call_stop
    results = list(first.tool_results)
    assert [r.content for r in results] == ["18C and sunny in Paris", "18C and sunny in Rome"]
    assert [r.tool_call_id for r in results] == [tc.call_id for tc in first.tool_calls.all()]
    assert Usage.objects.filter(status="succeeded").count() == 2
    # the second request carried the tool results back
    assert len(fake_llm.requests) == 2


def test_thinking_is_stored(chat, fake_llm):
    fake_llm.script(
        Reply(
            "42",
            thinking="Let me think.",
            thinking_signature="sig-1",
            usage={"input_tokens": 5, "output_tokens": 9, "thinking_tokens": 4},
        )
    )
    events = list(chat.stream("Meaning of life?"))
    assert any(isinstance(e, ReasoningDone) for e in events)
    reply = chat.messages.get(role="assistant")
    assert reply.thinking.text == "Let me think."


def test_incomplete_stream_stores_nothing_and_retry_adds_no_second_prompt(chat, fake_llm):
    long = Reply("Once upon a time there was a parser.", chunk_size=2)
    fake_llm.script(Fault(cut_after=8, reply=long), Reply("Once upon a time."))
    delivered = []
    with pytest.raises(IncompleteStreamError):
        for event in chat.stream("Tell me a story"):
            delivered.append(event)
    assert any(isinstance(e, TextDelta) for e in delivered)  # delivered before the cut
    assert [m.role for m in chat.transcript()] == ["user"]
    assert Usage.objects.get().status == "failed"
    events = list(chat.stream())
    assert any(isinstance(e, TextDone) for e in events)
    assert [m.role for m in chat.transcript()] == ["user", "assistant"]
    assert chat.messages.filter(role="user").count() == 1
    assert list(Usage.objects.values_list("status", flat=True)) == ["failed", "succeeded"]


def test_retry_then_success_records_both_attempts(chat, fake_llm):
    fake_llm.script(Fault(status=429, retry_after=0), Reply("ok"))
    reply = chat.ask("hi")
    assert reply.content == "ok"
    rows = list(Usage.objects.order_by("id").values_list("status", "message_id"))
    assert rows == [("failed", reply.pk), ("succeeded", reply.pk)]


def test_failure_keeps_prompt_and_marks_chat_failed(chat, fake_llm, settings):
    fake_llm.script(*[Fault(status=429, retry_after=0)] * 5)
    with pytest.raises(RateLimitError) as info:
        chat.ask("hi")
    assert "test-key" not in str(info.value)
    assert [m.role for m in chat.transcript()] == ["user"]
    chat.refresh_from_db()
    assert chat.status == "idle"
    run = chat.runs.get()
    assert run.status == "failed" and run.error_type == "rate_limited"
    assert run.error == "The provider is rate limiting requests; retry later."
    assert chat.last_run == run and run.finished_at is not None
    assert list(run.usages.values_list("status", flat=True)) == ["failed"] * 3


def test_reply_step_query_count_is_constant(chat, fake_llm):
    from tests.factories import build_transcript

    def measure(turns):
        c = Chat.objects.create(provider=chat.provider, model_id=chat.model_id)
        build_transcript(c, turns, with_attachments=False)
        c.add_message(role="user", content="next")
        fake_llm.script(Reply("fine"))
        with CaptureQueriesContext(connection) as ctx:
            c.complete()
        return len(ctx)

    measure(1)  # the model's limits are read from the registry once a minute
    small = measure(1)  # 5 prior messages
    large = measure(125)  # 501 prior messages
    assert small == large


def test_message_reads_back_from_db(chat, fake_llm):
    fake_llm.script(Reply("Hi!"))
    reply = chat.ask("hello")
    again = Message.objects.transcript().get(pk=reply.pk)
    assert again.to_dict()["content"] == "Hi!"


def test_reply_statements(chat, fake_llm):
    """A plain reply is thirteen statements: the prompt with its run, started (the chat's
    lock, the runs ahead, the active leaf the prompt follows, two INSERTs, the chat's
    status), the transcript read, the
    attempt's pending usage row (before the provider call), then the reply closing that
    row and the run's end (the message INSERT, whose write locks the database, the usage
    UPDATE, the fenced run UPDATE, the next run, the chat's status with its updated_at).
    On PostgreSQL each transition is
    one call of its function, the admission's with the attempt's pending row, and the
    transcript this process kept from the chat's last reply needs no read: two statements
    (tests/runs/test_pg.py counts the round trips)."""
    chat.ask("warm up")  # compiles the prepared statements
    fake_llm.script(Reply("fine", usage={"input_tokens": 3, "output_tokens": 1}))
    with CaptureQueriesContext(connection) as ctx:
        reply = chat.ask("hello")
    statements = [
        q["sql"].split()[0].upper() + " " + _table(q["sql"])
        for q in ctx.captured_queries
        if not q["sql"].upper().startswith(("BEGIN", "SAVEPOINT", "RELEASE", "COMMIT"))
    ]
    if connection.vendor == "postgresql":
        assert statements == [
            "SELECT llmchat_run_enqueue_v5",
            "SELECT llmchat_run_store_last_step_v3",
        ]
    else:
        assert statements == [
            "UPDATE llmchat_chat",
            "SELECT llmchat_run",
            "SELECT llmchat_message",
            "INSERT llmchat_message",
            "INSERT llmchat_run",
            "UPDATE llmchat_chat",
            "SELECT llmchat_message",
            "INSERT llmchat_usage",
            "INSERT llmchat_message",
            "UPDATE llmchat_usage",
            "UPDATE llmchat_run",
            "UPDATE llmchat_chat",
        ]
    assert reply.content == "fine" and reply.usages.get().output_tokens == 1
    chat.refresh_from_db()
    assert chat.status == "idle"


def _table(sql):
    import re

    # a SELECT's own table follows its last FROM (subqueries come first, in its columns)
    found = re.findall(r'(?:INTO|UPDATE|FROM)\s+"?(\w+)"?', sql)
    return found[0] if not sql.upper().startswith("SELECT") else found[-1]


def test_reply_relations_are_real_querysets(chat, fake_llm):
    fake_llm.script(
        Reply(tool_calls=[ToolCall("weather", {"city": "Paris"})]),
        Reply("sunny", usage={"input_tokens": 3, "output_tokens": 1}),
    )
    chat.with_tools(weather)
    reply = chat.ask("weather?")
    with CaptureQueriesContext(connection) as ctx:
        assert [u.output_tokens for u in reply.usages.all()] == [1]
        assert list(reply.tool_calls.all()) == []
    assert len(ctx) == 0  # the rows just written, not read again
    assert reply.usages.count() == 1
    assert reply.usages.filter(status="succeeded").get().output_tokens == 1
    calling = chat.transcript().filter(role="assistant").first()
    assert calling.tool_calls.get().name == "weather"


def test_reply_pickles_and_copies_with_its_relations(chat, fake_llm):
    import copy
    import pickle

    fake_llm.script(Reply("fine", usage={"input_tokens": 3, "output_tokens": 1}))
    reply = chat.ask("hello")
    for again in (pickle.loads(pickle.dumps(reply)), copy.deepcopy(reply)):
        assert again.pk == reply.pk
        assert [u.output_tokens for u in again.usages.all()] == [1]
        assert again.usages.count() == 1
    reply.refresh_from_db()
    assert reply.usages.get().output_tokens == 1


@pytest.mark.parametrize("call", ["complete", "resume", "ask", "stream"])
def test_an_unsaved_chat_without_a_prompt_cannot_run(call, fake_llm):
    from django_llmchat.errors import ArgumentError

    unsaved = Chat(provider="openai", model_id="gpt-4.1-mini")
    with pytest.raises(ArgumentError, match="save the chat before running it"):
        result = getattr(unsaved, call)()
        if call == "stream":
            list(result)
    assert unsaved.pk is None
    assert not Chat.objects.exists() and not Message.objects.exists()


@pytest.mark.parametrize("call", ["ask", "stream", "ask_later"])
def test_an_unsaved_chat_is_saved_with_its_first_prompt(call, fake_llm):
    """``Chat(...).ask("...")`` (``stream``, ``ask_later``): the chat's row is written
    in the admission's transaction, with the prompt and its run."""
    # ask_later's task answers in this thread, once the prompt's transaction commits
    fake_llm.configure("openai", "gpt-4.1-mini", TASKS_EAGER_WITHOUT_BROKER="inline")
    fake_llm.script(Reply("hello there"))
    unsaved = Chat(provider="openai", model_id="gpt-4.1-mini")
    result = getattr(unsaved, call)("hi")
    if call == "stream":
        events = list(result)
        assert events[-1].type == "run_finished"
    assert unsaved.pk is not None
    assert Chat.objects.get(pk=unsaved.pk).model_id == "gpt-4.1-mini"
    contents = list(unsaved.messages.order_by("position").values_list("content", flat=True))
    assert contents == ["hi", "hello there"]
    assert Chat.objects.get(pk=unsaved.pk).last_run.status == "succeeded"


def test_the_builder_on_an_unsaved_chat_sets_what_its_first_prompt_saves(fake_llm):
    """``with_model``, ``with_params`` and the rest set an unsaved chat's fields without
    saving it; its first prompt saves them with it and its request uses them."""
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("hi"))
    chat = Chat(provider="openai", model_id="gpt-4o").with_model("gpt-4.1-mini", "openai")
    chat.with_params(max_tokens=50).with_temperature(0.25)
    assert chat.pk is None and not Chat.objects.exists()
    chat.ask("hello")
    row = Chat.objects.get(pk=chat.pk)
    params = {"max_tokens": 50, "temperature": 0.25}
    assert (row.model_id, row.params) == ("gpt-4.1-mini", params)
    body = fake_llm.requests[-1].body
    limits = [value for name, value in body.items() if name.startswith("max_")]
    assert (body["model"], limits, body["temperature"]) == ("gpt-4.1-mini", [50], 0.25)

    instructed = Chat(provider="openai", model_id="gpt-4.1-mini").with_instructions("Be terse.")
    assert instructed.pk is not None  # its instructions are a message: the chat is saved
