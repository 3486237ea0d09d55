"""``chats/{id}/messages/{message_id}/feedback/``: GET, POST (give or change), DELETE."""

from __future__ import annotations

import pytest

from django_llmchat.models import Feedback

from .conftest import url

pytestmark = pytest.mark.django_db


@pytest.fixture
def reply(chat):
    chat.add_message(role="user", content="Capital of France?")
    return chat.add_message(role="assistant", content="Paris.")


def feedback_url(reply):
    return url("message-feedback", pk=reply.chat_id, message_id=reply.pk)


def test_give_change_read_and_withdraw(api, reply, owner):
    target = feedback_url(reply)
    assert api.get(target).status_code == 404
    created = api.post(target, {"rating": -1, "comment": "It is Paris, but terse."}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["message"] == reply.pk and body["rating"] == -1 and body["user"] == owner.pk
    assert body["comment"] == "It is Paris, but terse."
    assert {"created_at", "updated_at"} <= set(body)
    changed = api.post(target, {"rating": 1}, format="json")
    assert changed.status_code == 200 and changed.json()["comment"] == ""
    assert api.get(target).json()["rating"] == 1
    assert Feedback.objects.get().rating == 1
    assert api.delete(target).status_code == 204
    assert api.delete(target).status_code == 404
    assert not Feedback.objects.exists()


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "rating"),
        ({"rating": 0}, "rating"),
        ({"rating": "1"}, "rating"),
        ({"rating": True}, "rating"),
        ({"rating": 1.5}, "rating"),
        ({"rating": None}, "rating"),
        ({"rating": 1, "comment": 5}, "comment"),
        ({"rating": 1, "comment": "x" * 2001}, "comment"),
        ({"rating": 1, "comment": "a\x00b"}, "comment"),
        ({"rating": 1, "stars": 5}, "stars"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api, reply, body, field):
    response = api.post(feedback_url(reply), body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not Feedback.objects.exists()


def test_only_replies_of_your_own_chats(api, clients, reply, chat):
    prompt = chat.messages.get(role="user")
    refused = api.post(
        url("message-feedback", pk=chat.pk, message_id=prompt.pk), {"rating": 1}, format="json"
    )
    assert refused.status_code == 400 and "message" in refused.json()
    # another user's chat, a message of another chat, no such message: 404
    assert clients.other.post(feedback_url(reply), {"rating": 1}, format="json").status_code == 404
    assert clients.other.get(feedback_url(reply)).status_code == 404
    assert clients.other.delete(feedback_url(reply)).status_code == 404
    from django_llmchat.models import Chat

    elsewhere = Chat.objects.create(user=chat.user, provider="openai", model_id="m")
    stray = url("message-feedback", pk=elsewhere.pk, message_id=reply.pk)
    assert api.post(stray, {"rating": 1}, format="json").status_code == 404
    missing = url("message-feedback", pk=chat.pk, message_id=reply.pk + 1000)
    assert api.get(missing).status_code == 404
    assert clients.anon.post(feedback_url(reply), {"rating": 1}, format="json").status_code in (
        401,
        403,
    )
    assert not Feedback.objects.exists()


def test_each_user_their_own(clients, reply, settings):
    settings.LLMCHAT = {"STAFF_SEES_ALL_CHATS": True}
    clients.owner.post(feedback_url(reply), {"rating": 1}, format="json")
    staff = clients.staff.post(feedback_url(reply), {"rating": -1, "comment": "no"}, format="json")
    assert staff.status_code == 201
    assert clients.owner.get(feedback_url(reply)).json()["rating"] == 1
    assert clients.staff.get(feedback_url(reply)).json()["rating"] == -1
    assert Feedback.objects.count() == 2


def test_documented_in_the_schema(api):
    schema = api.get(url("schema"), HTTP_ACCEPT="application/json").json()
    path = schema["paths"]["/api/chats/{id}/messages/{message_id}/feedback/"]
    assert set(path) >= {"get", "post", "delete"}
    body = path["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    request = schema["components"]["schemas"][body.rsplit("/", 1)[-1]]
    rating = request["properties"]["rating"]
    ref = rating["allOf"][0]["$ref"].rsplit("/", 1)[-1] if "allOf" in rating else None
    resolved = {**rating, **(schema["components"]["schemas"][ref] if ref else {})}
    assert (resolved["type"], resolved["enum"]) == ("integer", [1, -1])
    assert request["properties"]["comment"]["maxLength"] == 2000
    assert request["required"] == ["rating"]
    assert {"200", "201", "400", "404"} <= set(path["post"]["responses"])


def test_the_answer_matches_the_schema(api, reply):
    from .test_responses_match_schema import check

    schema = api.get(url("schema") + "?format=json").json()
    body = api.post(feedback_url(reply), {"rating": 1, "comment": "ok"}, format="json").json()
    check(schema, "Feedback", body)
    check(schema, "Feedback", api.get(feedback_url(reply)).json())
