"""The chat's run verbs (models/chat_runs.py): every verb has an async twin doing what it
does, every verb taking a prompt takes ``parent=``, and a run's predicates say what they
mean."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from django_llmchat import BRANCH_ROOT, Chat, Message, Run, tool
from django_llmchat.errors import ArgumentError
from django_llmchat.events import RunFinished, TextDelta
from django_llmchat.models.chat_runs import RUN_VERBS
from django_llmchat.testing import Reply, ToolCall

pytestmark = pytest.mark.django_db(transaction=True)


@tool(requires_approval=True)
def launch(target: str) -> str:
    """Launches a rocket"""
    return f"launched at {target}"


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure("anthropic", "claude-haiku-4-5", TASKS_EAGER_WITHOUT_BROKER="inline")
    return Chat.objects.create(provider="anthropic", model_id="claude-haiku-4-5")


def sent(fake_llm) -> list[tuple[str, str]]:
    """``(role, text)`` of every message of the last request the provider received."""
    out = []
    for m in fake_llm.last_request.body["messages"]:
        content = m["content"]
        if isinstance(content, list):
            content = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
        out.append((m["role"], content))
    return out


def texts(chat) -> list[str]:
    return [m.content for m in chat.transcript()]


def off_path(chat, fake_llm) -> Message:
    """A chat whose first exchange left the path: the reply ``"Paris."`` is off it."""
    fake_llm.script(Reply("Paris."), Reply("Rome."))
    first = chat.ask("Capital of France?")
    chat.ask("Capital of Italy?", parent=BRANCH_ROOT)
    assert texts(chat) == ["Capital of Italy?", "Rome."]
    first.refresh_from_db()
    assert not first.on_path
    return first


def run(coroutine):
    return asyncio.run(coroutine)


async def collect(events):
    return [event async for event in events]


# -- every verb, both faces --------------------------------------------------------------
def _parameters(function):
    return [
        (p.name, p.kind, p.default)
        for p in inspect.signature(function).parameters.values()
        if p.name != "self"
    ]


@pytest.mark.parametrize("sync, twin", RUN_VERBS, ids=[s for s, _ in RUN_VERBS])
def test_every_run_verb_has_an_async_twin_taking_the_same_arguments(sync, twin):
    verb, async_verb = getattr(Chat, sync), getattr(Chat, twin)
    assert not inspect.iscoroutinefunction(verb)
    assert inspect.iscoroutinefunction(async_verb) or twin == "astream"
    assert _parameters(async_verb) == _parameters(verb)
    assert async_verb.__doc__


def test_every_verb_taking_a_prompt_takes_a_parent():
    for name in ("ask", "stream", "ask_later", "aask", "astream", "aask_later"):
        assert "parent" in inspect.signature(getattr(Chat, name)).parameters, name
    assert list(inspect.signature(Chat.branch_from).parameters)[1:3] == ["parent", "prompt"]


def test_aask_and_astream(chat, fake_llm):
    fake_llm.script(Reply("Hello."), Reply("Streamed."))
    reply = run(chat.aask("Hi"))
    events = run(collect(chat.astream("More")))
    assert reply.content == "Hello." and chat.last_run.status == "succeeded"
    assert "".join(e.content for e in events if isinstance(e, TextDelta)) == "Streamed."
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    assert texts(chat) == ["Hi", "Hello.", "More", "Streamed."]


def test_aask_later_stores_the_prompt_and_the_task_answers(chat, fake_llm):
    fake_llm.script(Reply("Later."))
    prompt = run(chat.aask_later("Answer me later"))
    assert prompt.role == "user" and prompt.content == "Answer me later"
    assert texts(chat) == ["Answer me later", "Later."]


def test_aresume_and_acomplete_continue_the_saved_history(chat, fake_llm):
    fake_llm.script(Reply("Resumed."), Reply("Completed."))
    chat.add_message(role="user", content="Say something")
    assert run(chat.aresume()).content == "Resumed."
    chat.add_message(role="user", content="Again")
    assert run(chat.acomplete()).content == "Completed."
    assert texts(chat) == ["Say something", "Resumed.", "Again", "Completed."]


def test_resume_and_complete_are_one_verb(chat, fake_llm):
    fake_llm.script(Reply("One."), Reply("Two."))
    chat.add_message(role="user", content="Go")
    assert chat.resume().content == "One."
    chat.add_message(role="user", content="Go on")
    assert chat.complete().content == "Two."


def test_aregenerate_keeps_the_old_reply_as_a_sibling(chat, fake_llm):
    fake_llm.script(Reply("First."), Reply("Second."))
    old = chat.ask("Tell me")
    new = run(chat.aregenerate())
    assert new.content == "Second." and texts(chat) == ["Tell me", "Second."]
    assert sorted(m.content for m in new.alternatives()) == ["First.", "Second."]
    old.refresh_from_db()
    assert not old.on_path


def test_abranch_from_and_aswitch_to(chat, fake_llm):
    first = off_path(chat, fake_llm)
    fake_llm.script(Reply("Lyon."))
    reply = run(chat.abranch_from(first, "And its second city?"))
    assert reply.content == "Lyon."
    assert texts(chat) == ["Capital of France?", "Paris.", "And its second city?", "Lyon."]
    italy = Message.objects.get(chat=chat, content="Rome.")
    leaf = run(chat.aswitch_to(italy))
    assert leaf.pk == italy.pk and texts(chat) == ["Capital of Italy?", "Rome."]


def _awaiting(chat, fake_llm, call_id):
    fake_llm.script(Reply(tool_calls=[ToolCall("launch", {"target": "moon"}, call_id=call_id)]))
    chat.with_tools(launch)
    list(chat.stream("Launch it"))
    assert chat.last_run.is_awaiting_approval and not chat.last_run.is_working


def test_aapprove_and_adeny(chat, fake_llm):
    _awaiting(chat, fake_llm, "call_a")
    fake_llm.script(Reply("Launched."))
    assert run(chat.aapprove("call_a")).content == "Launched."
    _awaiting(chat, fake_llm, "call_b")
    fake_llm.script(Reply("Not launched."))
    assert run(chat.adeny("call_b")).content == "Not launched."


def test_ainterrupt_and_acancel(chat, fake_llm):
    assert run(chat.ainterrupt("nothing runs")) is False
    assert run(chat.acancel()) is False
    _awaiting(chat, fake_llm, "call_c")
    assert run(chat.acancel()) is True
    assert chat.runs.order_by("-id").first().status == "cancelled"
    _awaiting(chat, fake_llm, "call_d")
    assert run(chat.ainterrupt("enough")) is True
    stopped = chat.runs.order_by("-id").first()
    assert (stopped.status, stopped.interrupt_reason) == ("interrupted", "enough")


# -- parent= wherever a prompt is taken -------------------------------------------------
def test_stream_takes_a_parent_off_the_path(chat, fake_llm):
    first = off_path(chat, fake_llm)
    fake_llm.script(Reply("Lyon."))
    events = list(chat.stream("And its second city?", parent=first))
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    assert texts(chat) == ["Capital of France?", "Paris.", "And its second city?", "Lyon."]
    assert sent(fake_llm) == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "And its second city?"),
    ]
    prompt = Message.objects.get(chat=chat, content="And its second city?")
    assert prompt.parent_id == first.pk


def test_stream_with_a_parent_stores_nothing_before_the_first_event(chat, fake_llm):
    first = off_path(chat, fake_llm)
    events = chat.stream("Not yet", parent=first)
    assert not Message.objects.filter(content="Not yet").exists()
    events.close()
    assert texts(chat) == ["Capital of Italy?", "Rome."]


def test_stream_with_a_parent_admitted_explicitly(chat, fake_llm):
    fake_llm.script(Reply("Paris."), Reply("Madrid."))
    chat.ask("Capital of France?")
    session = chat.stream("Capital of Spain?", parent=BRANCH_ROOT).admit()
    assert Message.objects.get(content="Capital of Spain?").parent_id is None
    list(session)
    assert session.status == "succeeded"
    assert texts(chat) == ["Capital of Spain?", "Madrid."]


def test_astream_takes_a_parent(chat, fake_llm):
    first = off_path(chat, fake_llm)
    fake_llm.script(Reply("Marseille."))
    run(collect(chat.astream("Its port?", parent=first)))
    assert texts(chat) == ["Capital of France?", "Paris.", "Its port?", "Marseille."]


def test_ask_later_and_aask_later_take_a_parent_off_the_path(chat, fake_llm):
    first = off_path(chat, fake_llm)
    fake_llm.script(Reply("Lyon."), Reply("Turin."))
    prompt = chat.ask_later("And its second city?", parent=first)
    assert prompt.parent_id == first.pk
    assert texts(chat) == ["Capital of France?", "Paris.", "And its second city?", "Lyon."]
    italy = Message.objects.get(chat=chat, content="Rome.")
    prompt = run(chat.aask_later("Its second city?", parent=italy))
    assert prompt.parent_id == italy.pk
    assert texts(chat) == ["Capital of Italy?", "Rome.", "Its second city?", "Turin."]


def test_a_branch_needs_a_prompt(chat, fake_llm):
    first = off_path(chat, fake_llm)
    with pytest.raises(ArgumentError, match="a branch needs a prompt"):
        chat.stream(parent=first)
    with pytest.raises(ArgumentError, match="a branch needs a prompt"):
        chat.ask(parent=first)


# -- a run's predicates -----------------------------------------------------------------
@pytest.mark.parametrize(
    "status, queued, working, awaiting, unfinished, finished",
    [
        ("queued", True, False, False, True, False),
        ("running", False, True, False, True, False),
        ("awaiting_approval", False, False, True, True, False),
        ("succeeded", False, False, False, False, True),
        ("cancelled", False, False, False, False, True),
    ],
)
def test_a_queued_run_is_not_working(status, queued, working, awaiting, unfinished, finished):
    found = Run(status=status)
    assert (
        found.is_queued,
        found.is_working,
        found.is_awaiting_approval,
        found.is_unfinished,
        found.is_finished,
    ) == (queued, working, awaiting, unfinished, finished)


def test_a_branched_stream_closed_early_ends_its_run_cancelled(chat, fake_llm):
    first = off_path(chat, fake_llm)
    fake_llm.script(Reply("Lyon is the second city."))
    events = chat.stream("And its second city?", parent=first)
    next(events)  # the run started: its prompt stored after ``first``
    assert Message.objects.get(content="And its second city?").parent_id == first.pk
    events.close()
    assert chat.runs.order_by("-id").first().status == "cancelled"
