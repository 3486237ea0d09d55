"""Event fan-out through Redis Streams: publish, follow, resume, caps and expiry."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_llmchat import streams, streams_redis
from django_llmchat.events import (
    Interrupt,
    RunFinished,
    RunStarted,
    StepFinished,
    TextDelta,
    event_from_dict,
    to_sse,
)
from tests.conftest import require_service


def test_run_events_round_trip():
    started = RunStarted(run_id="r1", message_id=7)
    assert started.role == "system"
    assert started.to_dict() == {"role": "system", "run_id": "r1", "message_id": 7}
    assert RunStarted(run_id="r1").to_dict() == {"role": "system", "run_id": "r1"}
    finished = RunFinished(run_id="r1", status="failed", error="openai: boom (HTTP 500)")
    assert finished.to_dict() == {
        "role": "system",
        "run_id": "r1",
        "status": "failed",
        "error": "openai: boom (HTTP 500)",
    }
    assert RunFinished(run_id="r1").to_dict() == {
        "role": "system",
        "run_id": "r1",
        "status": "succeeded",
    }
    for event in (started, RunStarted(run_id="x"), finished, RunFinished(run_id="y")):
        assert event_from_dict(event.type, event.to_dict()) == event
    assert to_sse(RunStarted(run_id="r"), id="1-0").startswith("event: run_started\n")


def test_without_events_url_publishing_does_nothing():
    with override_settings(LLMCHAT={}):
        assert not streams.enabled()
        assert streams.publish(1, TextDelta("hi")) is None
        with pytest.raises(ImproperlyConfigured, match=r"LLMCHAT\['EVENTS_URL'\]"):
            next(streams.follow(1))


def test_a_clear_error_when_redis_is_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.setattr(streams_redis, "_clients", {})
    with override_settings(LLMCHAT={"EVENTS_URL": "redis://127.0.0.1:6379/0"}):
        with pytest.raises(ImproperlyConfigured) as info:
            streams.publish(1, TextDelta("hi"))
    assert "LLMCHAT['EVENTS_URL']" in str(info.value)
    assert "django-llmchat[redis]" in str(info.value)


@pytest.fixture
def redis_events():
    url = require_service("REDIS_URL")
    prefix = f"llmchat-test-{uuid.uuid4().hex[:8]}"
    value = {"EVENTS_URL": url, "EVENTS_KEY_PREFIX": prefix, "EVENTS_MAXLEN": 100}
    with override_settings(LLMCHAT=value):
        yield value
        client = streams.client()
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)


def publish_run(chat_id, run_id, *texts, status="succeeded"):
    ids = [streams.publish(chat_id, RunStarted(run_id=run_id))]
    ids += [streams.publish(chat_id, TextDelta(t)) for t in texts]
    ids.append(streams.publish(chat_id, RunFinished(run_id=run_id, status=status)))
    return ids


@pytest.mark.redis
def test_publish_follow_and_resume(redis_events):
    assert streams.last_id(1) == "0-0"
    ids = publish_run(1, "a", "Hel", "lo")
    assert streams.last_id(1) == ids[-1]
    got = list(streams.follow(1, "0", block_ms=50, timeout=2))
    assert [i for i, _ in got] == ids
    assert [e for _, e in got] == [
        RunStarted(run_id="a"),
        TextDelta("Hel"),
        TextDelta("lo"),
        RunFinished(run_id="a", status="succeeded"),
    ]
    # Last-Event-ID: resume after the second event
    assert list(streams.follow(1, ids[1], block_ms=50, timeout=2)) == got[2:]
    client = streams.client()
    key = streams.stream_key(1)
    assert key == f"{redis_events['EVENTS_KEY_PREFIX']}:chat:1:events"
    assert 0 < client.ttl(key) <= 24 * 3600
    entry = client.xrange(key, ids[0], ids[0])[0][1]
    assert entry["type"] == "run_started" and abs(float(entry["ts"]) - time.time()) < 60


@pytest.mark.redis
def test_follow_without_an_id_starts_at_the_run_in_progress(redis_events):
    publish_run(2, "old", "old text")
    streams.publish(2, RunStarted(run_id="new"))
    streams.publish(2, TextDelta("partial"))
    # a retry ends an attempt, not the run
    streams.publish(2, RunFinished(run_id="new", status="retrying", error="busy"))
    streams.publish(2, RunStarted(run_id="new-2"))
    follower = streams.follow(2, block_ms=50, timeout=5)
    box = [next(follower)]  # placed: it replays the run in progress from its start
    streams.publish(2, Interrupt(reason="cancelled"))
    streams.publish(2, RunFinished(run_id="new-2", status="interrupted"))
    streams.publish(2, TextDelta("after the end"))
    box.extend(follower)
    assert [e for _, e in box] == [
        RunStarted(run_id="new"),
        TextDelta("partial"),
        RunFinished(run_id="new", status="retrying", error="busy"),
        RunStarted(run_id="new-2"),
        Interrupt(reason="cancelled"),
        RunFinished(run_id="new-2", status="interrupted"),
    ]


@pytest.mark.redis
def test_after_a_finished_run_a_follower_waits_for_the_next(redis_events):
    publish_run(3, "done", "x")
    assert list(streams.follow(3, block_ms=20, timeout=0.3)) == []
    beats = list(streams.follow(3, block_ms=20, timeout=0.2, heartbeat=True))
    assert beats and set(beats) == {(None, None)}
    assert list(streams.follow(3, "$", block_ms=20, timeout=0.2)) == []


@pytest.mark.redis
def test_streams_are_capped(redis_events):
    for i in range(400):
        streams.publish(4, TextDelta(str(i)))
    length = streams.client().xlen(streams.stream_key(4))
    assert 100 <= length < 400


@pytest.mark.redis
def test_afollow(redis_events):
    ids = publish_run(5, "a", "one", "two")

    async def collect(after, timeout=2.0):
        return [item async for item in streams.afollow(5, after, block_ms=50, timeout=timeout)]

    everything = asyncio.run(collect("0"))
    assert [i for i, _ in everything] == ids
    assert asyncio.run(collect(ids[1])) == everything[2:]
    assert asyncio.run(collect(None, timeout=0.3)) == []  # the only run has finished


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_an_in_process_run_publishes_its_events(redis_events, fake_llm):
    from django_llmchat.models import Chat, Run

    fake_llm.configure(
        "openai", "gpt-4.1-mini", TASKS_EAGER_WITHOUT_BROKER="inline", **redis_events
    )
    fake_llm.script("Hi there")
    chat = Chat.objects.create()
    prompt = chat.ask_later("Hello")
    events = [e for _, e in streams.follow(chat.pk, "0", block_ms=50, timeout=2)]
    assert isinstance(events[0], RunStarted) and events[0].message_id == prompt.pk
    assert "".join(e.content for e in events if isinstance(e, TextDelta)) == "Hi there"
    reply = chat.messages.get(role="assistant")
    step = next(e for e in events if isinstance(e, StepFinished))
    assert step.message_id == reply.pk and step.step == 1 and step.token_usage == reply.tokens
    run = Run.objects.with_totals().get(pk=events[0].run_id)
    assert events[-1] == RunFinished(
        run_id=events[0].run_id,
        status="succeeded",
        message_id=reply.pk,
        token_usage=run.tokens,
        cost=format(run.cost().total.normalize(), "f"),
    )


@pytest.mark.redis
def test_follow_and_afollow_start_at_the_run_in_progress_across_pages(redis_events, monkeypatch):
    """``last_id=None`` scans back page by page to the latest final ``RunFinished``: both
    followers run the one protocol and start at the same entry (a retrying end is not
    final: the retried attempt belongs to the run in progress)."""
    monkeypatch.setattr(streams, "_SCAN_PAGE", 2)
    publish_run(6, "r1", "old", "older")
    live = [streams.publish(6, RunStarted(run_id="r2"))]
    live.append(streams.publish(6, RunFinished(run_id="r2", status="retrying")))
    live.append(streams.publish(6, RunStarted(run_id="r2")))
    live += [streams.publish(6, TextDelta(str(i))) for i in range(5)]

    async def collect():
        return [item async for item in streams.afollow(6, None, block_ms=50, timeout=0.5)]

    followed = list(streams.follow(6, None, block_ms=50, timeout=0.5))
    assert [i for i, _ in followed] == live
    assert [i for i, _ in asyncio.run(collect())] == live
    publish_run(6, "r3")  # once a run is over, a new follower waits for the next one
    assert list(streams.follow(6, None, block_ms=50, timeout=0.3)) == []


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("asynchronous", [False, True])
def test_ui_following_keeps_alive_while_a_run_lives_and_stops_after(redis_events, asynchronous):
    """``follow_chunks`` writes a keep-alive at a heartbeat while the chat has a run queued
    or running, and ends (``[DONE]``) at the first heartbeat after."""
    from django_llmchat.api.ui import DONE, follow_chunks
    from django_llmchat.models import Chat, Run

    async def first(frames, count):
        out = []
        async for text in frames:
            out.append(text)
            if len(out) == count:
                break
        await frames.aclose()
        return out

    def frames_of(chat, count):
        frames = follow_chunks(chat, asynchronous=asynchronous)
        if asynchronous:
            return asyncio.run(first(frames, count))
        out = [text for text, _ in zip(frames, range(count), strict=False)]
        frames.close()
        return out

    chat = Chat.objects.create()
    run = Run.objects.create(chat=chat, status=Run.QUEUED)
    assert frames_of(chat, 1) == [": keep-alive\n\n"]
    run.status = Run.FAILED
    run.save(update_fields=["status"])
    assert frames_of(chat, 2) == [DONE]


def test_a_patient_follow_asks_a_failing_redis_again_and_goes_on():
    """The protocol of a follow with ``patience``: a failed command (Redis restarting) is
    a heartbeat, a pause, and the same command again; an answer goes on as usual."""
    import redis

    with override_settings(LLMCHAT={"EVENTS_URL": "redis://127.0.0.1:1/0"}):
        following = streams._Following(7, None, 200, True, None, True, patience=5.0)
    steps = iter(following)
    assert next(steps)[0] == "xrevrange"
    following.failed(redis.ConnectionError("refused"))
    assert next(steps) == ("emit", (None, None), None)  # a keep-alive while it waits
    method, (pause,), _ = next(steps)
    assert method == "sleep" and 0 < pause <= 0.2
    assert next(steps)[0] == "xrevrange"  # asked again
    following.answer = []
    assert next(steps)[0] == "xread"
    fields = {"type": "text_delta", "data": '{"role":"assistant","content":"a"}'}
    following.answer = [("k", [("1-0", fields)])]
    assert next(steps) == ("emit", ("1-0", TextDelta("a")), None)
    # an error that is no failure to reach Redis is raised at once
    with pytest.raises(redis.ResponseError):
        following.failed(redis.ResponseError("WRONGTYPE"))


def test_a_patient_follow_gives_up_naming_the_cause():
    import redis

    with override_settings(LLMCHAT={"EVENTS_URL": "redis://127.0.0.1:1/0"}):
        following = streams._Following(7, "0", 50, True, None, False, patience=0.1)
    steps = iter(following)
    failures = 0
    with pytest.raises(streams.FollowFailed) as gave_up:
        for method, args, _ in steps:
            assert method in ("xread", "sleep")  # no heartbeat was asked for
            if method == "sleep":
                time.sleep(*args)
            else:
                failures += 1
                following.failed(redis.TimeoutError("Timeout reading from socket"))
    assert failures >= 2
    assert gave_up.value.cause == "Redis did not answer for 0.1 s"
    assert isinstance(gave_up.value.__cause__, redis.TimeoutError)


def test_a_patient_follows_wait_counts_from_its_first_command():
    """Setting up the follow (a first import of the client, a slow process) is no wait for
    Redis: a follow set up longer ago than its patience still sends a keep-alive and asks
    again after its first failed command."""
    import redis

    with override_settings(LLMCHAT={"EVENTS_URL": "redis://127.0.0.1:1/0"}):
        following = streams._Following(7, "0", 50, True, None, True, patience=0.1)
    time.sleep(0.15)
    steps = iter(following)
    assert next(steps)[0] == "xread"
    following.failed(redis.ConnectionError("refused"))
    assert next(steps) == ("emit", (None, None), None)


def test_a_patient_follow_ends_at_its_timeout_though_redis_fails():
    import redis

    with override_settings(LLMCHAT={"EVENTS_URL": "redis://127.0.0.1:1/0"}):
        following = streams._Following(7, "0", 50, True, 0.15, False, patience=10.0)
    started = time.monotonic()
    for method, args, _ in following:
        if method == "sleep":
            time.sleep(*args)
        else:
            following.failed(redis.ConnectionError("refused"))
    assert time.monotonic() - started < 1  # ended quietly at its timeout, not its patience
