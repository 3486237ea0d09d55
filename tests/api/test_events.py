"""chats/{id}/events/: following runs from the chat's Redis Stream, resuming with
Last-Event-ID."""

import uuid

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from rest_framework.authtoken.models import Token

from django_llmchat import streams, streams_redis
from django_llmchat.events import RunFinished, RunStarted, TextDelta
from django_llmchat.models import Chat
from django_llmchat.testing import Fault, Reply
from tests.conftest import require_service

from .conftest import close_response, sse_frames, url


@pytest.fixture
def events_url(settings):
    redis_url = require_service("REDIS_URL")
    settings.LLMCHAT = {
        **settings.LLMCHAT,
        "EVENTS_URL": redis_url,
        "EVENTS_KEY_PREFIX": f"t{uuid.uuid4().hex}",
    }
    yield redis_url
    streams.client().delete(streams.stream_key("*"))


def read(response) -> list[dict]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "text/event-stream"
    return sse_frames(b"".join(response.streaming_content).decode())


def publish_run(chat_id, run_id="r1", texts=("a", "b", "c")):
    ids = [streams.publish(chat_id, RunStarted(run_id=run_id))]
    ids += [streams.publish(chat_id, TextDelta(t)) for t in texts]
    ids.append(streams.publish(chat_id, RunFinished(run_id=run_id, status="succeeded")))
    return ids


