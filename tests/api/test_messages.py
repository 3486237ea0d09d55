"""chats/{id}/messages/: the transcript with everything attached, in a constant number of
queries, and new user messages (202 + the run)."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat.models import Attachment, Chat, Message
from django_llmchat.testing import Reply, ToolCall
from tests.factories import build_transcript

from .conftest import url

pytestmark = pytest.mark.django_db


def test_transcript_with_tool_calls_results_usage_and_attachments(api, chat):
    build_transcript(chat, 1)
    response = api.get(url("chat-messages", pk=chat.pk))
    assert response.status_code == 200
    body = response.json()
    assert body["next"] is None and body["previous"] is None
    messages = body["results"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    user, call, result, answer = messages[:4]
    assert user["content"] == "question 0"
    assert user["attachments"][0]["filename"] == "doc.txt"
    assert user["attachments"][0]["url"].startswith("http://testserver/")
    assert user["cost"] == {} and user["tokens"] == {}
    assert call["tool_calls"] == [
        {
            "id": "call_0",
            "name": "weather",
            "arguments": {"i": 0},
            "approval": "",
            "result": {"message_id": result["id"], "content": "sunny 0"},
        }
    ]
    assert call["finish_reason"] == "tool_calls"
    assert call["tokens"] == {
        "input_tokens": 100,
        "output_tokens": 20,
        "cache_read_tokens": 10,
        "total_tokens": 130,
    }
    assert call["cost"] == {
        "input": "0.0000800000",
        "output": "0.0000200000",
        "total": "0.0001000000",
    }
    assert result["tool_call_id"] == "call_0"
    assert answer["thinking"] == "Let me see." and answer["content"] == "It is sunny (0)."


def test_citations_and_hand_built_messages(api, chat):
    from django_llmchat.values import Citation

    chat.add_message(role="user", content="Sources?")
    chat.add_message(
        role="assistant",
        content="See the docs.",
        model_id="gpt-4.1-mini",
        provider="openai",
        cost="0.5",
        citations=[Citation(url="https://example.com", title="Docs")],
    )
    messages = api.get(url("chat-messages", pk=chat.pk)).json()["results"]
    assert messages[1]["citations"] == [{"url": "https://example.com", "title": "Docs"}]
    assert messages[1]["cost"] == {"total": "0.5000000000"}


def queries_for_first_page(api, owner, turns):
    chat = Chat.objects.create(user=owner, model_id="gpt-4.1-mini", provider="openai")
    build_transcript(chat, turns)
    path = url("chat-messages", pk=chat.pk)
    api.get(path)  # warm per-process caches
    with CaptureQueriesContext(connection) as ctx:
        response = api.get(path)
    assert response.status_code == 200
    assert len(response.json()["results"]) == 50
    counts = [len(ctx)]
    if turns * 4 >= 150:  # a later page too
        with CaptureQueriesContext(connection) as later:
            response = api.get(response.json()["next"])
        assert len(response.json()["results"]) == 50
        counts.append(len(later))
    return counts


def test_messages_page_query_count_does_not_grow_with_the_transcript(api, owner):
    small = queries_for_first_page(api, owner, 15)  # 60 messages
    large = queries_for_first_page(api, owner, 150)  # 600 messages
    # token, the page (the chat's access checked in it), tool calls (+ results),
    # attachments, usage rows, siblings (the registry only for a message without usage
    # rows)
    assert small == [6]
    assert large == [6, 6]


def test_messages_cursor_walks_the_whole_transcript_in_order(api, chat):
    build_transcript(chat, 30, with_attachments=False)  # 120 messages
    expected = list(
        Message.objects.filter(chat=chat).order_by("created_at", "id").values_list("id", flat=True)
    )
    seen, page = [], api.get(url("chat-messages", pk=chat.pk), {"page_size": 7}).json()
    while True:
        seen += [m["id"] for m in page["results"]]
        if not page["next"]:
            break
        page = api.get(page["next"]).json()
    assert seen == expected
    # from the end, backwards
    seen, page = (
        [],
        api.get(url("chat-messages", pk=chat.pk), {"from": "end", "page_size": 50}).json(),
    )
    assert page["next"] is None
    while True:
        seen = [m["id"] for m in page["results"]] + seen
        if not page["previous"]:
            break
        page = api.get(page["previous"]).json()
    assert seen == expected


def test_messages_of_an_empty_chat(api, chat):
    assert api.get(url("chat-messages", pk=chat.pk)).json() == {
        "next": None,
        "previous": None,
        "results": [],
    }


def test_create_message_returns_202_with_the_run(
    api, chat, fake_llm, django_capture_on_commit_callbacks
):
    fake_llm.configure("openai", "gpt-4.1-mini", TASKS_EAGER_WITHOUT_BROKER="inline")
    fake_llm.script(Reply("Paris."))
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            url("chat-messages", pk=chat.pk), {"content": "Capital of France?"}, format="json"
        )
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["message"]["role"] == "user"
    assert body["message"]["content"] == "Capital of France?"
    assert body["run"]["chat"] == chat.pk
    assert body["run"]["events_url"] == f"http://testserver/api/chats/{chat.pk}/events/"
    # the in-process run answered
    assert [m.content for m in chat.transcript()] == ["Capital of France?", "Paris."]
    assert Chat.objects.get(pk=chat.pk).status == "idle"


def test_create_message_with_attachments(api, chat, fake_llm, django_capture_on_commit_callbacks):
    fake_llm.configure("openai", "gpt-4.1-mini", TASKS_EAGER_WITHOUT_BROKER="inline")
    fake_llm.script(Reply("A square and a note."))
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
    files = [
        # the client's type is not trusted: the bytes say PNG
        SimpleUploadedFile("square.bin", png, content_type="application/octet-stream"),
        SimpleUploadedFile("note.txt", "héllo".encode(), content_type="text/plain"),
    ]
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            url("chat-messages", pk=chat.pk),
            {"content": "What are these?", "attachments": files},
            format="multipart",
        )
    assert response.status_code == 202, response.content
    attachments = response.json()["message"]["attachments"]
    assert [(a["filename"], a["mime_type"], a["size"]) for a in attachments] == [
        ("square.png", "image/png", len(png)),  # named for what it holds
        ("note.txt", "text/plain", 6),
    ]
    assert Attachment.objects.get(filename="note.txt").read() == "héllo".encode()


def test_a_message_sent_while_a_run_works_is_queued(api, chat):
    from datetime import timedelta

    from django.utils import timezone

    from django_llmchat.models import Run

    working = Run.objects.create(
        chat=chat,
        status="running",
        attempt=1,
        lease_expires_at=timezone.now() + timedelta(seconds=60),
    )
    Chat.objects.filter(pk=chat.pk).update(status="running", active_run=working)
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "hi"}, format="json")
    assert response.status_code == 202, response.content
    run = response.json()["run"]
    assert run["status"] == "queued" and run["prompt"] == response.json()["message"]["id"]
    assert run["url"].endswith(f"/runs/{run['id']}/")
    assert list(chat.runs.order_by("id").values_list("status", flat=True)) == [
        "running",
        "queued",
    ]


def test_an_inline_stream_while_the_run_waits_for_a_decision_answers_409(api, chat):
    from django_llmchat.models import Run

    Run.objects.create(chat=chat, status="awaiting_approval", attempt=1)
    Chat.objects.filter(pk=chat.pk).update(status="awaiting_approval")
    response = api.post(
        url("chat-messages", pk=chat.pk),
        {"content": "hi"},
        format="json",
        HTTP_ACCEPT="text/event-stream",
    )
    assert response.status_code == 409
    assert response["Content-Type"] == "application/json"
    assert "decision" in response.json()["detail"]
    assert not Message.objects.filter(chat=chat).exists()


def test_a_guardrail_block_answers_422(api, owner, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(user=owner, agent="tests.api.agents.Strict")
    response = api.post(
        url("chat-messages", pk=chat.pk), {"content": "tell me a secret"}, format="json"
    )
    assert response.status_code == 422, response.content
    assert response.json()["guardrail"]["guardrail_id"] == "no_secrets"
    assert not Message.objects.filter(chat=chat).exists()


def test_tool_calls_then_answer_via_the_api(
    api, chat, fake_llm, django_capture_on_commit_callbacks
):
    from django_llmchat.tools import tool

    @tool
    def api_weather(city: str) -> str:
        """Gets the weather"""
        return f"sunny in {city}"

    fake_llm.configure("openai", "gpt-4.1-mini", TASKS_EAGER_WITHOUT_BROKER="inline")
    chat.with_tools(api_weather)
    fake_llm.script(
        Reply(tool_calls=[ToolCall("api_weather", {"city": "Paris"}, call_id="call_w")]),
        Reply("Sunny."),
    )
    with django_capture_on_commit_callbacks(execute=True):
        api.post(url("chat-messages", pk=chat.pk), {"content": "Weather?"}, format="json")
    messages = api.get(url("chat-messages", pk=chat.pk)).json()["results"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    call = messages[1]["tool_calls"][0]
    assert call["id"] == "call_w" and call["result"]["content"] == "sunny in Paris"
    assert messages[3]["tokens"]["input_tokens"] == 10


def test_messages_page_of_another_users_or_an_unknown_chat_is_a_404(clients, chat):
    build_transcript(chat, 2, with_attachments=False)
    path = url("chat-messages", pk=chat.pk)
    assert len(clients.owner.get(path).json()["results"]) == 8
    for client, target in ((clients.other, path), (clients.owner, url("chat-messages", pk=0))):
        for query in ({}, {"cursor": "not-a-cursor"}, {"page_size": "0"}, {"from": "end"}):
            response = client.get(target, query)
            assert response.status_code == 404, (target, query)
            assert response.json()["detail"]
    # the owner's empty chat is an empty page, a bad cursor a 400
    empty = Chat.objects.create(user=chat.user, model_id="gpt-4.1-mini", provider="openai")
    response = clients.owner.get(url("chat-messages", pk=empty.pk))
    assert response.json() == {"next": None, "previous": None, "results": []}
    response = clients.owner.get(url("chat-messages", pk=empty.pk), {"cursor": "x"})
    assert response.status_code == 400 and "cursor" in response.json()
