"""``Idempotency-Key``: a retried request gets the first outcome and starts nothing."""

import threading
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from django_llmchat import streams
from django_llmchat.models import Chat, IdempotencyKey, Message, Run
from django_llmchat.tasks import wait_for_background_runs
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as ScriptedCall
from tests.conftest import require_service

from .conftest import sse_frames, url
from .test_ui_chat import chunks, post, user
from .test_views_runs import paused  # noqa: F401 - a fixture: a run waiting for two approvals

pytestmark = pytest.mark.django_db

SSE = {"HTTP_ACCEPT": "text/event-stream"}
MODEL = "gpt-4.1-mini"


def key() -> dict:
    return {"HTTP_IDEMPOTENCY_KEY": uuid.uuid4().hex}


def prompts(chat) -> int:
    return Message.objects.filter(chat=chat, role="user").count()


@pytest.fixture
def inline(fake_llm):
    fake_llm.configure("openai", MODEL, TASKS_EAGER_WITHOUT_BROKER="inline")
    return fake_llm


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


def ask(api, chat, content="Hi", headers=None, **extra):
    return api.post(
        url("chat-messages", pk=chat.pk), {"content": content}, format="json", **headers, **extra
    )


# -- POST chats/{id}/messages/, queued ---------------------------------------------------------
def test_a_retried_message_gets_the_first_202_and_stores_one_prompt(
    api, chat, inline, django_capture_on_commit_callbacks
):
    inline.script(Reply("Hello."))
    headers = key()
    with django_capture_on_commit_callbacks(execute=True):
        first = ask(api, chat, headers=headers)
    assert first.status_code == 202, first.content
    second = ask(api, chat, headers=headers)
    assert second.status_code == 202
    assert second.json() == first.json()
    assert second["Idempotent-Replayed"] == "true"
    assert prompts(chat) == 1 and chat.runs.count() == 1
    assert len(inline.requests) == 1
    row = IdempotencyKey.objects.get()
    assert row.scope == "messages" and row.chat_id == chat.pk
    assert row.run_id == first.json()["run"]["id"] or str(row.run_id) == str(
        first.json()["run"]["id"]
    )


def test_the_same_key_with_another_body_is_a_422_naming_the_header(api, chat, inline):
    inline.script(Reply("Hello."))
    headers = key()
    assert ask(api, chat, "Hi", headers).status_code == 202
    again = ask(api, chat, "Something else", headers)
    assert again.status_code == 422
    assert again.json()["code"] == "idempotency_key_reused"
    assert "Idempotency-Key" in again.json()["detail"]
    assert prompts(chat) == 1


def test_an_invalid_key_is_a_400_naming_the_header(api, chat, inline):
    response = ask(api, chat, headers={"HTTP_IDEMPOTENCY_KEY": "é" * 3})
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()
    response = ask(api, chat, headers={"HTTP_IDEMPOTENCY_KEY": "x" * 256})
    assert response.status_code == 400
    assert prompts(chat) == 0


def test_another_users_same_key_is_independent(clients, chat, inline, owner):
    inline.script(Reply("One."), Reply("Two."))
    theirs = Chat.objects.create(user=clients.users["other"], provider="openai", model_id=MODEL)
    headers = key()
    assert ask(clients.owner, chat, headers=headers).status_code == 202
    assert ask(clients.other, theirs, headers=headers).status_code == 202
    assert prompts(chat) == 1 and prompts(theirs) == 1
    assert IdempotencyKey.objects.count() == 2


def test_a_key_is_per_chat(api, chat, inline, owner):
    """The same key on another chat of the user is another request's key."""
    inline.script(Reply("One."), Reply("Two."))
    other = Chat.objects.create(user=owner, provider="openai", model_id=MODEL)
    headers = key()
    assert ask(api, chat, headers=headers).status_code == 202
    second = ask(api, other, headers=headers)
    assert second.status_code == 202, second.content
    assert "Idempotent-Replayed" not in second
    assert prompts(chat) == 1 and prompts(other) == 1
    # and each chat still replays its own first answer
    again = ask(api, other, headers=headers)
    assert again.status_code == 202 and again["Idempotent-Replayed"] == "true"
    assert again.json()["message"]["id"] == second.json()["message"]["id"]
    assert prompts(other) == 1


