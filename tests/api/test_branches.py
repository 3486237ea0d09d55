"""The tree over REST: ``parent``, ``siblings`` and ``on_path`` on each message, a new
branch posted with ``parent``, ``chats/{id}/switch/``, ``GET messages/?path=all``; the
answers checked against the published schema and the provider's recorded requests."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat.models import Chat, Message, Run, ToolCall
from django_llmchat.testing import Reply

from .conftest import sse_frames, url
from .test_responses_match_schema import check

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def schema(api):
    return json.loads(api.get(url("schema") + "?format=json").content)


@pytest.fixture
def talk(chat, fake_llm):
    """The chat after two rounds through the API (replies answered in this process)."""
    fake_llm.configure(
        "openai_compatible", "gpt-4.1-mini", TASKS_EAGER_WITHOUT_BROKER="inline", MAX_RETRIES=0
    )
    Chat.objects.filter(pk=chat.pk).update(provider="openai_compatible")
    chat.refresh_from_db()
    fake_llm.script(Reply("Paris."), Reply("Berlin."))
    return chat


def post(api, chat, headers=None, **body):
    return api.post(url("chat-messages", pk=chat.pk), body, format="json", **(headers or {}))


def listed(api, chat, **params):
    return api.get(url("chat-messages", pk=chat.pk), params).json()["results"]


def sent(fake_llm):
    return [(m["role"], m["content"]) for m in fake_llm.last_request.body["messages"]]


def ask_twice(api, chat):
    assert post(api, chat, content="Capital of France?").status_code == 202
    assert post(api, chat, content="And Germany?").status_code == 202
    return listed(api, chat)


def test_each_message_carries_its_parent_siblings_and_place(api, talk, schema):
    q1, a1, q2, a2 = ask_twice(api, talk)
    assert [m["parent"] for m in (q1, a1, q2, a2)] == [None, q1["id"], a1["id"], q2["id"]]
    assert all(m["siblings"] == [m["id"]] and m["on_path"] for m in (q1, a1, q2, a2))
    check(schema, "PaginatedMessageList", api.get(url("chat-messages", pk=talk.pk)).json())


def test_a_branch_posted_with_parent_sends_only_the_edited_path(api, talk, fake_llm, schema):
    q1, a1, q2, a2 = ask_twice(api, talk)
    fake_llm.script(Reply("Rome."))
    accepted = post(api, talk, content="And Italy?", parent=a1["id"])
    assert accepted.status_code == 202, accepted.content
    check(schema, "MessageAccepted", accepted.json())
    prompt = accepted.json()["message"]
    assert prompt["parent"] == a1["id"] and prompt["siblings"] == [q2["id"], prompt["id"]]
    assert sent(fake_llm) == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "And Italy?"),
    ]
    path = listed(api, talk)
    assert [m["content"] for m in path] == ["Capital of France?", "Paris.", "And Italy?", "Rome."]
    everything = listed(api, talk, path="all")
    assert [m["content"] for m in everything] == [
        "Capital of France?",
        "Paris.",
        "And Germany?",
        "Berlin.",
        "And Italy?",
        "Rome.",
    ]
    assert [m["on_path"] for m in everything] == [True, True, False, False, True, True]
    usage = api.get(url("chat-usage", pk=talk.pk)).json()
    check(schema, "Usage", usage)
    assert usage["attempts"] == {"succeeded": 3}  # every branch paid
    assert usage["path"]["tokens"]["total_tokens"] < usage["tokens"]["total_tokens"]
    check(
        schema,
        "PaginatedMessageList",
        api.get(url("chat-messages", pk=talk.pk), {"path": "all"}).json(),
    )


def test_a_branch_from_the_start_with_a_null_parent(api, talk, fake_llm):
    ask_twice(api, talk)
    fake_llm.script(Reply("Rome."))
    accepted = post(api, talk, content="Capital of Italy?", parent=None)
    assert accepted.status_code == 202
    assert sent(fake_llm) == [("user", "Capital of Italy?")]
    first = listed(api, talk)[0]
    assert first["content"] == "Capital of Italy?" and len(first["siblings"]) == 2


def test_a_branch_streamed_inline(api, talk, fake_llm):
    _, a1, _, _ = ask_twice(api, talk)
    fake_llm.script(Reply("Rome."))
    response = post(
        api, talk, {"HTTP_ACCEPT": "text/event-stream"}, content="And Italy?", parent=a1["id"]
    )
    assert response.status_code == 200
    frames = sse_frames(b"".join(response.streaming_content).decode())
    assert frames[-1]["event"] == "run_finished"
    assert sent(fake_llm)[-1] == ("user", "And Italy?") and len(sent(fake_llm)) == 3


def test_switch_restores_the_other_branch(api, talk, fake_llm, schema):
    _, a1, q2, a2 = ask_twice(api, talk)
    fake_llm.script(Reply("Rome."), Reply("Munich."))
    post(api, talk, content="And Italy?", parent=a1["id"])
    switched = api.post(url("chat-switch", pk=talk.pk), {"message": q2["id"]}, format="json")
    assert switched.status_code == 200, switched.content
    check(schema, "Message", switched.json())
    assert switched.json()["id"] == a2["id"] and switched.json()["on_path"]
    assert [m["content"] for m in listed(api, talk)][-2:] == ["And Germany?", "Berlin."]
    post(api, talk, content="Its second city?")
    assert sent(fake_llm) == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "And Germany?"),
        ("assistant", "Berlin."),
        ("user", "Its second city?"),
    ]


def test_a_branch_posted_after_a_reply_off_the_path_takes_its_branch_back(api, talk, fake_llm):
    """ask A, ask B; a branch C after A's reply; back to B's reply; then a prompt after
    C's reply: the path is A a C c D d, and the provider receives A a C c D."""
    from django_llmchat.testing.invariants import assert_one_path

    _, a1, q2, a2 = ask_twice(api, talk)
    fake_llm.script(Reply("Rome."), Reply("Milan."))
    post(api, talk, content="And Italy?", parent=a1["id"])
    italy = listed(api, talk)[-1]
    switched = api.post(url("chat-switch", pk=talk.pk), {"message": a2["id"]}, format="json")
    assert switched.status_code == 200
    accepted = post(api, talk, content="Its second city?", parent=italy["id"])
    assert accepted.status_code == 202, accepted.content
    assert accepted.json()["message"]["parent"] == italy["id"]
    expected = ["Capital of France?", "Paris.", "And Italy?", "Rome.", "Its second city?"]
    assert [text for _, text in sent(fake_llm)] == expected
    assert [m["content"] for m in listed(api, talk)] == [*expected, "Milan."]
    assert not any(m["on_path"] for m in listed(api, talk, path="all") if m["id"] == q2["id"])
    assert_one_path(talk)


