"""GET chats/?search=: the user's chats matching the words, ranked, with the match."""

import pytest
from cryptography.fernet import Fernet
from django.test import override_settings

from django_llmchat.models import Chat

from .conftest import url

pytestmark = pytest.mark.django_db


def chat_of(user, title, *texts):
    chat = Chat.objects.create(user=user, title=title)
    for text in texts:
        chat.add_message(role="user", content=text)
    return chat


def test_search_answers_the_users_matching_chats_with_the_match(clients, users):
    owner, other = users["owner"], users["other"]
    chat = chat_of(owner, "Cooking", "how long do I boil an egg", "soft-boiled eggs: six minutes")
    titled = chat_of(owner, "Egg recipes", "something")
    chat_of(owner, "Garden", "tomatoes")
    chat_of(other, "Egg secrets", "eggs of another user")

    response = clients.owner.get(url("chat-list"), {"search": "egg"})
    assert response.status_code == 200, response.json()
    results = response.json()["results"]
    assert [r["id"] for r in results] == [titled.pk, chat.pk]
    assert results[0]["match"]["message"] is None
    assert results[0]["match"]["snippet"] == "Egg recipes"
    match = results[1]["match"]
    assert match["message"] in set(chat.messages.values_list("pk", flat=True))
    assert "egg" in match["snippet"].lower()
    assert match["rank"] > 0
    assert results[1]["message_count"] == 2  # the ordinary fields are there too

    theirs = clients.other.get(url("chat-list"), {"search": "egg"}).json()["results"]
    assert [r["title"] for r in theirs] == ["Egg secrets"]


def test_search_pages(clients, users):
    chats = [chat_of(users["owner"], "", f"the word kumquat {i}") for i in range(3)]
    first = clients.owner.get(url("chat-list"), {"search": "kumquat", "page_size": 2}).json()
    assert len(first["results"]) == 2 and first["previous"] is None
    second = clients.owner.get(first["next"]).json()
    assert second["next"] is None and len(second["results"]) == 1
    seen = [r["id"] for r in first["results"] + second["results"]]
    assert sorted(seen) == sorted(c.pk for c in chats)
    assert clients.owner.get(url("chat-list"), {"search": "kumquat", "page": "0"}).json() == {
        "page": ["must be a whole number from 1 to 999999"]
    }


def test_search_without_words_is_a_400(clients):
    response = clients.owner.get(url("chat-list"), {"search": " !! "})
    assert response.status_code == 400
    assert response.json() == {"search": ["a search needs at least one word (letters or digits)"]}


def test_search_is_a_400_naming_why_with_encryption_at_rest(clients, users):
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [Fernet.generate_key().decode()]}):
        chat_of(users["owner"], "", "hidden words")
        response = clients.owner.get(url("chat-list"), {"search": "hidden"})
    assert response.status_code == 400
    assert "LLMCHAT['ENCRYPTION_KEYS']" in response.json()["search"][0]


def test_the_list_without_search_has_no_match(clients, users):
    chat_of(users["owner"], "One", "x")
    item = clients.owner.get(url("chat-list")).json()["results"][0]
    assert item["match"] is None and item["title"] == "One"


def test_the_schema_documents_search_and_match(clients):
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    operation = next(op["get"] for path, op in schema["paths"].items() if path.endswith("chats/"))
    assert "search" in [p["name"] for p in operation["parameters"]]
    assert "page" in [p["name"] for p in operation["parameters"]]
    properties = schema["components"]["schemas"]["ChatSearch"]["properties"]
    assert set(properties["match"]["properties"]) == {"message", "snippet", "rank"}


def test_the_plain_lists_paging_parameters_are_checked_beside_a_search(clients):
    api = clients.owner
    bad_from = api.get(url("chat-list"), {"search": "paris", "from": "middle"})
    assert bad_from.status_code == 400 and "from" in bad_from.json()
    bad_page = api.get(url("chat-list"), {"page": "0"})  # checked without a search too
    assert bad_page.status_code == 400 and "page" in bad_page.json()
