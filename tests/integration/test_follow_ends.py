"""Every way a run ends reaches the chat's followers: a real worker on Redis, an
``events/``-style follower from the start of each run, one terminal ``run_finished`` per
end (succeeded, failed, cancelled while running and while queued, interrupted, awaiting
approval)."""

from __future__ import annotations

import pytest

from django_llmchat import runs, streams
from django_llmchat.events import RunFinished, TextDelta
from django_llmchat.models import Chat, Message
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing import ToolCall as Call

pytestmark = [pytest.mark.redis]

LONG = " ".join(f"word{i}" for i in range(200))


def ends(chat_id: int, after: str, *, on_text=None, timeout: float = 30.0) -> list[RunFinished]:
    """Follow the chat from ``after`` until a run ends; its terminal events."""
    seen: list[RunFinished] = []
    acted = False
    for _, event in streams.follow(chat_id, after, block_ms=200, timeout=timeout):
        if on_text is not None and not acted and isinstance(event, TextDelta):
            acted = True
            on_text()
        if isinstance(event, RunFinished):
            seen.append(event)
    return seen


def settle(services, chat) -> None:
    """Wait for the tasks of the chat's runs to end in the worker (nothing writes after
    the test)."""
    for task_id in chat.runs.exclude(task_id="").values_list("task_id", flat=True):
        services.wait_task_ended(task_id)


def test_a_reply_that_succeeds(worker, services, llm):
    llm.script("Done.")
    chat = Chat.objects.create()
    start = streams.last_id(chat.pk)
    chat.ask_later("Hi")
    (end,) = ends(chat.pk, start)
    settle(services, chat)
    assert end.status == "succeeded" and end.run_id == str(chat.runs.get().pk)


def test_a_reply_that_fails(worker, services, llm):
    llm.script(Fault(status=400, body={"error": {"message": "bad request"}}))
    chat = Chat.objects.create()
    start = streams.last_id(chat.pk)
    chat.ask_later("Hi")
    (end,) = ends(chat.pk, start)
    settle(services, chat)
    assert end.status == "failed" and end.error and "bad request" not in end.error


def test_a_reply_cancelled_while_it_runs(worker, services, llm):
    llm.script(Fault(chunk_delay=0.05, reply=Reply(LONG, chunk_size=4)))
    chat = Chat.objects.create()
    start = streams.last_id(chat.pk)
    chat.ask_later("Talk")
    (end,) = ends(chat.pk, start, on_text=lambda: Chat.objects.get(pk=chat.pk).cancel())
    settle(services, chat)
    assert end.status == "cancelled"


def test_a_reply_interrupted_while_it_runs(worker, services, llm):
    llm.script(Fault(chunk_delay=0.05, reply=Reply(LONG, chunk_size=4)))
    chat = Chat.objects.create()
    start = streams.last_id(chat.pk)
    chat.ask_later("Talk")
    (end,) = ends(
        chat.pk, start, on_text=lambda: Chat.objects.get(pk=chat.pk).interrupt("new topic")
    )
    settle(services, chat)
    assert end.status == "interrupted"


def test_a_reply_waiting_for_an_approval(worker, services, llm):
    llm.script(Reply(tool_calls=[Call("guarded_step", {"n": 1}, call_id="g1")]))
    chat = Chat.objects.create(tools=["guarded_step"])
    start = streams.last_id(chat.pk)
    chat.ask_later("Go")
    (end,) = ends(chat.pk, start)
    settle(services, chat)
    assert end.status == "awaiting_approval"
    # and cancelled while it waits: nobody works on it, the end still reaches followers
    after = streams.last_id(chat.pk)
    assert chat.cancel()
    (end,) = ends(chat.pk, after)
    assert end.status == "cancelled"


def test_a_queued_reply_cancelled_before_a_worker_took_it(services, llm):
    chat = Chat.objects.create()
    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="Later"))
    start = streams.last_id(chat.pk)
    assert runs.interrupt(chat.pk, "cancelled")
    (end,) = ends(chat.pk, start)
    assert (end.run_id, end.status) == (str(run.pk), "cancelled")
