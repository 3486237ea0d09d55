"""complete_chat in real worker processes: replies, crash recovery, duplicates, queued
prompts, task retries, cancellation and live events through Redis."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from celery import _state as celery_state
from django.db import connection, transaction

from django_llmchat import streams
from django_llmchat.events import (
    Interrupt,
    RunFinished,
    RunStarted,
    TextDelta,
    TextDone,
)
from django_llmchat.models import Chat, Message, Run, Usage
from django_llmchat.tasks import complete_chat
from django_llmchat.testing import Fault, Reply

from .conftest import current_app, wait_until

pytestmark = [pytest.mark.redis]

LONG = "The quick brown fox jumps over the lazy dog. " * 4


def assistant_count(chat) -> int:
    return Message.objects.filter(chat=chat, role="assistant").count()


def roles(chat) -> list[str]:
    return [m.role for m in chat.transcript()]


def events_until_end(chat_id, after: str, timeout: float = 15.0):
    return list(streams.follow(chat_id, after, block_ms=200, timeout=timeout))


def test_a_worker_fills_in_the_reply(worker, llm):
    llm.script("Paris.")
    chat = Chat.objects.create()
    prompt = chat.ask_later("What is the capital of France?")
    assert prompt.role == "user" and prompt.pk
    wait_until(lambda: assistant_count(chat) == 1)
    chat.refresh_from_db()
    assert [(m.role, m.content) for m in chat.transcript()] == [
        ("user", "What is the capital of France?"),
        ("assistant", "Paris."),
    ]
    wait_until(lambda: Chat.objects.get(pk=chat.pk).status == "idle")
    assert Message.objects.get(pk=prompt.pk).raw is None  # the queued mark is gone


def test_sigkill_mid_stream_then_a_new_worker_gives_one_reply(services, llm):
    queue = f"{services.queue}-kill"
    first = services.worker(queue=queue, concurrency=4)
    slow = Fault(chunk_delay=0.15, reply=Reply(LONG, chunk_size=4))  # about 7 s of stream
    llm.script(slow, Reply("Recovered answer."))
    chat = Chat.objects.create()
    with current_app(services.sender(queue)):
        start = streams.last_id(chat.pk)
        chat.ask_later("Tell me a long story")
    # the first worker streams: wait for a few deltas, then kill it mid-stream
    seen = []
    for _, event in streams.follow(chat.pk, start, block_ms=200, timeout=15):
        seen.append(event)
        if sum(isinstance(e, TextDelta) for e in seen) >= 3:
            break
    assert any(isinstance(e, RunStarted) for e in seen)
    task_id = chat.runs.get().task_id  # the run's task, unacknowledged by the worker
    first.kill()
    assert assistant_count(chat) == 0  # nothing of the interrupted step was stored
    # but the attempt is on the ledger: written before its call, its input estimated
    dead = Usage.objects.get(chat=chat)
    assert dead.status == "pending" and dead.estimated and dead.input_tokens > 0

    second = services.worker(queue=queue, concurrency=4)
    try:
        wait_until(lambda: assistant_count(chat) == 1, timeout=30, message=second.output())
        # the run's task (redelivered from the killed worker) has ended: nothing else is
        # left to answer the prompt, so a duplicate reply could only be there by now
        assert services.wait_task_ended(task_id).startswith("SUCCESS")
        assert roles(chat) == ["user", "assistant"]
        assert Message.objects.get(chat=chat, role="assistant").content == "Recovered answer."
        assert len(llm.requests) == 2
        wait_until(lambda: Chat.objects.get(pk=chat.pk).status == "idle")
        # one row per attempt: the killed one marked lost by the takeover, then the reply
        rows = Usage.objects.filter(chat=chat).order_by("id")
        assert list(rows.values_list("status", "estimated")) == [
            ("lost", True),
            ("succeeded", False),
        ]
        assert rows[0].input_tokens == dead.input_tokens
    finally:
        second.stop()


def test_a_duplicated_task_makes_no_second_reply(worker, services, llm):
    llm.script(Fault(chunk_delay=0.02, reply=Reply("Only once.", chunk_size=2)))
    chat = Chat.objects.create()
    prompt = chat.ask_later("Say it once")
    tasks = [chat.runs.get().task_id]  # the task ask_later sent
    # the same task delivered twice more while the first runs, and once after it ended
    tasks += [complete_chat.delay(chat.pk, reply_to=prompt.pk).id for _ in range(2)]
    wait_until(lambda: assistant_count(chat) == 1)
    tasks.append(complete_chat.delay(chat.pk, reply_to=prompt.pk).id)
    # every copy has ended (a copy that found the chat busy retried, then found the reply)
    ends = [services.wait_task_ended(t) for t in tasks]
    assert sorted(ends) == ["SUCCESS done", "SUCCESS nothing", "SUCCESS nothing", "SUCCESS nothing"]
    assert roles(chat) == ["user", "assistant"]
    assert len(llm.requests) == 1


def test_two_questions_at_once_are_answered_in_order(worker, llm):
    llm.script(
        Fault(chunk_delay=0.03, reply=Reply("First answer.", chunk_size=3)),
        Fault(chunk_delay=0.03, reply=Reply("Second answer.", chunk_size=3)),
    )
    chat = Chat.objects.create()
    errors = []
    sender = celery_state.get_current_app()  # the current app is per thread

    def ask(text):
        try:
            with current_app(sender):
                Chat.objects.get(pk=chat.pk).ask_later(text)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(q,)) for q in ("First?", "Second?")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    wait_until(lambda: assistant_count(chat) == 2, timeout=20)
    transcript = [(m.role, m.content) for m in chat.transcript()]
    assert [r for r, _ in transcript] == ["user", "assistant", "user", "assistant"]
    first_q, second_q = transcript[0][1], transcript[2][1]
    assert {first_q, second_q} == {"First?", "Second?"}
    assert transcript[1][1] == "First answer." and transcript[3][1] == "Second answer."
    first, second = llm.requests
    assert [m["content"] for m in first.body["input"]] == [first_q]
    assert second.body["input"][0]["content"] == first_q
    assert second.body["input"][-1]["content"] == second_q
    assert len(second.body["input"]) == 3


def test_a_rate_limit_retries_the_task_then_one_reply(worker, llm):
    llm.script(Fault(status=429, retry_after=1), "After the wait.")
    chat = Chat.objects.create()
    start = streams.last_id(chat.pk)
    chat.ask_later("Busy?")
    wait_until(lambda: assistant_count(chat) == 1, timeout=20)
    assert roles(chat) == ["user", "assistant"]
    statuses = sorted(Usage.objects.filter(chat=chat).values_list("status", flat=True))
    assert statuses == ["failed", "succeeded"]
    ends = [e for _, e in streams.follow(chat.pk, start, block_ms=200, timeout=5)]
    finished = [e for e in ends if isinstance(e, RunFinished)]
    assert [f.status for f in finished] == ["retrying", "succeeded"]
    assert finished[0].error == "The provider is rate limiting requests; retry later."
    wait_until(lambda: Chat.objects.get(pk=chat.pk).status == "idle")


def test_cancel_from_this_process_stops_the_worker_within_a_second(worker, llm):
    llm.script(Fault(chunk_delay=0.1, reply=Reply(LONG, chunk_size=4)))
    chat = Chat.objects.create()
    start = streams.last_id(chat.pk)
    chat.ask_later("Talk for a long time")
    events = []
    cancelled_at = None
    for _, event in streams.follow(chat.pk, start, block_ms=200, timeout=20):
        events.append((time.monotonic(), event))
        if cancelled_at is None and isinstance(event, TextDelta):
            cancelled_at = time.monotonic()
            assert Chat.objects.get(pk=chat.pk).cancel()
    interrupts = [(t, e) for t, e in events if isinstance(e, Interrupt)]
    assert [e for _, e in interrupts] == [Interrupt(reason="cancelled")]
    assert interrupts[0][0] - cancelled_at < 1.0
    assert isinstance(events[-1][1], RunFinished) and events[-1][1].status == "cancelled"
    chat.refresh_from_db()
    assert chat.status == "idle" and not chat.cancel_requested
    assert chat.last_run.status == "cancelled"
    # the interrupted step stored the text its followers were sent, nothing half-written
    shown = "".join(e.content for _, e in events if isinstance(e, TextDelta))
    reply = Message.objects.get(chat=chat, role="assistant")
    assert roles(chat) == ["user", "assistant"] and reply.content == shown
    assert reply.finish_reason == "cancelled" and not reply.tool_calls.exists()
    assert list(Usage.objects.filter(chat=chat).values_list("status", "message_id")) == [
        ("cancelled", reply.pk)
    ]


def test_follow_receives_the_run_and_resumes_after_last_id(worker, llm):
    llm.script(Fault(chunk_delay=0.01, reply=Reply("Hello from the worker.", chunk_size=5)))
    chat = Chat.objects.create()
    start = streams.last_id(chat.pk)
    assert start == "0-0"
    prompt = chat.ask_later("Hi")
    received = events_until_end(chat.pk, start)
    ids = [i for i, _ in received]
    events = [e for _, e in received]
    assert events[0] == RunStarted(run_id=events[0].run_id, message_id=prompt.pk)
    reply = chat.messages.get(role="assistant")
    assert (events[-1].run_id, events[-1].status) == (events[0].run_id, "succeeded")
    assert events[-1].message_id == reply.pk and events[-1].token_usage == reply.tokens
    text = "".join(e.content for e in events if isinstance(e, TextDelta))
    assert text == "Hello from the worker."
    assert TextDone("Hello from the worker.") in events
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))

    # a client that saw the first three events resumes after the third (Last-Event-ID)
    resumed = events_until_end(chat.pk, ids[2])
    assert resumed == received[3:]
    # without an id, an idle chat's follower waits for the next run, then sees it whole
    llm.script("Again.")
    follower = streams.follow(chat.pk, None, block_ms=200, timeout=15, heartbeat=True)
    assert next(follower) == (None, None)  # placed and waiting: a read came back empty
    chat.ask_later("Once more")
    box = [item for item in follower if item[1] is not None]
    assert isinstance(box[0][1], RunStarted) and isinstance(box[-1][1], RunFinished)
    assert "".join(e.content for _, e in box if isinstance(e, TextDelta)) == "Again."

    async def follow_async():
        return [item async for item in streams.afollow(chat.pk, ids[2], block_ms=200, timeout=5)]

    assert asyncio.run(follow_async()) == received[3:]


def test_questions_asked_in_one_transaction_are_queued_on_commit(worker, llm):
    llm.script("One.", "Two.")
    chat = Chat.objects.create()
    with transaction.atomic():
        chat.ask_later("1?")
        chat.ask_later("2?")
    wait_until(lambda: assistant_count(chat) == 2)
    assert [(m.role, m.content) for m in chat.transcript()] == [
        ("user", "1?"),
        ("assistant", "One."),
        ("user", "2?"),
        ("assistant", "Two."),
    ]


def test_a_threads_pool_worker_on_a_psycopg_pool(services, llm):
    if connection.vendor != "postgresql":
        pytest.skip("the psycopg connection pool is PostgreSQL's")
    queue = f"{services.queue}-pool"
    pooled = services.worker(
        queue=queue, concurrency=16, LLMCHAT_TEST_DB_POOL='{"min_size": 2, "max_size": 8}'
    )
    try:
        llm.server.responder = lambda request: Fault(
            chunk_delay=0.05, reply=Reply(f"Answer to {request.last_user_text}", chunk_size=4)
        )
        chats = [Chat.objects.create() for _ in range(16)]
        with current_app(services.sender(queue)):
            for i, chat in enumerate(chats):
                chat.ask_later(f"question {i}")
        wait_until(
            lambda: Message.objects.filter(chat__in=chats, role="assistant").count() == 16,
            timeout=30,
            message=pooled.output(),
        )
        for i, chat in enumerate(chats):
            reply = Message.objects.get(chat=chat, role="assistant")
            assert reply.content == f"Answer to question {i}"
    finally:
        pooled.stop()


def test_the_lease_keeper_gives_its_pooled_connection_back_between_ticks(services, llm):
    """A pool of one connection serves a run and its process's lease keeper: the keeper
    borrows it for each tick's renewals only, so the run's thread, back from the model
    after several ticks, gets it to store the reply (instead of waiting out the pool's
    timeout while the keeper sits on it)."""
    if connection.vendor != "postgresql":
        pytest.skip("the psycopg connection pool is PostgreSQL's")
    queue = f"{services.queue}-keeper"
    lease = {**services.llmchat, "RUN_LEASE": 0.9}  # a tick every 0.3 s
    pooled = services.worker(
        queue=queue,
        concurrency=1,
        LLMCHAT_TEST_DB_POOL='{"min_size": 1, "max_size": 1, "timeout": 3}',
        LLMCHAT_TEST_SETTINGS=json.dumps(lease),
    )
    try:
        llm.script(Fault(first_byte_delay=1.5, reply=Reply("Stored.")))
        chat = Chat.objects.create()
        with current_app(services.sender(queue)):
            chat.ask_later("Slow?")
        wait_until(lambda: assistant_count(chat) == 1, timeout=8, message=pooled.output())
        run = chat.runs.get()
        assert run.status == "succeeded" and run.attempt == 1
        assert list(Usage.objects.filter(chat=chat).values_list("status", flat=True)) == [
            "succeeded"
        ]
    finally:
        pooled.stop()


def test_a_chats_queued_prompt_waits_behind_other_chats_asked_before_it(services, llm):
    """A worker's task answers its own run and hands the chat's next one to the back of
    the queue: with one thread, chat A's second prompt, asked after chat B's, is answered
    after B's (not straight after A's first, by the thread that answered it)."""
    queue = f"{services.queue}-one"
    single = services.worker(queue=queue, concurrency=1)
    try:
        llm.server.responder = lambda request: Fault(
            first_byte_delay=0.4, reply=Reply(f"Answer to {request.last_user_text}")
        )
        a, b = Chat.objects.create(), Chat.objects.create()
        with current_app(services.sender(queue)):
            a.ask_later("A1")
            b.ask_later("B1")
            a.ask_later("A2")  # all three before the first reply (0.4 s)
        wait_until(
            lambda: Message.objects.filter(chat__in=[a, b], role="assistant").count() == 3,
            timeout=30,
            message=single.output(),
        )
        order = list(
            Run.objects.filter(chat__in=[a, b])
            .order_by("started_at")
            .values_list("prompt__content", flat=True)
        )
        assert order == ["A1", "B1", "A2"]
        assert [m.content for m in a.transcript()] == ["A1", "Answer to A1", "A2", "Answer to A2"]
    finally:
        single.stop()
