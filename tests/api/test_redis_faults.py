"""A hung Redis (it accepts connections and never answers, as a SIGSTOPped server does)
never stalls a reply: a publish gives up after ``EVENTS_PUBLISH_TIMEOUT``, the breaker
then skips publishing, the reply is stored and its run ends."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from django_llmchat import streams, streams_redis
from django_llmchat.models import Run
from django_llmchat.tasks import wait_for_background_runs
from django_llmchat.testing import Reply

from .conftest import sse_frames, url

pytestmark = pytest.mark.django_db(transaction=True)

SSE = {"HTTP_ACCEPT": "text/event-stream"}


class HungRedis:
    """A TCP listener that takes connections and reads nothing back."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.held: list[socket.socket] = []
        self.url = f"redis://127.0.0.1:{self.sock.getsockname()[1]}/0"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def hung(fake_llm, monkeypatch):
    redis = HungRedis()
    streams._reset_breaker()
    monkeypatch.setattr(streams_redis, "_clients", {})
    fake_llm.configure("openai", "gpt-4.1-mini", EVENTS_URL=redis.url, EVENTS_PUBLISH_TIMEOUT=0.5)
    yield redis
    streams._reset_breaker()
    redis.close()


def test_an_inline_reply_is_stored_though_redis_hangs(api, chat, fake_llm, hung):
    fake_llm.script(Reply("Stored anyway.", chunk_size=3))
    started = time.monotonic()
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "Hi"}, format="json", **SSE)
    frames = sse_frames(b"".join(response.streaming_content).decode())
    took = time.monotonic() - started
    assert response.status_code == 200
    assert frames[-1]["event"] == "run_finished" and frames[-1]["data"]["status"] == "succeeded"
    # one publish waited out the timeout; the breaker skipped the rest (no 60 s stall)
    assert took < 5, took
    assert chat.runs.get().status == Run.SUCCEEDED
    assert chat.messages.get(role="assistant").content == "Stored anyway."


def test_a_queued_reply_is_stored_though_redis_hangs(api, chat, fake_llm, hung):
    fake_llm.configure(
        "openai",
        "gpt-4.1-mini",
        EVENTS_URL=hung.url,
        EVENTS_PUBLISH_TIMEOUT=0.5,
        TASKS_EAGER_WITHOUT_BROKER=True,
    )
    fake_llm.script("Queued and stored.")
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "Hi"}, format="json")
    assert response.status_code == 202
    assert wait_for_background_runs(20)
    assert chat.runs.get().status == Run.SUCCEEDED
    assert chat.messages.get(role="assistant").content == "Queued and stored."


def test_the_breaker_closes_again(monkeypatch, hung):
    from django_llmchat.events import TextDelta

    monkeypatch.setattr(streams_redis, "BREAKER_SECONDS", 0.2)
    with pytest.raises(Exception) as first:
        streams.publish(1, TextDelta("a"))
    assert not isinstance(first.value, streams.EventsUnavailable)  # it tried, and timed out
    with pytest.raises(streams.EventsUnavailable):
        streams.publish(1, TextDelta("b"))  # skipped at once
    time.sleep(0.3)
    with pytest.raises(Exception) as again:
        streams.publish(1, TextDelta("c"))
    assert not isinstance(again.value, streams.EventsUnavailable)  # tries again


def timed_body(response, limit: float) -> tuple[list[tuple[float, str]], bool]:
    """The pieces of a streamed body with when each came (seconds from the start), read
    in a thread for at most ``limit`` seconds: whether the body ended within it."""
    pieces: list[tuple[float, str]] = []
    started = time.monotonic()

    def read():
        from django.db import connections

        try:
            for piece in response.streaming_content:
                text = piece.decode() if isinstance(piece, bytes) else piece
                pieces.append((time.monotonic() - started, text))
        finally:
            connections.close_all()  # this thread's, as a server's request_finished does

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(limit)
    return pieces, not reader.is_alive()


