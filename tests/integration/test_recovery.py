"""Runs survive their workers: SIGKILL in the middle of multi-step tool runs, a lease that
runs out with no redelivery, real Celery workers on Redis against the test database."""

from __future__ import annotations

import json
import time

import pytest

from django_llmchat.models import Chat, Message, Run, ToolCall
from django_llmchat.tasks import recover_runs
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing import ToolCall as Call
from tests.factories import taken_run

from .conftest import current_app, wait_until

pytestmark = [pytest.mark.redis]

STEPS = 3  # tool rounds before the final answer


def _tool_rounds(request) -> int:
    return json.dumps(request.body).count('"function_call_output"')


def _responder(request):
    """Each chat: three slow tool rounds, then its final answer."""
    done = _tool_rounds(request)
    if done < STEPS:
        return Reply(tool_calls=[Call("slow_step", {"n": done})])
    return Fault(chunk_delay=0.02, reply=Reply(f"Final for {request.last_user_text}", chunk_size=6))


def _finals(chat) -> list[str]:
    return list(
        Message.objects.filter(chat=chat, role="assistant", content__startswith="Final for")
        .order_by("id")
        .values_list("content", flat=True)
    )


def test_sigkill_during_tool_runs_then_a_new_worker_gives_one_final_reply_each(services, llm):
    queue = f"{services.queue}-tools"
    first = services.worker(queue=queue, concurrency=20)
    llm.server.responder = _responder
    chats = [Chat.objects.create(tools=["slow_step"]) for _ in range(20)]
    with current_app(services.sender(queue)):
        for i, chat in enumerate(chats):
            chat.ask_later(f"job {i}")

    # kill the worker once every chat has stored at least one tool round
    def one_round_each():
        answered = Message.objects.filter(chat__in=chats, role="tool").values("chat").distinct()
        return answered.count() == len(chats)

    wait_until(one_round_each, timeout=30, message=first.output())
    task_ids = [chat.runs.get().task_id for chat in chats]  # unacknowledged by the worker
    first.kill()
    killed_at = time.monotonic()
    assert Run.objects.filter(chat__in=chats, status="running").count() == 20
    assert not any(_finals(chat) for chat in chats)

    second = services.worker(queue=queue, concurrency=20)
    try:
        wait_until(
            lambda: Run.objects.filter(chat__in=chats, status="succeeded").count() == 20,
            timeout=60,
            message=second.output(),
        )
        # every run's task (redelivered from the killed worker) has ended: nothing else is
        # left to answer, so a duplicate reply could only be there by now
        for task_id in task_ids:
            assert services.wait_task_ended(task_id).startswith("SUCCESS")
        for i, chat in enumerate(chats):
            assert _finals(chat) == [f"Final for job {i}"]
            # every call has its result; every step is stored once
            calls = ToolCall.objects.filter(chat=chat)
            assert calls.count() == STEPS
            assert all(c.get_result() is not None for c in calls.select_related("result"))
            run = chat.runs.get()
            assert run.status == "succeeded" and run.attempt == 2 and run.steps == STEPS + 1
            assert Chat.objects.get(pk=chat.pk).status == "idle"
        assert not Run.objects.filter(chat__in=chats).exclude(status="succeeded").exists()
        assert time.monotonic() - killed_at < 60
    finally:
        second.stop()


def test_a_lease_that_ran_out_without_redelivery_is_recovered_by_the_periodic_task(
    worker, services, llm
):
    llm.script("Recovered.")
    chat = Chat.objects.create()
    prompt = chat.add_message(role="user", content="Still there?")
    # a worker took the run and died; its task is gone from the broker
    run = taken_run(chat, prompt, lease=-5, worker="lost-host:1")
    with current_app(services.sender()):
        recover_runs.delay()  # what Celery beat sends every minute
    wait_until(lambda: Run.objects.get(pk=run.pk).status == "succeeded", timeout=20)
    assert [(m.role, m.content) for m in chat.transcript()] == [
        ("user", "Still there?"),
        ("assistant", "Recovered."),
    ]
    run.refresh_from_db()
    assert run.attempt == 2 and run.worker != "lost-host:1"
    assert Chat.objects.get(pk=chat.pk).status == "idle"