def test_an_expired_key_starts_a_new_run_and_is_purged(api, chat, inline, settings):
    inline.script(Reply("One."), Reply("Two."))
    headers = key()
    assert ask(api, chat, headers=headers).status_code == 202
    day = IdempotencyKey.objects.get().created_at - timedelta(days=2)
    IdempotencyKey.objects.update(created_at=day)
    assert ask(api, chat, headers=headers).status_code == 202
    assert prompts(chat) == 2 and chat.runs.count() == 2
    assert IdempotencyKey.objects.get().created_at > day  # the old row made room
    IdempotencyKey.objects.update(created_at=day)
    call_command("llmchat_recover")
    assert not IdempotencyKey.objects.exists()


# -- POST chats/{id}/messages/, streamed -------------------------------------------------------
def test_a_streamed_retry_without_events_answers_the_ended_run_as_json(api, chat, inline):
    inline.script(Reply("Streamed."))
    headers = key()
    first = ask(api, chat, headers=headers, **SSE)
    frames = sse_frames(b"".join(first.streaming_content).decode())
    assert frames[-1]["event"] == "run_finished"
    second = ask(api, chat, headers=headers, **SSE)
    assert second.status_code == 200 and second["Content-Type"] == "application/json"
    assert second.json()["run"]["status"] == "succeeded"
    assert prompts(chat) == 1 and chat.runs.count() == 1 and len(inline.requests) == 1


