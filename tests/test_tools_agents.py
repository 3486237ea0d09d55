"""Tools, approvals, agents, guardrails, skills, interrupts, cancel, context, schemas."""

import json
import threading
import time

import pytest
from pydantic import BaseModel

from django_llmchat.agents import interrupt
from django_llmchat.context import Context
from django_llmchat.errors import StructuredOutputError
from django_llmchat.events import (
    Interrupt,
    RunStarted,
    TextDelta,
    ToolCallDone,
)
from django_llmchat.models import Chat, Message, ToolCall, Usage
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call
from django_llmchat.tools import ToolResult, get_tool, tool
from django_llmchat.values import Tokens

pytestmark = pytest.mark.django_db(transaction=True)


@tool
def add(a: int, b: int = 1) -> int:
    """Adds two numbers"""
    return a + b


@tool
def boom() -> str:
    """Always fails"""
    raise RuntimeError("kaput")


@tool(timeout=0.2)
def slow() -> str:
    """Takes too long"""
    time.sleep(2)
    return "late"


@tool
def whoami(context: Context) -> str:
    """Reads the caller's context"""
    context["seen"] = True
    return f"user {context['user_id']}, {context.token_usage.input_tokens} tokens so far"


@tool(requires_approval=True)
def delete_everything(confirm: bool) -> str:
    """Deletes everything"""
    return "deleted"


@tool
def stop_here(reason: str) -> str:
    """Interrupts the run"""
    interrupt(reason)
    return "unreachable"


@tool
def make_report() -> ToolResult:
    """Returns a file"""
    return ToolResult("report attached", attachments=[("report.txt", b"all good")])


BARRIER = threading.Barrier(2, timeout=5)


@tool(concurrent=True)
def meet(name: str) -> str:
    """Only finishes when two calls run at the same time"""
    BARRIER.wait()
    return f"met {name}"


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    return Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")


def results(chat):
    return [
        json.loads(m.content) if m.content.startswith("{") else m.content
        for m in chat.messages.filter(role="tool").order_by("id")
    ]


def test_tool_schema_from_signature():
    assert add.parameters == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 1}},
        "required": ["a"],
        "additionalProperties": False,
    }
    assert add.description == "Adds two numbers"
    assert "context" not in whoami.parameters["properties"]
    assert get_tool("add") is add


def test_tool_errors_go_back_to_the_model(chat, fake_llm):
    fake_llm.script(
        Reply(
            tool_calls=[
                Call("add", {"a": "not a number"}),
                Call("nope", {}),
                Call("boom"),
                Call("slow"),
                Call("add", {"a": 2}),
            ]
        ),
        Reply("done"),
    )
    chat.with_tools(add, boom, slow)
    reply = chat.ask("go")
    assert reply.content == "done"
    out = results(chat)
    assert out[0]["error"]["type"] == "validation_error" and "a" in out[0]["error"]["message"]
    assert out[1]["error"]["type"] == "unknown_tool"
    assert out[2]["error"] == {"type": "execution_error", "message": "RuntimeError: kaput"}
    assert out[3]["error"]["type"] == "timeout_error"
    assert out[4] == "3"
    # the second request carried every result back to the model
    sent = json.dumps(fake_llm.requests[1].body)
    assert "validation_error" in sent and "unknown_tool" in sent


def test_concurrent_tools_run_at_the_same_time(chat, fake_llm):
    fake_llm.script(
        Reply(tool_calls=[Call("meet", {"name": "a"}), Call("meet", {"name": "b"})]), Reply("ok")
    )
    chat.with_tools(meet)
    chat.ask("meet")
    assert results(chat) == ["met a", "met b"]


def test_tool_receives_context_and_it_persists(chat, fake_llm):
    fake_llm.script(
        Reply(tool_calls=[Call("whoami")], usage={"input_tokens": 7, "output_tokens": 1}),
        Reply("ok"),
    )
    chat.context = {"user_id": 42}
    chat.save()
    chat.with_tools(whoami)
    chat.ask("who am i")
    assert results(chat) == ["user 42, 7 tokens so far"]
    chat.refresh_from_db()
    assert chat.context == {"user_id": 42, "seen": True}


def test_tool_attachments(chat, fake_llm):
    fake_llm.script(Reply(tool_calls=[Call("make_report")]), Reply("ok"))
    chat.with_tools(make_report)
    chat.ask("report")
    result = chat.messages.get(role="tool")
    assert result.attachments.get().read() == b"all good"


def test_approval_pauses_and_resumes(chat, fake_llm):
    fake_llm.script(
        Reply(tool_calls=[Call("delete_everything", {"confirm": True}, call_id="call_del")]),
        Reply("Deleted."),
        Reply(tool_calls=[Call("delete_everything", {"confirm": True}, call_id="call_del2")]),
        Reply("Not deleted."),
    )
    chat.with_tools(delete_everything)
    events = list(chat.stream("delete it all"))
    assert events[-2] == Interrupt(reason="approval_required")
    assert events[-1].status == "awaiting_approval" and isinstance(events[0], RunStarted)
    assert chat.messages.filter(role="tool").count() == 0
    call = ToolCall.objects.get(call_id="call_del")
    assert call.approval == ""
    reply = chat.approve("call_del")
    assert reply.content == "Deleted."
    assert results(chat) == ["deleted"]
    list(chat.stream("again"))
    reply = chat.deny("call_del2")
    assert reply.content == "Not deleted."
    assert results(chat)[1]["error"]["type"] == "denied"


