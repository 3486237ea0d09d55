"""Replies streamed inline as Server-Sent Events: WSGI (a sync iterator) and ASGI (an async
one), against the loopback fake provider."""

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient
from rest_framework.authtoken.models import Token

from django_llmchat.models import Chat, Message
from django_llmchat.testing import Fault, Reply

from .conftest import close_response, sse_frames, url

SSE = {"HTTP_ACCEPT": "text/event-stream"}


def read(response) -> str:
    assert response.streaming, response.content
    return b"".join(response.streaming_content).decode()


@pytest.mark.django_db
def test_inline_stream_wsgi(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(
        Reply("Once upon a time.", chunk_size=5, usage={"input_tokens": 7, "output_tokens": 4})
    )
    response = api.post(
        url("chat-messages", pk=chat.pk), {"content": "A story"}, format="json", **SSE
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    frames = sse_frames(read(response))
    names = [f["event"] for f in frames]
    assert names[0] == "run_started" and names[-1] == "run_finished"
    assert [int(f["id"]) for f in frames] == list(range(1, len(frames) + 1))
    text = "".join(f["data"]["content"] for f in frames if f["event"] == "text_delta")
    assert text == "Once upon a time."
    assert len([n for n in names if n == "text_delta"]) > 1
    usage = next(f for f in frames if f["event"] == "token_usage_done")
    assert usage["data"]["token_usage"]["input_tokens"] == 7
    assert frames[-1]["data"]["status"] == "succeeded"
    user = Message.objects.get(chat=chat, role="user")
    assert frames[0]["data"]["message_id"] == user.pk
    run = chat.runs.get()
    assert frames[0]["data"]["run_id"] == str(run.pk) == frames[-1]["data"]["run_id"]
    assert run.status == "succeeded" and run.prompt == user
    assert [m.content for m in chat.transcript()] == ["A story", "Once upon a time."]
    assert Chat.objects.get(pk=chat.pk).status == "idle"


@pytest.mark.django_db
def test_inline_stream_ends_with_an_error_event(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini", MAX_RETRIES=0)
    fake_llm.script(Fault(status=401, body={"error": {"message": "bad key sk-secret-123"}}))
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "hi"}, format="json", **SSE)
    body = read(response)
    frames = sse_frames(body)
    assert [f["event"] for f in frames] == ["run_started", "error", "run_finished"]
    assert frames[1]["data"] == {
        "type": "auth",
        "message": "The provider rejected the credentials.",
        "status": 401,
    }
    assert frames[2]["data"]["status"] == "failed"
    assert "sk-secret" not in body
    # the prompt stays; its run records the failure in safe words
    run = chat.runs.get()
    assert run.status == "failed" and run.error == "The provider rejected the credentials."
    assert Chat.objects.get(pk=chat.pk).status == "idle"
    assert [m.role for m in chat.transcript()] == ["user"]


@pytest.mark.django_db
def test_inline_stream_of_a_blocked_prompt_releases_the_chat(api, owner, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(user=owner, agent="tests.api.agents.Strict")
    response = api.post(
        url("chat-messages", pk=chat.pk), {"content": "a secret"}, format="json", **SSE
    )
    frames = sse_frames(read(response))
    assert [f["event"] for f in frames] == ["guardrail_tripwire", "run_finished"]
    assert frames[-1]["data"]["status"] == "blocked"
    assert Chat.objects.get(pk=chat.pk).status == "idle"
    assert not chat.runs.exists() and not chat.messages.exists()  # nothing was stored


@pytest.mark.django_db(transaction=True)
def test_a_stream_never_read_still_answers_its_stored_prompt(api, chat, fake_llm):
    """The prompt and its run pass the gate before the response starts (a refusal is an
    HTTP status); a client that leaves before the first byte leaves the reply to finish
    as a client leaving mid-stream does."""
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("still answered"))
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "hi"}, format="json", **SSE)
    assert chat.runs.count() == 1 and chat.messages.get().content == "hi"
    close_response(response)  # the client went away before the first byte
    run = wait_for_run(chat)
    assert run.status == "succeeded"
    assert chat.messages.get(role="assistant").content == "still answered"
    assert len(fake_llm.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_a_client_leaving_mid_stream_lets_the_run_finish(api, chat, fake_llm):
    from django_llmchat.models import Usage

    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("x" * 400, chunk_size=4, usage={"input_tokens": 5, "output_tokens": 9}))
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "hi"}, format="json", **SSE)
    stream = iter(response.streaming_content)
    next(stream), next(stream)
    close_response(response)  # the run goes on in the background and is stored
    run = wait_for_run(chat)
    assert run.status == "succeeded"
    assert chat.messages.get(role="assistant").content == "x" * 400
    assert list(Usage.objects.filter(run=run).values_list("status", "output_tokens")) == [
        ("succeeded", 9)
    ]
    assert Chat.objects.get(pk=chat.pk).status == "idle"