def test_a_streamed_retry_replays_the_runs_stream(api, chat, inline, events_url):
    inline.script(Reply("Streamed here.", chunk_size=4))
    headers = key()
    first = ask(api, chat, headers=headers, **SSE)
    original = sse_frames(b"".join(first.streaming_content).decode())
    second = ask(api, chat, headers=headers, **SSE)
    assert second.status_code == 200 and second["Content-Type"] == "text/event-stream"
    replayed = sse_frames(b"".join(second.streaming_content).decode())
    assert [(f["event"], f["id"]) for f in replayed] == [(f["event"], f["id"]) for f in original]
    # Last-Event-ID: only what followed it
    third = ask(api, chat, headers=headers, HTTP_LAST_EVENT_ID=original[1]["id"], **SSE)
    rest = sse_frames(b"".join(third.streaming_content).decode())
    assert [f["id"] for f in rest] == [f["id"] for f in original[2:]]
    assert prompts(chat) == 1 and chat.runs.count() == 1 and len(inline.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_a_streamed_retry_replays_the_runs_stream_under_asgi(owner, inline, events_url):
    """Under ASGI the replay is read in a worker thread (an async response): the same
    frames, and after ``Last-Event-ID`` only what followed; one prompt, one run."""
    from asgiref.sync import async_to_sync
    from django.test import AsyncClient
    from rest_framework.authtoken.models import Token

    inline.script(Reply("Streamed here.", chunk_size=4), Reply("Bonjour !", chunk_size=3))
    chat = Chat.objects.create(user=owner, model_id=MODEL, provider="openai")
    token = Token.objects.create(user=owner).key
    sent = {"Authorization": f"Token {token}", "Idempotency-Key": uuid.uuid4().hex}

    async def post(path, body, **headers):
        response = await AsyncClient().post(
            path, body, content_type="application/json", headers={**sent, **headers}
        )
        assert response.status_code == 200, response.content
        assert response.is_async
        body = b"".join([chunk async for chunk in response.streaming_content]).decode()
        return response, body

    def ask_sse(**headers):
        path = url("chat-messages", pk=chat.pk)
        return async_to_sync(post)(path, {"content": "Hi"}, Accept="text/event-stream", **headers)

    first, body = ask_sse()
    original = sse_frames(body)
    assert original[-1]["event"] == "run_finished"
    second, body = ask_sse()
    assert second["Idempotent-Replayed"] == "true"
    replayed = sse_frames(body)
    assert [(f["event"], f["id"]) for f in replayed] == [(f["event"], f["id"]) for f in original]
    third, body = ask_sse(**{"Last-Event-ID": original[2]["id"]})
    assert [f["id"] for f in sse_frames(body)] == [f["id"] for f in original[3:]]
    assert prompts(chat) == 1 and chat.runs.count() == 1 and len(inline.requests) == 1

    # ui/chat: the UI message stream replayed the same way
    message = {
        "id": f"asgi-{uuid.uuid4().hex}",
        "role": "user",
        "parts": [{"type": "text", "text": "Again"}],
    }
    body = {"id": str(chat.pk), "messages": [message], "trigger": "submit-message"}
    ui_first, streamed = async_to_sync(post)(url("ui-chat"), body)
    ui_second, again = async_to_sync(post)(url("ui-chat"), body)
    assert ui_second["Idempotent-Replayed"] == "true"
    kinds = [b[6:] for b in streamed.split("\n\n") if b.startswith("data: ")]
    replayed_kinds = [b[6:] for b in again.split("\n\n") if b.startswith("data: ")]
    assert replayed_kinds[-1] == "[DONE]"
    assert [c for c in replayed_kinds if "text-delta" in c] == [
        c for c in kinds if "text-delta" in c
    ]
    assert prompts(chat) == 2 and chat.runs.count() == 2 and len(inline.requests) == 2


# -- POST ui/chat ------------------------------------------------------------------------------
def test_a_retried_send_message_with_the_same_message_id_stores_one_prompt(
    api, chat, inline, events_url
):
    inline.script(Reply("Bonjour !"))
    message = user("Say hello")
    first = chunks(post(api, chat.pk, message))
    second = chunks(post(api, chat.pk, message))
    assert [c["type"] for c in second] == [c["type"] for c in first]
    assert prompts(chat) == 1 and chat.runs.count() == 1 and len(inline.requests) == 1
    changed = post(api, chat.pk, {**message, "parts": [{"type": "text", "text": "Other"}]})
    assert changed.status_code == 422


def test_a_replayed_ui_stream_names_repeated_vendor_ids_as_the_first_did(
    api, owner, fake_llm, events_url
):
    """A vendor restarting its call ids at ``call_0`` in each step: the replay of a retried
    request gives each call the ``toolCallId`` the first stream gave it."""
    from django_llmchat.testing import ToolCall as ScriptedCall

    from .test_views_runs import api_lookup

    fake_llm.configure(
        "deepseek",
        "deepseek-chat",
        TASKS_EAGER_WITHOUT_BROKER="inline",
        EVENTS_URL=events_url,
        EVENTS_KEY_PREFIX=settings_prefix(),
    )
    chat = Chat.objects.create(user=owner, provider="deepseek", model_id="deepseek-chat")
    chat.with_tools(api_lookup)
    fake_llm.script(
        Reply(tool_calls=[ScriptedCall("api_lookup", {"city": "Paris"}, "call_0")]),
        Reply(tool_calls=[ScriptedCall("api_lookup", {"city": "Rome"}, "call_0")]),
        Reply("Both big."),
    )
    message = user("Paris and Rome?")
    first = chunks(post(api, chat.pk, message))
    again = chunks(post(api, chat.pk, message))

    def ids(streamed):
        return [c["toolCallId"] for c in streamed if c["type"] == "tool-input-available"]

    assert len(set(ids(first))) == 2
    assert ids(again) == ids(first)
    assert len(fake_llm.requests) == 3  # nothing was asked again


def settings_prefix() -> str:
    from django.conf import settings

    return settings.LLMCHAT["EVENTS_KEY_PREFIX"]


def test_ui_chat_without_events_answers_the_run(api, chat, inline):
    inline.script(Reply("Bonjour !"))
    message = user("Say hello")
    chunks(post(api, chat.pk, message))
    again = post(api, chat.pk, message)
    assert again.status_code == 200 and again.json()["run"]["status"] == "succeeded"
    assert prompts(chat) == 1 and len(inline.requests) == 1


@pytest.mark.parametrize("face", ["ui", "sse"])
def test_a_streamed_retry_without_events_answers_a_run_waiting_for_a_decision(
    api, chat, inline, face
):
    """The first request's stream ended when its run paused for a tool-call decision:
    without live events the retry answers the run as it is (as a key whose request never
    answered is rebuilt), where it used to refuse it as still in progress."""
    from .test_views_runs import api_transfer

    chat.with_tools(api_transfer)
    inline.script(Reply(tool_calls=[ScriptedCall("api_transfer", {"amount": 5})]))
    if face == "ui":
        message = user("Pay")
        chunks(post(api, chat.pk, message))
        again = post(api, chat.pk, message)
    else:
        headers = key()
        b"".join(ask(api, chat, content="Pay", headers=headers, **SSE).streaming_content)
        again = ask(api, chat, content="Pay", headers=headers, **SSE)
    assert again.status_code == 200, again.content
    assert again["Idempotent-Replayed"] == "true"
    assert again.json()["run"]["status"] == "awaiting_approval"
    assert prompts(chat) == 1 and chat.runs.count() == 1 and len(inline.requests) == 1


# -- approve / deny / cancel -------------------------------------------------------------------
def test_a_retried_approval_gets_the_first_202(
    api,
    paused,  # noqa: F811
    fake_llm,
    django_capture_on_commit_callbacks,
):
    headers = key()
    first = api.post(url("tool-call-approve", pk=paused.pk, call_id="call_a"), **headers)
    assert first.status_code == 202
    second = api.post(url("tool-call-approve", pk=paused.pk, call_id="call_a"), **headers)
    assert second.status_code == 202 and second.json() == first.json()
    other = api.post(url("tool-call-deny", pk=paused.pk, call_id="call_a"), **headers)
    assert other.status_code == 202 or other.status_code == 409  # its own scope: answered
    fake_llm.script(Reply("Paid."))
    headers = key()
    with django_capture_on_commit_callbacks(execute=True):
        last = api.post(url("tool-call-deny", pk=paused.pk, call_id="call_b"), **headers)
    assert last.status_code == 202 and last.json()["resumed"] is True
    again = api.post(url("tool-call-deny", pk=paused.pk, call_id="call_b"), **headers)
    assert again.json() == last.json()
    assert paused.runs.count() == 1 and len(fake_llm.requests) == 2
    mismatch = api.post(url("tool-call-deny", pk=paused.pk, call_id="call_a"), **headers)
    assert mismatch.status_code == 422


def test_a_retried_cancel_gets_the_first_202(api, chat):
    from django_llmchat import runs

    runs.enqueue(chat, Message(chat=chat, role="user", content="Later."))
    headers = key()
    first = api.post(url("chat-cancel", pk=chat.pk), **headers)
    assert first.status_code == 202, first.content
    second = api.post(url("chat-cancel", pk=chat.pk), **headers)
    assert second.status_code == 202 and second.json() == first.json()
    assert api.post(url("chat-cancel", pk=chat.pk)).status_code == 409  # without a key


def test_a_cancel_key_is_per_chat(api, chat, owner):
    from django_llmchat import runs

    other = Chat.objects.create(user=owner, provider="openai", model_id=MODEL)
    for each in (chat, other):
        runs.enqueue(each, Message(chat=each, role="user", content="Later."))
    headers = key()
    first = api.post(url("chat-cancel", pk=chat.pk), **headers)
    second = api.post(url("chat-cancel", pk=other.pk), **headers)  # the same key
    assert first.status_code == second.status_code == 202, second.content
    assert "Idempotent-Replayed" not in second
    assert [r.status for r in Run.objects.order_by("id")] == [Run.CANCELLED, Run.CANCELLED]


# -- a key whose first request died before answering ------------------------------------------
def crashed(row: IdempotencyKey, *, ago: float = 0) -> None:
    """The row as a first request that died before its answer left it: in progress."""
    IdempotencyKey.objects.filter(pk=row.pk).update(
        response_status=None,
        response_body=None,
        created_at=row.created_at - timedelta(seconds=ago),
    )


def test_a_key_whose_run_ended_answers_it_though_its_request_died(
    api, chat, inline, django_capture_on_commit_callbacks
):
    inline.script(Reply("Hello."))
    headers = key()
    with django_capture_on_commit_callbacks(execute=True):
        first = ask(api, chat, headers=headers)
    assert first.status_code == 202
    crashed(IdempotencyKey.objects.get())  # just now: the lease is not over
    second = ask(api, chat, headers=headers)
    assert second.status_code == 202, second.content
    assert second["Idempotent-Replayed"] == "true"
    body = second.json()
    assert body["message"] == first.json()["message"]
    assert body["run"]["id"] == first.json()["run"]["id"]
    assert body["run"]["status"] == "succeeded"
    assert prompts(chat) == 1 and chat.runs.count() == 1 and len(inline.requests) == 1
    # stored: later retries get the same answer
    assert IdempotencyKey.objects.get().response_status == 202
    assert ask(api, chat, headers=headers).json() == body


def test_a_key_whose_run_goes_on_is_in_progress_until_the_lease_ends(api, chat, settings):
    from django_llmchat import runs
    from django_llmchat.api.idempotency import request_hash

    settings.LLMCHAT = {**settings.LLMCHAT, "RUN_LEASE": 30}
    # the first request admitted its run (queued: no worker took it yet), then died
    prompt = Message(chat=chat, role="user", content="Hi")
    run, _ = runs.enqueue(chat, prompt)
    body = {"content": "Hi", "attachments": [], "sse": False}
    row = IdempotencyKey.objects.create(
        user=chat.user,
        scope="messages",
        key="crashed-1",
        chat=chat,
        run=run,
        request_hash=request_hash("messages", chat.pk, body),
    )
    headers = {"HTTP_IDEMPOTENCY_KEY": "crashed-1"}
    early = ask(api, chat, headers=headers)
    assert early.status_code == 409
    assert early.json()["code"] == "idempotency_key_in_progress"
    crashed(row, ago=31)  # the lease is over: nobody will answer it
    late = ask(api, chat, headers=headers)
    assert late.status_code == 202, late.content
    assert late.json()["run"]["id"] == run.pk or str(late.json()["run"]["id"]) == str(run.pk)
    assert late.json()["run"]["status"] == "queued"
    assert late.json()["message"]["id"] == run.prompt_id
    assert prompts(chat) == 1 and chat.runs.count() == 1


def test_a_key_with_nothing_left_of_its_request_is_dropped_after_the_lease(
    api, chat, inline, settings, django_capture_on_commit_callbacks
):
    from django_llmchat.api.idempotency import request_hash

    settings.LLMCHAT = {**settings.LLMCHAT, "RUN_LEASE": 30}
    inline.script(Reply("Fresh."))
    body = {"content": "Hi", "attachments": [], "sse": False}
    row = IdempotencyKey.objects.create(
        user=chat.user,
        scope="messages",
        key="crashed-2",
        chat=chat,
        request_hash=request_hash("messages", chat.pk, body),
    )
    headers = {"HTTP_IDEMPOTENCY_KEY": "crashed-2"}
    assert ask(api, chat, headers=headers).status_code == 409  # its holder may still answer
    assert prompts(chat) == 0
    crashed(row, ago=31)
    with django_capture_on_commit_callbacks(execute=True):
        fresh = ask(api, chat, headers=headers)
    assert fresh.status_code == 202, fresh.content
    assert prompts(chat) == 1 and chat.runs.count() == 1 and len(inline.requests) == 1
    again = ask(api, chat, headers=headers)
    assert again.json() == fresh.json() and prompts(chat) == 1


# -- racing retries ----------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_racing_retries_make_one_run(django_user_model, fake_llm):
    if connection.vendor == "sqlite":
        pytest.skip("threads writing at once need a server database (SQLite: one writer)")
    fake_llm.configure("openai", MODEL)
    fake_llm.script(*[Reply("answered")] * 8)
    racer = django_user_model.objects.create_user("racer", password="pw")
    chat = Chat.objects.create(user=racer, provider="openai", model_id=MODEL)
    headers = key()
    n = 6
    barrier = threading.Barrier(n)
    outcomes: list = [None] * n

    def one(i):
        try:
            client = APIClient()
            client.force_authenticate(racer)
            barrier.wait(30)
            response = ask(client, chat, headers=headers)
            outcomes[i] = (response.status_code, response.json())
        except Exception as exc:
            outcomes[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert wait_for_background_runs(60)
    codes = sorted(o[0] for o in outcomes)
    assert set(codes) <= {202, 409} and codes.count(202) >= 1, outcomes
    assert all(o[1]["code"] == "idempotency_key_in_progress" for o in outcomes if o[0] == 409)
    bodies = {str(o[1]["run"]["id"]) for o in outcomes if o[0] == 202}
    assert len(bodies) == 1
    assert prompts(chat) == 1 and Run.objects.filter(chat=chat).count() == 1
    assert len(fake_llm.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_racing_first_messages_of_a_new_ui_chat_make_one_run(django_user_model, fake_llm):
    """The AI SDK's first message of a chat it named, sent by several requests at once
    (the message's id is the key): the chat is made once, and its key goes with the run
    in the admission (on PostgreSQL in the admission's call, inside the request's
    transaction that made the chat: in a savepoint of its own). One prompt, one run, one
    provider call; the others answer the first one's outcome (a 409 while it runs)."""
    if connection.vendor == "sqlite":
        pytest.skip("threads writing at once need a server database (SQLite: one writer)")
    fake_llm.configure("openai", MODEL)
    fake_llm.script(*[Reply("answered")] * 8)
    racer = django_user_model.objects.create_user("ui-racer", password="pw")
    message = user("Hello there")
    n = 4
    barrier = threading.Barrier(n)
    outcomes: list = [None] * n

    def one(i):
        try:
            client = APIClient()
            client.force_authenticate(racer)
            barrier.wait(30)
            response = post(client, "a-new-chat", message)
            body = b"".join(response.streaming_content) if response.streaming else response.content
            outcomes[i] = (response.status_code, body)
        except Exception as exc:
            outcomes[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert wait_for_background_runs(60)
    assert all(isinstance(o, tuple) for o in outcomes), outcomes
    codes = sorted(o[0] for o in outcomes)
    assert set(codes) <= {200, 409} and codes.count(200) >= 1, outcomes
    chat = Chat.objects.get(user=racer, client_id="a-new-chat")
    assert prompts(chat) == 1 and Run.objects.filter(chat=chat).count() == 1
    assert IdempotencyKey.objects.filter(chat=chat).count() == 1
    assert Message.objects.get(chat=chat, role="user").raw == {"ui_message_id": message["id"]}
    assert len(fake_llm.requests) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("atomic_requests", [False, True])
def test_a_key_stored_after_its_read_answers_the_first_outcome(
    api, chat, inline, monkeypatch, atomic_requests
):
    """A request that read no key (another request with the same key stored it right
    after the read, as racing requests do) finds it stored when it admits its run: the
    admission stores nothing (the key's unique constraint, in the admission's call on
    PostgreSQL) and the request answers the first one's outcome. Inside the request's own
    transaction too (``ATOMIC_REQUESTS``): the admission's failure rolls back its
    savepoint only, so the answer is read in that transaction."""
    from django_llmchat.api.idempotency import Idempotency

    inline.script(Reply("first"), Reply("second"))
    headers = key()
    first = ask(api, chat, headers=headers)
    assert first.status_code == 202
    real, late = Idempotency.earlier, []

    def read_before_the_first_stored_it(self):
        if not late:  # the retry's own read: before the first request's key was stored
            late.append(self)
            self._looked, self._expired = True, None
            return None
        return real(self)

    monkeypatch.setattr(Idempotency, "earlier", read_before_the_first_stored_it)
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", atomic_requests)
    again = ask(api, chat, headers=headers)
    assert late and again.status_code == 202, again.content
    assert again.json() == first.json()
    assert prompts(chat) == 1 and Run.objects.filter(chat=chat).count() == 1
    assert IdempotencyKey.objects.filter(chat=chat).count() == 1


# -- with encryption at rest: the row holds no plain text of the request --------------------
def _stored_keys() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT request_hash, response_body FROM llmchat_idempotency_key")
        return cursor.fetchall()


@pytest.mark.django_db(transaction=True)
def test_with_encryption_the_key_row_holds_no_plain_text_and_still_replays(api, chat, inline):
    import hashlib
    import json

    from cryptography.fernet import Fernet
    from django.test import override_settings

    from django_llmchat.api.idempotency import request_hash

    words = "the vault code is 7731"
    llmchat = {**inline.server.llmchat_settings("openai", MODEL)}
    llmchat.update(TASKS_EAGER_WITHOUT_BROKER="inline", ENCRYPTION_KEYS=[Fernet.generate_key()])
    inline.script(Reply("Noted: " + words), Reply("Streamed."))
    headers = key()
    with override_settings(LLMCHAT=llmchat):
        first = ask(api, chat, words, headers)
        assert first.status_code == 202, first.content
        assert first.json()["message"]["content"] == words
        wait_for_background_runs()
        again = ask(api, chat, words, headers)
        assert again.status_code == 202 and again.json() == first.json()
        assert again["Idempotent-Replayed"] == "true"
        assert ask(api, chat, words + "!", headers).status_code == 422
        # ui/chat: its body (the client's messages) is fingerprinted the same way
        message = user(words + " again")
        chunks(post(api, chat.pk, message))
        assert post(api, chat.pk, message).status_code == 200
        changed = {**message, "parts": [{"type": "text", "text": "Other"}]}
        assert post(api, chat.pk, changed).status_code == 422
    rows = _stored_keys()
    assert len(rows) == 2
    for digest, body in rows:
        text = json.dumps(body) if not isinstance(body, str) else body
        assert "7731" not in text and "vault" not in text
        assert "7731" not in digest
    # the fingerprint is keyed: not the plain SHA-256 anyone can recompute from a guess
    body = {"content": words, "attachments": [], "sse": False}
    canonical = json.dumps(
        {"scope": "messages", "chat": chat.pk, "body": body}, sort_keys=True, separators=(",", ":")
    )
    digests = [digest for digest, _ in rows]
    assert hashlib.sha256(canonical.encode()).hexdigest() not in digests
    assert request_hash("messages", chat.pk, body) in digests
    assert prompts(chat) == 2 and chat.runs.count() == 2


def test_a_key_stored_unkeyed_or_under_a_rotated_secret_key_still_replays(
    api, chat, inline, settings, django_capture_on_commit_callbacks
):
    import hashlib
    import json

    inline.script(Reply("Hello."))
    headers = key()
    with django_capture_on_commit_callbacks(execute=True):
        first = ask(api, chat, "Hi", headers)
    assert first.status_code == 202
    body = {"content": "Hi", "attachments": [], "sse": False}
    canonical = json.dumps(
        {"scope": "messages", "chat": chat.pk, "body": body}, sort_keys=True, separators=(",", ":")
    )
    row = IdempotencyKey.objects.get()
    old_secret = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "another-secret-key-" * 3, [old_secret]
    assert ask(api, chat, "Hi", headers).json() == first.json()  # the fallback's digest
    assert ask(api, chat, "Hello", headers).status_code == 422
    # a row stored before the fingerprint was keyed: the plain SHA-256
    IdempotencyKey.objects.filter(pk=row.pk).update(
        request_hash=hashlib.sha256(canonical.encode()).hexdigest()
    )
    settings.SECRET_KEY_FALLBACKS = []
    assert ask(api, chat, "Hi", headers).json() == first.json()
    assert ask(api, chat, "Hello", headers).status_code == 422
    assert prompts(chat) == 1