def test_tool_interrupt_then_complete_resumes(chat, fake_llm):
    fake_llm.script(
        Reply(tool_calls=[Call("add", {"a": 1}), Call("stop_here", {"reason": "needs a human"})])
    )
    chat.with_tools(stop_here, add)
    events = list(chat.stream("go"))
    assert events[-2] == Interrupt(reason="needs a human") and events[-1].status == "interrupted"
    assert results(chat) == ["2"]  # the call before the interrupt was answered
    assert ToolCall.objects.get(name="stop_here").get_result() is None
    fake_llm.script(Reply("resumed"))
    calls_before = len(fake_llm.requests)
    # stop_here will interrupt again when re-run: resuming re-runs unanswered calls first
    events = list(chat.stream())
    assert events[-2] == Interrupt(reason="needs a human") and events[-1].status == "interrupted"
    assert len(fake_llm.requests) == calls_before


def test_cancel_mid_stream(chat, fake_llm):
    from django_llmchat.testing import Fault

    fake_llm.script(Fault(chunk_delay=0.02, reply=Reply("word " * 200, chunk_size=5)))
    seen = []
    start = None
    for event in chat.stream("talk"):
        seen.append(event)
        if isinstance(event, TextDelta) and start is None:
            start = time.monotonic()
            Chat.objects.get(pk=chat.pk).cancel()
    assert seen[-2] == Interrupt(reason="cancelled") and seen[-1].status == "cancelled"
    assert time.monotonic() - start < 1.0
    # what was streamed before the stop is the reply
    shown = "".join(e.content for e in seen if isinstance(e, TextDelta))
    assert [(m.role, m.content) for m in chat.transcript()] == [
        ("user", "talk"),
        ("assistant", shown),
    ]
    assert Usage.objects.get().status == "cancelled"
    chat.refresh_from_db()
    assert chat.cancel_requested is False


def test_structured_output(chat, fake_llm):
    class Person(BaseModel):
        name: str
        age: int

    chat.with_schema(Person)
    fake_llm.script(Reply('{"name": "Alice", "age": 30}'))
    assert chat.ask("a person").parsed == {"name": "Alice", "age": 30}
    assert "json_schema" in json.dumps(fake_llm.requests[0].body)
    fake_llm.script(Reply("not json"))
    with pytest.raises(StructuredOutputError, match="not valid JSON"):
        chat.ask("again")
    assert chat.messages.filter(role="assistant").count() == 1


def test_token_usage_runs_across_runs(chat, fake_llm):
    fake_llm.script(
        Reply("a", usage={"input_tokens": 5, "output_tokens": 1}),
        Reply(tool_calls=[Call("whoami")], usage={"input_tokens": 10, "output_tokens": 2}),
        Reply("b"),
    )
    chat.context = {"user_id": 1}
    chat.save()
    chat.ask("first")
    chat.with_tools(whoami)
    chat.ask("second")
    assert results(chat) == ["user 1, 15 tokens so far"]


def test_async_twins(chat, fake_llm):
    import asyncio

    fake_llm.script(Reply("async hello"), Reply("streamed"))

    async def go():
        reply = await chat.aask("hi")
        events = [e async for e in chat.astream("more")]
        return reply, events

    reply, events = asyncio.run(go())
    assert reply.content == "async hello"
    assert "".join(e.content for e in events if isinstance(e, TextDelta)) == "streamed"
    assert Message.objects.filter(role="assistant").count() == 2


def test_non_streaming_ask_emits_summary_events(chat, fake_llm):
    from django_llmchat.loop.runner import Runner

    fake_llm.script(Reply(tool_calls=[Call("add", {"a": 1})]), Reply("2"))
    chat.with_tools(add)
    chat.add_message(role="user", content="1+1")
    runner = Runner(chat, keep_events=True)
    runner.begin(None)
    list(runner.run(stream=False))
    assert any(isinstance(e, ToolCallDone) for e in runner.result.events)
    assert runner.result.message.content == "2"
    assert runner.result.steps == 2
    assert Tokens() == Tokens()


def test_interrupt_with_a_reason_mid_stream(chat, fake_llm):
    from django_llmchat.testing import Fault

    fake_llm.script(Fault(chunk_delay=0.02, reply=Reply("word " * 200, chunk_size=5)))
    seen = []
    for event in chat.stream("talk"):
        seen.append(event)
        if isinstance(event, TextDelta) and len(seen) == 2:  # after RunStarted
            assert Chat.objects.get(pk=chat.pk).interrupt("the user changed topic")
    assert seen[-2] == Interrupt(reason="the user changed topic")
    assert seen[-1].status == "interrupted"
    assert [m.role for m in chat.transcript()] == ["user", "assistant"]  # what was shown
    assert not Chat.objects.get(pk=chat.pk).interrupt("nothing is running")
    fake_llm.script(Reply("resumed"))
    assert chat.complete().content == "resumed"