@pytest.mark.parametrize(
    "body, reason",
    [
        ({"message": "x"}, "valid integer"),
        ({"message": 0}, "greater than or equal"),
        ({}, "required"),
        ({"message": 1, "extra": 1}, None),
    ],
)
def test_switch_bad_bodies_are_400s_naming_the_field(api, chat, body, reason):
    response = api.post(url("chat-switch", pk=chat.pk), body, format="json")
    assert response.status_code == 400
    field = "extra" if "extra" in body else "message"
    assert field in response.json()
    if reason:
        assert reason in response.json()[field][0]


def test_parents_a_prompt_cannot_follow_are_400s_and_switch_targets_404s(api, talk, owner):
    q1, a1, _, _ = ask_twice(api, talk)
    elsewhere = Chat.objects.create(user=owner, provider="openai", model_id="m")
    stranger = elsewhere.add_message(role="user", content="hi")
    system = talk.add_message(role="system", content="Be brief.")
    tool = Message.objects.create(chat=talk, role="tool", content="42")
    calling = Message.objects.create(chat=talk, role="assistant", content="")
    ToolCall.objects.create(chat=talk, message=calling, call_id="c1", name="f", arguments={})
    runs_before = talk.runs.count()
    for parent, reason in [
        (stranger.pk, "not a message of chat"),
        (999_999, "not a message of chat"),
        (system.pk, "system message"),
        (tool.pk, "tool result"),
        (calling.pk, "made tool calls"),
        ("x", "valid integer"),
        (True, "valid integer"),
    ]:
        refused = post(api, talk, content="Edited", parent=parent)
        assert refused.status_code == 400, (parent, refused.content)
        assert reason in refused.json()["parent"][0]
    for target in (stranger.pk, system.pk, 999_999):
        # a message the chat's tree lacks is not found, as an unknown chat is
        refused = api.post(url("chat-switch", pk=talk.pk), {"message": target}, format="json")
        assert refused.status_code == 404, refused.content
        assert refused.json()["code"] == "not_found"
        assert f"message {target} is not a message of chat {talk.pk}" in refused.json()["detail"]
    assert talk.runs.count() == runs_before
    assert [m["id"] for m in listed(api, talk)][:2] == [q1["id"], a1["id"]]


