"""``POST chats/{id}/fork/``, ``POST``/``DELETE chats/{id}/share/`` and the shared page
``shared/{token}/`` (no login: HTML, or JSON when asked); answers checked against the
published schema."""

from __future__ import annotations

import json

import pytest

from django_llmchat.models import Chat, ChatShare, ToolCall

from .conftest import url
from .test_responses_match_schema import check

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(api):
    return json.loads(api.get(url("schema") + "?format=json").content)


@pytest.fixture
def talk(chat):
    chat.add_message("user", "Weather in **Oslo**? <script>alert(1)</script>")
    step = chat.add_message("assistant", "", finish_reason="tool_calls", thinking_text="Hmm.")
    call = ToolCall.objects.create(
        message=step, call_id="c1", name="weather", arguments={"city": "Oslo"}
    )
    chat.add_message("tool", "cold", parent_tool_call=call)
    chat.add_message("assistant", "It is *cold*.", thinking_text="Cold it is.")
    return chat


def fork(client, chat, body):
    return client.post(url("chat-fork", pk=chat.pk), body, format="json")


def share(client, chat, body=None):
    return client.post(url("chat-share", pk=chat.pk), body or {}, format="json")


# -- fork ---------------------------------------------------------------------------------
def test_a_fork_answers_the_new_chat(api, talk, schema):
    leaf = talk.active_leaf
    response = fork(api, talk, {"message": leaf.pk})
    assert response.status_code == 201, response.content
    body = response.json()
    check(schema, "Chat", body)
    assert body["id"] != talk.pk and body["title"] == "Trip"
    assert (body["forked_from"], body["forked_from_message"]) == (talk.pk, leaf.pk)
    assert body["message_count"] == 4 and body["total_cost"] is None
    assert Chat.objects.get(pk=body["id"]).user == talk.user
    listed = api.get(url("chat-messages", pk=body["id"])).json()["results"]
    assert [m["content"] for m in listed][-1] == "It is *cold*."
    # the source shows no fork fields of its own
    assert api.get(url("chat-detail", pk=talk.pk)).json()["forked_from"] is None


def test_a_fork_at_an_unanswered_step_ends_before_it(api, talk):
    step = talk.messages.get(role="assistant", finish_reason="tool_calls")
    body = fork(api, talk, {"message": step.pk}).json()
    prompt = talk.messages.get(role="user")
    assert body["forked_from_message"] == prompt.pk and body["message_count"] == 1


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "message"),
        ({"message": "x"}, "message"),
        ({"message": 0}, "message"),
        ({"message": 10**12}, "message"),
        ({"message": 1, "extra": 1}, "extra"),
    ],
)
def test_a_bad_fork_request_is_a_400_naming_the_field(api, talk, body, field):
    response = fork(api, talk, body)
    assert response.status_code == 400 and field in response.json(), response.content


def test_a_message_of_another_chat_is_a_400_naming_message(api, talk, owner):
    other = Chat.objects.create(user=owner)
    message = other.add_message("user", "elsewhere")
    response = fork(api, talk, {"message": message.pk})
    assert response.status_code == 400
    assert "no message of a branch" in response.json()["message"][0]
    system = talk.with_instructions("Be brief.").messages.get(role="system")
    assert fork(api, talk, {"message": system.pk}).status_code == 400
    assert Chat.objects.filter(forked_from=talk).count() == 0


def test_another_users_chat_is_a_404(clients, talk):
    leaf = talk.active_leaf
    assert fork(clients.other, talk, {"message": leaf.pk}).status_code == 404
    assert share(clients.other, talk).status_code == 404
    assert clients.other.delete(url("chat-share", pk=talk.pk)).status_code == 404
    assert fork(clients.anon, talk, {"message": leaf.pk}).status_code in (401, 403)
    assert share(clients.anon, talk).status_code in (401, 403)
    assert not ChatShare.objects.exists() and Chat.objects.count() == 1


