"""chats/ and chats/{id}/: the access matrix, create, read, update, delete."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat.models import Chat, Message
from tests.factories import build_transcript

from .conftest import url

pytestmark = pytest.mark.django_db


def test_anonymous_is_refused_everywhere(clients, chat):
    anon = clients.anon
    for method, path in [
        ("get", url("chat-list")),
        ("post", url("chat-list")),
        ("get", url("chat-detail", pk=chat.pk)),
        ("patch", url("chat-detail", pk=chat.pk)),
        ("delete", url("chat-detail", pk=chat.pk)),
        ("get", url("chat-messages", pk=chat.pk)),
        ("post", url("chat-messages", pk=chat.pk)),
        ("get", url("chat-events", pk=chat.pk)),
        ("post", url("chat-cancel", pk=chat.pk)),
        ("get", url("chat-usage", pk=chat.pk)),
        ("post", url("tool-call-approve", pk=chat.pk, call_id="c1")),
        ("post", url("tool-call-deny", pk=chat.pk, call_id="c1")),
        ("get", url("model-list")),
    ]:
        response = getattr(anon, method)(path)
        assert response.status_code in (401, 403), (method, path)
    # token auth comes first: a challenge, so the client knows how to authenticate
    assert anon.get(url("chat-list")).status_code == 401
    assert anon.get(url("chat-list"))["WWW-Authenticate"] == "Token"


NESTED = [
    ("get", "chat-detail", {}),
    ("patch", "chat-detail", {}),
    ("put", "chat-detail", {}),
    ("delete", "chat-detail", {}),
    ("get", "chat-messages", {}),
    ("post", "chat-messages", {}),
    ("get", "chat-events", {}),
    ("post", "chat-cancel", {}),
    ("get", "chat-usage", {}),
    ("post", "tool-call-approve", {"call_id": "call_0"}),
    ("post", "tool-call-deny", {"call_id": "call_0"}),
]


@pytest.mark.parametrize("method, name, extra", NESTED)
def test_other_users_get_404_on_every_route(clients, chat, method, name, extra):
    build_transcript(chat, 1, with_attachments=False)
    path = url(name, pk=chat.pk, **extra)
    body = {"content": "hi"} if name == "chat-messages" else {}
    for who in ("other", "staff"):
        response = getattr(clients, who).generic(
            method.upper(),
            path,
            data=b"{}" if not body else b'{"content": "hi"}',
            content_type="application/json",
        )
        assert response.status_code == 404, (who, method, name, response.content)
    assert Chat.objects.filter(pk=chat.pk).exists()
    assert not Message.objects.filter(chat=chat, content="hi").exists()


def test_staff_sees_all_chats_only_with_the_setting(clients, chat, settings):
    assert clients.staff.get(url("chat-detail", pk=chat.pk)).status_code == 404
    assert clients.staff.get(url("chat-list")).json()["results"] == []
    settings.LLMCHAT = {"STAFF_SEES_ALL_CHATS": True}
    assert clients.staff.get(url("chat-detail", pk=chat.pk)).status_code == 200
    assert [c["id"] for c in clients.staff.get(url("chat-list")).json()["results"]] == [chat.pk]
    assert clients.staff.get(url("chat-messages", pk=chat.pk)).status_code == 200
    # the setting lifts the restriction for staff only
    assert clients.other.get(url("chat-detail", pk=chat.pk)).status_code == 404


def test_list_shows_only_own_chats_newest_first(clients, owner, users):
    a = Chat.objects.create(user=owner, title="a")
    b = Chat.objects.create(user=owner, title="b")
    Chat.objects.create(user=users["other"], title="not mine")
    Chat.objects.create(user=None, title="nobody's")
    response = clients.owner.get(url("chat-list"))
    assert response.status_code == 200
    body = response.json()
    assert [c["id"] for c in body["results"]] == [b.pk, a.pk]
    assert body["next"] is None and body["previous"] is None


def test_list_pages_with_a_cursor(api, owner):
    chats = [Chat.objects.create(user=owner, title=str(i)) for i in range(5)]
    first = api.get(url("chat-list"), {"page_size": 2}).json()
    assert [c["title"] for c in first["results"]] == ["4", "3"]
    second = api.get(first["next"]).json()
    assert [c["title"] for c in second["results"]] == ["2", "1"]
    third = api.get(second["next"]).json()
    assert [c["title"] for c in third["results"]] == ["0"] and third["next"] is None
    back = api.get(third["previous"]).json()
    assert [c["title"] for c in back["results"]] == ["2", "1"]
    assert len(chats) == 5


def test_chat_list_query_count_is_constant(api, owner):
    def count(n):
        Chat.objects.filter(user=owner).delete()
        for i in range(n):
            chat = Chat.objects.create(user=owner, title=f"c{i}", model_id="gpt-4.1-mini")
            build_transcript(chat, 2, with_attachments=False)
        with CaptureQueriesContext(connection) as ctx:
            response = api.get(url("chat-list"))
        assert response.status_code == 200
        assert len(response.json()["results"]) == min(n, 50)
        return len(ctx)

    assert count(3) == count(60) == 2  # token lookup, the page (totals as subqueries)


def test_create_read_update_delete(api, owner, settings):
    settings.LLMCHAT = {"PROVIDERS": {"anthropic": {"api_key": "k"}, "openai": {"api_key": "k"}}}
    response = api.post(
        url("chat-list"),
        {
            "title": "Trip",
            "model_id": "claude-haiku-4-5",
            "provider": "anthropic",
            "params": {"temperature": 0.2, "max_tokens": 300},
            "context": {"city": "Paris"},
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    data = response.json()
    chat = Chat.objects.get(pk=data["id"])
    assert chat.user == owner and chat.provider == "anthropic"
    assert chat.params == {"temperature": 0.2, "max_tokens": 300}
    assert data["status"] == "idle" and data["message_count"] == 0
    assert data["messages_url"].endswith(f"/api/chats/{chat.pk}/messages/")
    assert data["events_url"].endswith(f"/api/chats/{chat.pk}/events/")

    detail = api.get(url("chat-detail", pk=chat.pk)).json()
    assert detail["title"] == "Trip" and detail["context"] == {"city": "Paris"}

    patched = api.patch(
        url("chat-detail", pk=chat.pk),
        {"title": "Rome", "model_id": "gpt-4.1", "provider": "openai"},
        format="json",
    )
    assert patched.status_code == 200, patched.content
    chat.refresh_from_db()
    assert (chat.title, chat.model_id, chat.provider) == ("Rome", "gpt-4.1", "openai")

    assert api.delete(url("chat-detail", pk=chat.pk)).status_code == 204
    assert not Chat.objects.filter(pk=chat.pk).exists()


def test_defaults_on_create(api, settings):
    settings.LLMCHAT = {
        "DEFAULT_PROVIDER": "gemini",
        "DEFAULT_MODEL": "gemini-2.5-flash",
        "PROVIDERS": {"gemini": {"api_key": "k"}},
    }
    data = api.post(url("chat-list"), {}, format="json").json()
    assert (data["provider"], data["model_id"]) == ("gemini", "gemini-2.5-flash")


def test_update_does_not_overwrite_the_run_status(api, chat):
    # the loop writes status with UPDATE statements; an update of the title must not
    # write back the status it read
    loaded_status = Chat.objects.get(pk=chat.pk).status
    Chat.objects.filter(pk=chat.pk).update(status="running")
    response = api.patch(url("chat-detail", pk=chat.pk), {"title": "x"}, format="json")
    assert response.status_code == 200
    assert loaded_status == "idle"
    assert Chat.objects.get(pk=chat.pk).status == "running"


def test_tools_must_be_registered(api, chat):
    from django_llmchat.tools import tool

    @tool
    def api_test_lookup(q: str) -> str:
        """Looks things up"""
        return q

    ok = api.patch(url("chat-detail", pk=chat.pk), {"tools": ["api_test_lookup"]}, format="json")
    assert ok.status_code == 200, ok.content
    # a dotted path would import arbitrary code as a tool: not accepted from clients
    bad = api.patch(url("chat-detail", pk=chat.pk), {"tools": ["os.system"]}, format="json")
    assert bad.status_code == 400
    assert "unknown tools" in bad.json()["tools"][0]
    chat.refresh_from_db()
    assert chat.tools == ["api_test_lookup"]


@pytest.mark.parametrize("method, name, extra", NESTED)
def test_options_on_every_route(api, chat, method, name, extra):
    response = api.options(url(name, pk=chat.pk, **extra))
    assert response.status_code == 200
    assert method.upper() in response["Allow"]


def test_a_chat_with_a_run_in_progress_is_not_deleted(api, chat):
    """Deleting waits for the run: a 409 while one is queued, running or awaiting a
    decision (the chat's lock keeps a new run out while an idle chat is deleted)."""
    from django_llmchat.models import Run

    run = Run.objects.create(chat=chat, status=Run.AWAITING_APPROVAL)
    response = api.delete(url("chat-detail", pk=chat.pk))
    assert response.status_code == 409 and "in progress" in response.json()["detail"]
    assert chat.__class__.objects.filter(pk=chat.pk).exists()
    Run.objects.filter(pk=run.pk).update(status=Run.CANCELLED)
    assert api.delete(url("chat-detail", pk=chat.pk)).status_code == 204