def test_a_branch_or_switch_while_a_run_is_in_progress_is_a_409(api, talk):
    _, a1, q2, _ = ask_twice(api, talk)
    Run.objects.create(chat=talk, status=Run.QUEUED)
    before = sorted(Message.objects.filter(chat=talk).values_list("pk", "on_path"))
    refused = post(api, talk, content="Edited", parent=a1["id"])
    assert refused.status_code == 409 and "in progress" in refused.json()["detail"]
    refused = api.post(url("chat-switch", pk=talk.pk), {"message": q2["id"]}, format="json")
    assert refused.status_code == 409 and "in progress" in refused.json()["detail"]
    assert sorted(Message.objects.filter(chat=talk).values_list("pk", "on_path")) == before


def test_other_users_chats_are_404s(clients, talk, api):
    _, a1, _, _ = ask_twice(api, talk)
    other = clients.other
    assert (
        other.post(url("chat-switch", pk=talk.pk), {"message": a1["id"]}, format="json").status_code
        == 404
    )
    assert post(other, talk, content="x", parent=a1["id"]).status_code == 404


def test_the_path_parameter_is_checked(api, chat):
    refused = api.get(url("chat-messages", pk=chat.pk), {"path": "some"})
    assert refused.status_code == 400 and "path" in refused.json()


def test_a_page_of_a_branched_chat_costs_the_same_queries(api, talk, fake_llm):
    ask_twice(api, talk)

    def page_queries(**params):
        api.get(url("chat-messages", pk=talk.pk), params)
        with CaptureQueriesContext(connection) as ctx:
            assert api.get(url("chat-messages", pk=talk.pk), params).status_code == 200
        return len(ctx)

    before = (page_queries(), page_queries(path="all"))
    first = Message.objects.filter(chat=talk, role="assistant").order_by("id").first()
    for text in ("Rome.", "Madrid.", "Lisbon."):
        fake_llm.script(Reply(text))
        post(api, talk, content=f"And {text}", parent=first.pk)
    assert (page_queries(), page_queries(path="all")) == before


def test_an_idempotent_retry_of_a_branch_replays_and_another_parent_is_refused(api, talk, fake_llm):
    _, a1, q2, _ = ask_twice(api, talk)
    fake_llm.script(Reply("Rome."))
    key = {"HTTP_IDEMPOTENCY_KEY": "edit-1"}
    first = post(api, talk, key, content="And Italy?", parent=a1["id"])
    again = post(api, talk, key, content="And Italy?", parent=a1["id"])
    assert first.status_code == again.status_code == 202
    assert again.json()["message"]["id"] == first.json()["message"]["id"]
    other = post(api, talk, key, content="And Italy?", parent=q2["id"])
    assert other.status_code == 422
    assert Message.objects.filter(chat=talk, content="And Italy?").count() == 1


@pytest.mark.parametrize("null", ["null", ""])
def test_a_multipart_parent_null_starts_before_the_first_message(api, talk, fake_llm, null):
    """A form field is text: ``null`` (as JSON writes it) or an empty value is null."""
    q1, *_ = ask_twice(api, talk)
    fake_llm.script(Reply("Madrid."))
    body = {"content": "Capital of Spain?", "parent": null}
    accepted = api.post(url("chat-messages", pk=talk.pk), body, format="multipart")
    assert accepted.status_code == 202, accepted.content
    prompt = accepted.json()["message"]
    assert prompt["parent"] is None and prompt["siblings"] == [q1["id"], prompt["id"]]
    assert sent(fake_llm) == [("user", "Capital of Spain?")]
    refused = api.post(
        url("chat-messages", pk=talk.pk), {"content": "x", "parent": "none"}, format="multipart"
    )
    assert refused.status_code == 400 and "parent" in refused.json()
