"""chats/: archived, pinned and tags — written by PATCH, filtered by ?archived= ?pinned=
?tag= (with ?search= too), pinned first through every page of the cursor."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_llmchat.models import Chat, ChatTag

from .conftest import url

pytestmark = pytest.mark.django_db


def _chat(owner, title, *, age=0, **fields):
    chat = Chat.objects.create(user=owner, title=title, model_id="gpt-4.1-mini", provider="openai")
    # distinct, known times: the list's order is by them
    Chat.objects.filter(pk=chat.pk).update(
        updated_at=timezone.now() - timedelta(minutes=age), **fields
    )
    return chat


def test_patch_writes_archived_pinned_and_tags_without_touching_updated_at(api, chat):
    before = Chat.objects.get(pk=chat.pk).updated_at
    response = api.patch(
        url("chat-detail", pk=chat.pk),
        {"archived": True, "pinned": True, "tags": ["work", "Trip 2026", "work"]},
        format="json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["archived"] is True and body["pinned"] is True
    assert body["tags"] == ["Trip 2026", "work"]  # sorted, the repeat dropped
    chat.refresh_from_db()
    assert chat.archived and chat.pinned and chat.tags == ["Trip 2026", "work"]
    assert chat.updated_at == before  # sorting a chat is no activity

    # a PATCH replaces the tags; [] clears them; the other fields stay
    body = api.patch(url("chat-detail", pk=chat.pk), {"tags": ["home"]}, format="json").json()
    assert body["tags"] == ["home"] and body["pinned"] is True
    assert (
        api.patch(url("chat-detail", pk=chat.pk), {"tags": []}, format="json").json()["tags"] == []
    )
    assert not ChatTag.objects.filter(chat=chat).exists()

    # a change of the chat itself is activity
    api.patch(url("chat-detail", pk=chat.pk), {"title": "Trip!", "pinned": False}, format="json")
    assert Chat.objects.get(pk=chat.pk).updated_at > before


def test_create_with_tags_and_read_them_back(api):
    response = api.post(
        url("chat-list"), {"title": "t", "tags": ["a", "b"], "pinned": True}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["tags"] == ["a", "b"] and response.json()["pinned"] is True
    got = api.get(url("chat-detail", pk=response.json()["id"])).json()
    assert got["tags"] == ["a", "b"] and got["archived"] is False


@pytest.mark.parametrize(
    "body, field",
    [
        ({"archived": "yes"}, "archived"),
        ({"archived": 1}, "archived"),
        ({"pinned": None}, "pinned"),
        ({"tags": "work"}, "tags"),
        ({"tags": ["x" * 65]}, "tags"),
        ({"tags": [""]}, "tags"),
        ({"tags": [" work"]}, "tags"),
        ({"tags": ["a,b"]}, "tags"),
        ({"tags": ["tab\there"]}, "tags"),
        ({"tags": [3]}, "tags"),
        ({"tags": [f"t{i}" for i in range(21)]}, "tags"),
    ],
)
def test_bad_values_are_a_400_naming_the_field(api, chat, body, field):
    response = api.patch(url("chat-detail", pk=chat.pk), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    chat.refresh_from_db()
    assert not chat.archived and not chat.pinned and chat.tags == []


def test_a_tag_of_64_characters_and_20_tags_are_taken(api, chat):
    tags = ["x" * 64] + [f"t{i:02}" for i in range(19)]
    response = api.patch(url("chat-detail", pk=chat.pk), {"tags": tags}, format="json")
    assert response.status_code == 200, response.content
    assert len(response.json()["tags"]) == 20


def test_pinned_come_first_and_the_cursor_walks_every_chat_once(api, owner):
    # pinned chats older and newer than unpinned ones, same timestamps across the groups
    now = timezone.now()
    expected_pinned, expected_plain = [], []
    for i in range(7):
        pinned = i % 3 == 0
        chat = Chat.objects.create(user=owner, title=f"c{i}")
        stamp = now - timedelta(minutes=i // 2)  # pairs share a timestamp
        Chat.objects.filter(pk=chat.pk).update(updated_at=stamp, pinned=pinned)
        (expected_pinned if pinned else expected_plain).append((stamp, chat.pk, chat.title))
    key = lambda row: (row[0], row[1])  # noqa: E731
    expected = [t for _, _, t in sorted(expected_pinned, key=key, reverse=True)] + [
        t for _, _, t in sorted(expected_plain, key=key, reverse=True)
    ]

    pages, link = [], url("chat-list") + "?page_size=2"
    while link:
        page = api.get(link).json()
        pages.append([c["title"] for c in page["results"]])
        link = page["next"]
    assert [t for page in pages for t in page] == expected
    assert all(len(p) == 2 for p in pages[:-1])

    # and backwards from the last page, every chat again
    last = api.get(url("chat-list") + "?page_size=2&from=end").json()
    back, link = [[c["title"] for c in last["results"]]], last["previous"]
    while link:
        page = api.get(link).json()
        back.insert(0, [c["title"] for c in page["results"]])
        link = page["previous"]
    assert [t for page in back for t in page] == expected

    # a cursor among the pinned says so
    first = api.get(url("chat-list") + "?page_size=2").json()
    assert "cursor=p" in first["next"]


@pytest.mark.parametrize("cursor", ["pb1.1", "pp1.1", "p.1", "bp", "p1"])
def test_malformed_pinned_cursors_are_a_400(api, chat, cursor):
    response = api.get(url("chat-list"), {"cursor": cursor})
    assert response.status_code == 400 and "cursor" in response.json()


def test_the_list_still_costs_two_queries_with_tags(api, owner):
    def count(n):
        Chat.objects.filter(user=owner).delete()
        for i in range(n):
            _chat(owner, f"c{i}", pinned=i % 2 == 0).set_tags(["a", f"t{i}"])
        with CaptureQueriesContext(connection) as ctx:
            response = api.get(url("chat-list"), {"tag": "a"})
        assert response.status_code == 200
        assert all(c["tags"][0] == "a" for c in response.json()["results"])
        return len(ctx)

    assert count(3) == count(30) == 2


def test_the_schema_states_the_filters(api):
    schema = api.get("/api/schema/?format=json").json()
    params = {p["name"]: p for p in schema["paths"]["/api/chats/"]["get"]["parameters"]}
    assert params["archived"]["schema"]["enum"] == ["true", "false", "all"]
    assert params["pinned"]["schema"]["enum"] == ["true", "false"]
    assert params["tag"]["schema"]["type"] == "array" and params["tag"]["explode"] is True
    chat = schema["components"]["schemas"]["Chat"]["properties"]
    assert chat["archived"]["type"] == "boolean"
    assert chat["tags"]["items"]["maxLength"] == 64 and chat["tags"]["maxItems"] == 20