@pytest.mark.django_db(transaction=True)
def test_a_client_leaving_mid_stream_cancels_the_run_when_set(api, chat, fake_llm, settings):
    from django_llmchat.models import Usage

    fake_llm.configure("openai", "gpt-4.1-mini", CANCEL_ON_DISCONNECT=True)
    fake_llm.script(Fault(chunk_delay=0.01, reply=Reply("x" * 400, chunk_size=4)))
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "hi"}, format="json", **SSE)
    stream = iter(response.streaming_content)
    next(stream), next(stream), next(stream)
    close_response(response)
    run = chat.runs.get()
    assert run.status == "cancelled" and run.interrupt_reason == "stream_closed"
    # the text the client was sent before it left is the reply, with the attempt's row
    reply = chat.messages.get(role="assistant")
    assert reply.finish_reason == "cancelled" and reply.content and "x" * 400 != reply.content
    assert list(Usage.objects.filter(run=run).values_list("status", "message_id")) == [
        ("cancelled", reply.pk)
    ]
    assert Chat.objects.get(pk=chat.pk).status == "idle"


def wait_for_run(chat, timeout=10.0):
    import time

    deadline = time.monotonic() + timeout
    while True:
        run = chat.runs.order_by("-id").first()
        if run is not None and run.is_finished:
            return run
        assert time.monotonic() < deadline, "the run did not finish"
        time.sleep(0.02)


@pytest.mark.django_db(transaction=True)
def test_inline_stream_asgi(owner, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("Async hello.", chunk_size=3))
    chat = Chat.objects.create(user=owner, model_id="gpt-4.1-mini", provider="openai")
    token = Token.objects.create(user=owner).key

    async def go():
        client = AsyncClient()
        response = await client.post(
            url("chat-messages", pk=chat.pk),
            {"content": "Hi"},
            content_type="application/json",
            headers={"Authorization": f"Token {token}", "Accept": "text/event-stream"},
        )
        assert response.status_code == 200
        assert response.is_async
        chunks = [chunk async for chunk in response.streaming_content]
        return b"".join(chunks).decode()

    frames = sse_frames(async_to_sync(go)())
    assert frames[0]["event"] == "run_started" and frames[-1]["event"] == "run_finished"
    text = "".join(f["data"]["content"] for f in frames if f["event"] == "text_delta")
    assert text == "Async hello."
    assert [m.content for m in chat.transcript()] == ["Hi", "Async hello."]
    assert Chat.objects.get(pk=chat.pk).status == "idle"


@pytest.mark.django_db(transaction=True)
def test_inline_stream_asgi_error_event(owner, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini", MAX_RETRIES=0)
    fake_llm.script(Fault(status=500))
    chat = Chat.objects.create(user=owner)
    token = Token.objects.create(user=owner).key

    async def go():
        client = AsyncClient()
        response = await client.post(
            url("chat-messages", pk=chat.pk),
            {"content": "Hi"},
            content_type="application/json",
            headers={"Authorization": f"Token {token}", "Accept": "text/event-stream"},
        )
        return b"".join([c async for c in response.streaming_content]).decode()

    frames = sse_frames(async_to_sync(go)())
    assert [f["event"] for f in frames] == ["run_started", "error", "run_finished"]
    assert frames[1]["data"]["type"] == "provider_error"
    assert frames[2]["data"]["status"] == "failed"
    assert chat.runs.get().status == "failed"
    assert Chat.objects.get(pk=chat.pk).status == "idle"


@pytest.mark.django_db
def test_validation_errors_of_a_stream_request_are_json(api, chat):
    response = api.post(url("chat-messages", pk=chat.pk), {"content": ""}, format="json", **SSE)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "content" in response.json()
