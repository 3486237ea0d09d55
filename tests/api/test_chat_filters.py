"""The chat list's filters (``api/chat_filters.py``): archived, pinned, tag, search; a bad
filter is a 400 naming the parameter."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_llmchat.models import Chat

from .conftest import url

pytestmark = pytest.mark.django_db


def _chat(owner, title, *, age=0, **fields):
    chat = Chat.objects.create(user=owner, title=title, model_id="gpt-4.1-mini", provider="openai")
    # distinct, known times: the list's order is by them
    Chat.objects.filter(pk=chat.pk).update(
        updated_at=timezone.now() - timedelta(minutes=age), **fields
    )
    return chat


def _titles(response):
    assert response.status_code == 200, response.content
    return [c["title"] for c in response.json()["results"]]


def test_archived_are_hidden_unless_asked_for(api, owner):
    _chat(owner, "kept", age=1)
    _chat(owner, "put away", age=0, archived=True)
    assert _titles(api.get(url("chat-list"))) == ["kept"]
    assert _titles(api.get(url("chat-list"), {"archived": "false"})) == ["kept"]
    assert _titles(api.get(url("chat-list"), {"archived": "true"})) == ["put away"]
    assert _titles(api.get(url("chat-list"), {"archived": "all"})) == ["put away", "kept"]
    # an archived chat is still read and written by its id
    archived = Chat.objects.get(title="put away")
    assert api.get(url("chat-detail", pk=archived.pk)).status_code == 200
    response = api.patch(url("chat-detail", pk=archived.pk), {"archived": False}, format="json")
    assert response.status_code == 200
    assert _titles(api.get(url("chat-list"))) == ["put away", "kept"]


def test_pinned_filter_and_tag_filter_combine(api, owner, users):
    a = _chat(owner, "a", age=3, pinned=True).set_tags(["work", "urgent"])
    _chat(owner, "b", age=2).set_tags(["work"])
    _chat(owner, "c", age=1, archived=True).set_tags(["work", "urgent"])
    _chat(owner, "d", age=0)
    other = _chat(users["other"], "theirs").set_tags(["work"])
    assert other.tags == ["work"]
    get = lambda **q: _titles(api.get(url("chat-list"), q))  # noqa: E731
    assert get(pinned="true") == ["a"]
    assert get(pinned="false") == ["d", "b"]
    assert get(tag="work") == ["a", "b"]
    assert _titles(api.get(url("chat-list") + "?tag=work&tag=urgent")) == ["a"]
    assert _titles(api.get(url("chat-list") + "?tag=work&tag=urgent&archived=all")) == ["a", "c"]
    assert get(tag="work", pinned="false") == ["b"]
    assert get(tag="Work") == []  # exact names
    assert get(tag="nothing") == []
    assert a.tags == ["urgent", "work"]


@pytest.mark.parametrize(
    "query, field",
    [
        ("archived=maybe", "archived"),
        ("archived=", "archived"),
        ("archived=True", "archived"),
        ("pinned=all", "pinned"),
        ("pinned=1", "pinned"),
        ("tag=", "tag"),
        ("tag=a,b", "tag"),
        ("tag=%20a", "tag"),
        ("tag=" + "x" * 65, "tag"),
        ("&".join(f"tag=t{i}" for i in range(21)), "tag"),
        ("search=trip&archived=nope", "archived"),
        ("search=trip&tag=", "tag"),
    ],
)
def test_bad_filters_are_a_400_naming_the_parameter(api, chat, query, field):
    response = api.get(url("chat-list") + "?" + query)
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()


def test_search_takes_the_filters(api, owner):
    for title, fields in [
        ("paris trip", {}),
        ("paris food", {"archived": True}),
        ("paris work", {"pinned": True}),
    ]:
        _chat(owner, title, **fields)
    Chat.objects.get(title="paris food").set_tags(["food"])
    found = lambda q: sorted(_titles(api.get(url("chat-list"), q)))  # noqa: E731
    assert found({"search": "paris"}) == ["paris trip", "paris work"]
    assert found({"search": "paris", "archived": "true"}) == ["paris food"]
    assert found({"search": "paris", "archived": "all"}) == [
        "paris food",
        "paris trip",
        "paris work",
    ]
    assert found({"search": "paris", "pinned": "true"}) == ["paris work"]
    assert found({"search": "paris", "tag": "food", "archived": "all"}) == ["paris food"]