def follow_while_redis_fails(fake_llm, monkeypatch, redis_url: str):
    streams._redis()  # imported before the clock starts (a process's first follow imports it)
    fake_llm.configure(
        "openai",
        "gpt-4.1-mini",
        EVENTS_URL=redis_url,
        EVENTS_PUBLISH_TIMEOUT=0.2,
        EVENTS_HEARTBEAT=0.3,
    )
    monkeypatch.setattr(streams_redis, "BREAKER_SECONDS", 2.0)  # how long followers wait for Redis


def check_kept_alive_then_ended(pieces, ended, cause: str) -> None:
    assert ended, pieces  # the response ended by itself, in bounded time
    assert pieces[0][1] == ": connected\n\n"
    alive = [at for at, text in pieces if text == ": keep-alive\n\n"]
    assert len(alive) >= 2, pieces  # never silent while waiting for Redis
    times = [at for at, _ in pieces]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    # a heartbeat (and, while Redis hangs, a read's timeout) apart, with room for a busy
    # machine: far below the 2 s of patience
    assert max(gaps) < 0.3 + 0.2 + 0.7, pieces
    assert times[-1] < 2.0 + 0.3 + 0.2 + 1.5, pieces  # given up after about 2 s
    frames = sse_frames("".join(text for _, text in pieces))
    assert frames == [
        {
            "event": "error",
            "data": {
                "type": "events_unavailable",
                "message": f"The event stream is unavailable: {cause}.",
            },
        }
    ]


def test_events_keep_alive_then_end_while_redis_hangs(api, chat, fake_llm, hung, monkeypatch):
    follow_while_redis_fails(fake_llm, monkeypatch, hung.url)
    response = api.get(url("chat-events", pk=chat.pk), **SSE)
    assert response.status_code == 200
    pieces, ended = timed_body(response, 8)
    check_kept_alive_then_ended(pieces, ended, "Redis did not answer for 2 s")


def test_events_keep_alive_then_end_while_redis_is_down(api, chat, fake_llm, monkeypatch):
    streams._reset_breaker()
    monkeypatch.setattr(streams_redis, "_clients", {})
    follow_while_redis_fails(fake_llm, monkeypatch, "redis://127.0.0.1:1/0")
    response = api.get(url("chat-events", pk=chat.pk), **SSE)
    pieces, ended = timed_body(response, 8)
    check_kept_alive_then_ended(pieces, ended, "Redis cannot be reached (for 2 s)")
    streams._reset_breaker()


def test_events_under_asgi_keep_alive_then_end_while_redis_hangs(
    owner, chat, fake_llm, hung, monkeypatch
):
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient
    from rest_framework.authtoken.models import Token

    follow_while_redis_fails(fake_llm, monkeypatch, hung.url)
    token = Token.objects.create(user=owner).key
    started = time.monotonic()

    async def go():
        response = await AsyncClient().get(
            url("chat-events", pk=chat.pk), headers={"Authorization": f"Token {token}"}
        )
        assert response.status_code == 200 and response.is_async
        out = []
        async for piece in response.streaming_content:
            out.append((time.monotonic() - started, piece.decode()))
        return out

    pieces = async_to_sync(go)()
    check_kept_alive_then_ended(pieces, True, "Redis did not answer for 2 s")


def test_a_resumed_ui_stream_keeps_alive_then_ends_while_redis_hangs(
    api, chat, fake_llm, hung, monkeypatch
):
    import json

    follow_while_redis_fails(fake_llm, monkeypatch, hung.url)
    Run.objects.create(chat=chat, status=Run.RUNNING, attempt=1)  # a run to resume
    response = api.get(url("ui-chat-stream", id=str(chat.pk)))
    assert response.status_code == 200
    pieces, ended = timed_body(response, 8)
    assert ended, pieces
    alive = [text for _, text in pieces if text == ": keep-alive\n\n"]
    assert len(alive) >= 2, pieces
    body = "".join(text for _, text in pieces)
    assert body.endswith("data: [DONE]\n\n")
    chunks = [json.loads(b[6:]) for b in body.split("\n\n") if b.startswith("data: {")]
    assert chunks[-1] == {
        "type": "error",
        "errorText": "The event stream is unavailable: Redis did not answer for 2 s.",
    }