@pytest.mark.django_db
def test_503_without_events_url(api, chat, settings):
    settings.LLMCHAT = {}
    response = api.get(url("chat-events", pk=chat.pk), HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert "EVENTS_URL" in response.json()["detail"]


@pytest.mark.django_db
def test_follow_a_run_and_resume_with_last_event_id(api, chat, events_url):
    ids = publish_run(chat.pk)
    # "0": everything the stream retains
    frames = read(
        api.get(
            url("chat-events", pk=chat.pk), HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID="0"
        )
    )
    assert [f["event"] for f in frames] == [
        "run_started",
        "text_delta",
        "text_delta",
        "text_delta",
        "run_finished",
    ]
    assert [f["id"] for f in frames] == ids
    # the browser reconnects with the last id it saw: only what followed it
    frames = read(api.get(url("chat-events", pk=chat.pk), HTTP_LAST_EVENT_ID=ids[1]))
    assert [f["data"].get("content") for f in frames] == ["b", "c", None]
    assert frames[-1]["event"] == "run_finished"
    # the query parameter does the same for clients that cannot set headers
    frames = read(api.get(url("chat-events", pk=chat.pk), {"last_event_id": ids[3]}))
    assert [f["event"] for f in frames] == ["run_finished"]


@pytest.mark.django_db
def test_follow_all_keeps_going_across_runs(api, chat, events_url):
    first = publish_run(chat.pk, "r1", ("x",))
    publish_run(chat.pk, "r2", ("y",))
    response = api.get(url("chat-events", pk=chat.pk), {"follow": "all", "last_event_id": first[0]})
    stream = iter(response.streaming_content)
    seen = b""
    while b"r2" not in seen or seen.count(b"run_finished") < 2:
        seen += next(stream)
    close_response(response)
    events = [f["event"] for f in sse_frames(seen.decode())]
    assert events == ["text_delta", "run_finished", "run_started", "text_delta", "run_finished"]


@pytest.mark.django_db(transaction=True)
def test_follow_a_real_run(owner, fake_llm, events_url):
    fake_llm.configure(
        "openai", "gpt-4.1-mini", EVENTS_URL=events_url, EVENTS_KEY_PREFIX=f"t{uuid.uuid4().hex}"
    )
    fake_llm.script(Reply("Live text.", chunk_size=3))
    chat = Chat.objects.create(user=owner)
    token = Token.objects.create(user=owner).key
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    started = client.post(url("chat-messages", pk=chat.pk), {"content": "Go"}, format="json")
    assert started.status_code == 202
    events_url = started.json()["run"]["events_url"]
    assert "?last_event_id=" in events_url  # from before the run: nothing is missed
    frames = read(client.get(events_url))
    from django_llmchat.tasks import wait_for_background_runs

    assert wait_for_background_runs(timeout=10)
    assert frames[0]["event"] == "run_started"
    assert frames[0]["data"]["message_id"] == started.json()["message"]["id"]
    assert (
        "".join(f["data"]["content"] for f in frames if f["event"] == "text_delta") == "Live text."
    )
    assert frames[-1]["event"] == "run_finished" and frames[-1]["data"]["status"] == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_follow_under_asgi(owner, events_url):
    chat = Chat.objects.create(user=owner)
    token = Token.objects.create(user=owner).key
    ids = publish_run(chat.pk)

    async def go():
        response = await AsyncClient().get(
            url("chat-events", pk=chat.pk),
            headers={"Authorization": f"Token {token}", "Last-Event-ID": ids[0]},
        )
        assert response.status_code == 200 and response.is_async
        return b"".join([c async for c in response.streaming_content]).decode()

    frames = sse_frames(async_to_sync(go)())
    assert [f["id"] for f in frames] == ids[1:]


@pytest.mark.django_db
def test_an_unreachable_event_store_ends_with_an_error_event(api, chat, settings, monkeypatch):
    settings.LLMCHAT = {"EVENTS_URL": "redis://127.0.0.1:1/0", "EVENTS_HEARTBEAT": 0.1}
    monkeypatch.setattr(streams_redis, "BREAKER_SECONDS", 0.3)  # how long followers wait for Redis
    response = api.get(url("chat-events", pk=chat.pk))
    body = b"".join(response.streaming_content).decode()
    assert ": keep-alive" in body  # while it waited
    assert sse_frames(body) == [
        {
            "event": "error",
            "data": {
                "type": "events_unavailable",
                "message": "The event stream is unavailable: Redis cannot be reached (for 0.3 s).",
            },
        }
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("where", ["header", "query"])
def test_an_empty_last_event_id_reads_as_none(api, chat, events_url, where):
    """``Last-Event-ID:`` with no value (or ``?last_event_id=``) is no id: the follow
    starts at the run in progress, as without one."""
    import threading

    publish_run(chat.pk, run_id="r1")  # an earlier run, not shown
    started = streams.publish(chat.pk, RunStarted(run_id="r2"))
    streams.publish(chat.pk, TextDelta("x"))
    later = threading.Timer(
        0.3, lambda: streams.publish(chat.pk, RunFinished(run_id="r2", status="succeeded"))
    )
    later.start()
    if where == "header":
        response = api.get(url("chat-events", pk=chat.pk), HTTP_LAST_EVENT_ID="")
    else:
        response = api.get(url("chat-events", pk=chat.pk) + "?last_event_id=")
    frames = read(response)
    later.join()
    assert frames[0]["id"] == started
    assert [f["event"] for f in frames] == ["run_started", "text_delta", "run_finished"]


@pytest.mark.django_db
def test_last_event_ids_that_are_not_of_this_chat_are_refused(api, chat, events_url):
    import time

    ids = publish_run(chat.pk)
    # the other stream's ids come from a later millisecond (two streams written in the same
    # millisecond number their entries alike, and an id of the chat's is not refused)
    last_ms = int(ids[-1].split("-")[0])
    while int(time.time() * 1000) <= last_ms + 1:
        time.sleep(0.001)
    other = Chat.objects.create(user=chat.user)
    others = publish_run(other.pk)
    for bad in ("3", "abc", "1-2-3", "99999999999999-0", others[1]):
        response = api.get(url("chat-events", pk=chat.pk), HTTP_LAST_EVENT_ID=bad)
        assert response.status_code == 400, bad
        assert "Last-Event-ID" in response.json()
    # its own ids, "0" and "0-0" are fine (an id older than what the stream holds too)
    for good in (ids[0], "0", "0-0"):
        response = api.get(url("chat-events", pk=chat.pk), HTTP_LAST_EVENT_ID=good)
        assert response.status_code == 200, good
        close_response(response)


@pytest.mark.django_db(transaction=True)
def test_an_inline_run_is_followed_from_another_tab_and_resumed_by_id(owner, fake_llm, events_url):
    import threading

    from django.db import connection
    from rest_framework.test import APIClient

    fake_llm.configure(
        "openai", "gpt-4.1-mini", EVENTS_URL=events_url, EVENTS_KEY_PREFIX=f"t{uuid.uuid4().hex}"
    )
    fake_llm.script(Fault(chunk_delay=0.02, reply=Reply("Seen from two tabs.", chunk_size=3)))
    chat = Chat.objects.create(user=owner)
    token = Token.objects.create(user=owner).key
    tab, other_tab = APIClient(), APIClient()
    for client in (tab, other_tab):
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    followed: list[dict] = []

    def follow():
        try:
            followed.extend(read(other_tab.get(url("chat-events", pk=chat.pk))))
        finally:
            connection.close()

    follower = threading.Thread(target=follow)
    follower.start()
    streamed = read(
        tab.post(
            url("chat-messages", pk=chat.pk),
            {"content": "Hello"},
            format="json",
            HTTP_ACCEPT="text/event-stream",
        )
    )
    follower.join(15)
    # the inline run went to Redis with the ids its own client saw
    assert [f["event"] for f in streamed][0] == "run_started"
    assert streamed[-1]["event"] == "run_finished"
    assert all(f["id"] and "-" in f["id"] for f in streamed)
    assert [(f["event"], f["id"]) for f in followed] == [(f["event"], f["id"]) for f in streamed]
    # a tab that saw three events resumes after the third
    resumed = read(
        other_tab.get(url("chat-events", pk=chat.pk), HTTP_LAST_EVENT_ID=streamed[2]["id"])
    )
    assert [f["id"] for f in resumed] == [f["id"] for f in streamed[3:]]


@pytest.mark.django_db(transaction=True)
def test_a_blocked_streamed_reply_reaches_no_follower(owner, fake_llm, events_url):
    fake_llm.configure(
        "openai", "gpt-4.1-mini", EVENTS_URL=events_url, EVENTS_KEY_PREFIX=f"t{uuid.uuid4().hex}"
    )
    fake_llm.script(Reply("Here is the secret: 42", chunk_size=3))
    chat = Chat.objects.create(user=owner, agent="tests.api.agents.Careful")
    token = Token.objects.create(user=owner).key
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    streamed = read(
        client.post(
            url("chat-messages", pk=chat.pk),
            {"content": "Tell me"},
            format="json",
            HTTP_ACCEPT="text/event-stream",
        )
    )
    stored = [event for _, event in streams.follow(chat.pk, "0", timeout=1, block_ms=100)]
    # Ids and timestamps are digits too: look for the reply's words, and for any text sent.
    sent = [f.get("data") for f in streamed] + [e.to_dict() for e in stored]
    assert "Here" not in str(sent) and "secret:" not in str(sent)
    assert not [f for f in streamed if f["event"] == "text_delta"]
    assert "guardrail_tripwire" in [f["event"] for f in streamed]
    assert not chat.messages.filter(role="assistant").exists()
    assert chat.runs.get().status == "failed"


@pytest.mark.django_db
def test_events_follow_with_a_session_cookie_or_a_bearer_token(owner, chat, events_url):
    """EventSource sends the session cookie (and Accept: text/event-stream); fetch-based
    clients on another origin send a Bearer token and Last-Event-ID."""
    from django.test import Client
    from rest_framework.test import APIClient

    ids = publish_run(chat.pk)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    frames = read(
        browser.get(
            url("chat-events", pk=chat.pk), HTTP_ACCEPT="text/event-stream", HTTP_LAST_EVENT_ID="0"
        )
    )
    assert [f["id"] for f in frames] == ids
    spa = APIClient()
    spa.credentials(HTTP_AUTHORIZATION=f"Bearer {Token.objects.create(user=owner).key}")
    frames = read(
        spa.get(
            url("chat-events", pk=chat.pk),
            HTTP_ACCEPT="text/event-stream",
            HTTP_LAST_EVENT_ID=ids[2],
            HTTP_ORIGIN="http://spa.example",
        )
    )
    assert [f["data"].get("content") for f in frames] == ["c", None]
    anonymous = Client().get(url("chat-events", pk=chat.pk), HTTP_ACCEPT="text/event-stream")
    assert anonymous.status_code in (401, 403)
    assert anonymous["Content-Type"] == "application/json"


# -- every end reaches the followers ------------------------------------------------------------
def _ends(chat_id) -> list[tuple[str, str]]:
    """The terminal events the chat's stream holds: ``(run id, status)``."""
    return [
        (e.run_id, e.status)
        for _, e in streams.follow(chat_id, "0", block_ms=100, stop_at_run_end=False, timeout=1)
        if isinstance(e, RunFinished)
    ]


@pytest.mark.django_db(transaction=True)
def test_a_queued_run_cancelled_tells_its_followers(api, chat, events_url):
    from django_llmchat import runs
    from django_llmchat.models import Message

    run, _ = runs.enqueue(chat, Message(chat=chat, role="user", content="later"))
    response = api.post(url("chat-cancel", pk=chat.pk), format="json")
    assert response.status_code in (200, 202), response.content
    assert _ends(chat.pk) == [(str(run.pk), "cancelled")]


@pytest.mark.django_db(transaction=True)
def test_a_run_waiting_for_a_decision_cancelled_tells_its_followers(chat, events_url):
    from django_llmchat import runs
    from django_llmchat.models import Run

    run = Run.objects.create(chat=chat, status=Run.AWAITING_APPROVAL, attempt=1)
    assert runs.interrupt(chat.pk, "cancelled")
    assert _ends(chat.pk) == [(str(run.pk), "cancelled")]


@pytest.mark.django_db(transaction=True)
def test_an_inline_stream_cancelled_by_its_client_tells_its_followers(
    api, chat, fake_llm, events_url
):
    """``CANCEL_ON_DISCONNECT``: the client leaves mid-reply, its frames end there, and
    the run's ``run_finished`` (cancelled) still reaches the chat's stream."""
    from .test_sse import SSE

    fake_llm.configure(
        "openai",
        "gpt-4.1-mini",
        CANCEL_ON_DISCONNECT=True,
        EVENTS_URL=events_url,
        EVENTS_KEY_PREFIX=streams_redis.settings.EVENTS_KEY_PREFIX,
    )
    fake_llm.script(Fault(chunk_delay=0.01, reply=Reply("x" * 400, chunk_size=4)))
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "hi"}, format="json", **SSE)
    stream = iter(response.streaming_content)
    next(stream), next(stream), next(stream)
    close_response(response)
    run = chat.runs.get()
    assert run.status == "cancelled"
    assert _ends(chat.pk) == [(str(run.pk), "cancelled")]