# -- share --------------------------------------------------------------------------------
def test_a_share_link_is_read_without_login(api, clients, talk, schema):
    response = share(api, talk)
    assert response.status_code == 201, response.content
    check(schema, "ShareCreated", response.json())
    link = response.json()["url"]
    assert link.startswith("http://testserver/") and "/shared/" in link
    page = clients.anon.get(link)
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    html = page.content.decode()
    assert "<strong>Oslo</strong>" in html and "<em>cold</em>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "Cold it is" not in html and "Oslo&quot;" not in html  # no reasoning, no arguments
    assert "Tool: weather" in html
    assert page["Referrer-Policy"] == "no-referrer" and "noindex" in page["X-Robots-Tag"]
    assert "default-src 'none'" in page["Content-Security-Policy"]
    assert "no-store" in page["Cache-Control"]
    for asked in (
        clients.anon.get(link, HTTP_ACCEPT="application/json"),
        clients.anon.get(link + "?format=json"),
    ):
        assert asked.status_code == 200 and asked["Content-Type"] == "application/json"
        data = asked.json()
        check(schema, "SharedSnapshot", data)
        assert [m["role"] for m in data["messages"]] == ["user", "assistant", "assistant"]


def test_include_shows_reasoning_and_tools(api, clients, talk):
    link = share(api, talk, {"include": ["thinking", "tools"]}).json()["url"]
    html = clients.anon.get(link).content.decode()
    assert "Cold it is." in html and "&quot;city&quot;: &quot;Oslo&quot;" in html
    data = clients.anon.get(link + "?format=json").json()
    assert data["include"] == ["thinking", "tools"]
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"include": ["all"]}, "include"),
        ({"include": "tools"}, "include"),
        ({"include": ["tools", "thinking", "tools"]}, "include"),
        ({"other": 1}, "other"),
    ],
)
def test_a_bad_share_request_is_a_400_naming_the_field(api, talk, body, field):
    response = share(api, talk, body)
    assert response.status_code == 400 and field in response.json(), response.content
    assert not ChatShare.objects.exists()


def test_revoking_makes_the_links_404(api, clients, talk):
    first = share(api, talk).json()["url"]
    second = share(api, talk).json()["url"]
    assert first != second
    assert clients.anon.get(first).status_code == 200
    assert api.delete(url("chat-share", pk=talk.pk)).status_code == 204
    for link in (first, second):
        gone = clients.anon.get(link)
        assert gone.status_code == 404 and "Link not found" in gone.content.decode()
        assert clients.anon.get(link + "?format=json").json()["detail"]
    assert api.delete(url("chat-share", pk=talk.pk)).status_code == 204  # nothing left: fine


def test_an_unknown_token_is_a_404_and_a_bad_format_a_400(clients):
    assert clients.anon.get(url("shared", token="nope")).status_code == 404
    response = clients.anon.get(url("shared", token="nope") + "?format=xml")
    assert response.status_code == 400 and "format" in response.json()  # JSON, as documented
    page = clients.anon.get(url("shared", token="nope"), HTTP_ACCEPT="text/html")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")


def test_deleting_the_chat_ends_its_links(api, clients, talk):
    link = share(api, talk).json()["url"]
    assert api.delete(url("chat-detail", pk=talk.pk)).status_code == 204
    assert clients.anon.get(link).status_code == 404
    assert not ChatShare.objects.exists()


def test_the_routes_are_in_the_schema(schema):
    paths = schema["paths"]
    assert "post" in paths["/api/chats/{id}/fork/"]
    assert {"post", "delete"} <= set(paths["/api/chats/{id}/share/"])
    shared = paths["/api/shared/{token}/"]["get"]
    assert "security" not in schema and not shared.get("security")  # no login
    assert paths["/api/chats/{id}/share/"]["post"]["security"]  # a login
    assert {"application/json", "text/html"} <= set(shared["responses"]["200"]["content"])
