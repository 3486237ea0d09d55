"""What the framework refuses before a view runs is JSON too, with a ``code``."""

from urllib.parse import quote

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from django_llmchat.models import Chat, Message

from .conftest import url

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path",
    [
        "/api/chats/abc/",
        "/api/chats/1/nothing/",
        "/api/nothing/",
        "/api/runs/-1/",
        "/api/chats/99999999999999999999999/messages/x/",
        "/api/chats/a%0Ab%0Dc%C2%85d/runs/",  # line breaks: "." alone does not match them
        "/api/%0A",
        "/api/nothing%0A/",
    ],
)
def test_unmatched_paths_are_a_json_404(api, path):
    response = api.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found.", "code": "not_found"}


STRING_ID_ROUTES = [
    ("post", "/api/chats/{pk}/tool-calls/{id}/approve/"),
    ("post", "/api/chats/{pk}/tool-calls/{id}/deny/"),
    ("get", "/api/ui/chat/{id}/stream"),
]
# a NUL (PostgreSQL cannot store it, and answered a 500), other C0 and C1 control
# characters, and ids longer than the 255-character columns
NO_ROW_HAS = ["%00", "call%00a", "%01", "a%1fb", "%7f", "%C2%85", "x" * 256]


@pytest.mark.parametrize("method, route", STRING_ID_ROUTES)
@pytest.mark.parametrize(
    "bad", NO_ROW_HAS, ids=["nul", "inner-nul", "c0", "us", "del", "c1", "256"]
)
def test_string_path_ids_no_row_can_have_are_a_json_404(
    api, chat, method, route, bad, django_assert_num_queries
):
    with django_assert_num_queries(0):  # refused by the route: nothing reaches the database
        response = getattr(api, method)(route.format(pk=chat.pk, id=bad))
    assert response.status_code == 404, response.content
    if "/ui/chat/" in route:  # the AI SDK's reconnect: a refusal it shows, as text
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert response.content == b"Not found."
    else:
        assert response.json() == {"detail": "Not found.", "code": "not_found"}


@pytest.mark.parametrize(
    "zero", ["\u0660", "\uff10", "\U0001d7ce"]
)  # Arabic-Indic, full width, bold
def test_a_resume_id_in_other_digits_is_not_the_chat(api, chat, zero):
    """``ui/chat/{id}/stream`` takes the ids ``POST ui/chat`` accepts: a primary key is
    ASCII digits (``int()`` reads ``٣`` as 3)."""
    other_digits = "".join(chr(ord(zero) + int(d)) for d in str(chat.pk))
    assert int(other_digits) == chat.pk
    response = api.get(f"/api/ui/chat/{quote(other_digits)}/stream", HTTP_ACCEPT="application/json")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert api.get(url("ui-chat-stream", id=str(chat.pk))).status_code == 204


@pytest.mark.parametrize("bad", ["%C3%A9", "a%20b", "a%2Cb"])
def test_resume_ids_take_the_characters_a_client_id_may_have(api, chat, bad):
    response = api.get(f"/api/ui/chat/{bad}/stream", HTTP_ACCEPT="application/json")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_the_longest_string_ids_still_reach_their_views(api, chat):
    longest = "é" * 255  # 255 characters (510 bytes): the columns' length
    response = api.post(url("tool-call-approve", pk=chat.pk, call_id=longest))
    assert response.json() == {"detail": "No such tool call.", "code": "not_found"}
    made = Chat.objects.create(user=chat.user, client_id="~" * 255)
    assert api.get(url("ui-chat-stream", id=made.client_id)).status_code == 204


def test_unmatched_paths_answer_anonymous_clients_the_same(clients):
    response = clients.anon.post("/api/chats/abc/", {}, format="json")
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_a_route_without_its_slash(api, chat):
    response = api.get(f"/api/chats/{chat.pk}?x=1")
    assert response.status_code == 301
    assert response["Location"] == f"/api/chats/{chat.pk}/?x=1"
    response = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hi"}, format="json")
    assert response.status_code == 404
    assert response.json()["detail"].endswith(f"/api/chats/{chat.pk}/messages/")
    assert not Message.objects.exists()


def test_another_chats_id_is_the_same_json_404(clients, chat):
    response = clients.other.get(url("chat-detail", pk=chat.pk))
    assert response.status_code == 404
    assert response.json() == {"detail": "No Chat matches the given query.", "code": "not_found"}


@pytest.mark.parametrize(
    "method, name", [("put", "chat-list"), ("delete", "chat-messages"), ("post", "chat-usage")]
)
def test_methods_a_route_does_not_take_are_a_json_405(api, chat, method, name):
    kwargs = {} if name == "chat-list" else {"pk": chat.pk}
    response = getattr(api, method)(url(name, **kwargs), {}, format="json")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed"
    assert method.upper() in response.json()["detail"]


def test_unauthenticated_is_json(clients, chat):
    response = clients.anon.get(url("chat-detail", pk=chat.pk))
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"


def test_unsupported_media_type_is_json(api, chat):
    response = api.generic("POST", url("chat-list"), b"a=b", "text/csv")
    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"


@pytest.mark.parametrize("charset", ["bogus", "latin-1", "utf-16", "ascii", '"x"', ""])
def test_a_json_body_in_a_charset_other_than_utf8_is_a_415_naming_it(api, chat, charset):
    body = '{"title": "caf\u00e9"}'.encode("latin-1")
    response = api.generic(
        "PATCH", url("chat-detail", pk=chat.pk), body, f"application/json; charset={charset}"
    )
    assert response.status_code == 415, response.content
    assert response.json()["code"] == "unsupported_media_type"
    assert repr(charset.strip('"')) in response.json()["detail"]
    chat.refresh_from_db()
    assert chat.title == "Trip"


@pytest.mark.parametrize("charset", ["utf-8", "UTF-8", "utf8", "Utf8", '"utf-8"'])
def test_utf8_may_be_declared_in_any_case(api, chat, charset):
    body = '{"title": "caf\u00e9"}'.encode()
    response = api.generic(
        "PATCH", url("chat-detail", pk=chat.pk), body, f"application/json; charset={charset}"
    )
    assert response.status_code == 200, response.content
    assert response.json()["title"] == "caf\u00e9"


@pytest.mark.parametrize("name", ["token", "ui-chat"])
def test_every_json_route_refuses_other_charsets(clients, api, name):
    client = clients.anon if name == "token" else api
    response = client.generic("POST", url(name), b"{}", "application/json; charset=bogus")
    assert response.status_code == 415, response.content
    assert "'bogus'" in response.content.decode()  # JSON, or text for the AI SDK


def test_a_multipart_body_in_a_charset_other_than_utf8_is_a_415(api, chat, fake_llm):
    from django.test.client import BOUNDARY, MULTIPART_CONTENT, encode_multipart

    from django_llmchat.testing import Reply

    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("Bien."))
    body = encode_multipart(BOUNDARY, {"content": "caf\u00e9"})
    for charset, status in (("latin-1", 415), ("bogus", 415), ("utf-8", 202)):
        response = api.generic(
            "POST",
            url("chat-messages", pk=chat.pk),
            body,
            f"{MULTIPART_CONTENT}; charset={charset}",
        )
        assert response.status_code == status, (charset, response.content)
    assert [m.content for m in Message.objects.filter(role="user")] == ["caf\u00e9"]


def test_the_schema_documents_the_415_where_a_body_is_read(clients):
    import json

    schema = json.loads(clients.anon.get(url("schema"), {"format": "json"}).content)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert ("415" in operation["responses"]) == ("requestBody" in operation), (path, method)


def test_not_acceptable_is_json(api, chat):
    response = api.get(url("chat-detail", pk=chat.pk), HTTP_ACCEPT="text/html")
    assert response.status_code == 406
    assert response.json()["code"] == "not_acceptable"


def test_a_json_body_over_the_upload_limit_is_a_413(api, chat, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "x" * 2000}, format="json")
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "detail": "The request body is too large (at most 1000 bytes).",
        "code": "payload_too_large",
    }
    assert not Message.objects.exists()


def test_form_fields_over_the_upload_limit_are_a_413(api, chat, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = api.post(
        url("chat-messages", pk=chat.pk), {"content": "x" * 2000}, format="multipart"
    )
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"


def test_too_many_form_fields_is_json(api, chat, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 3
    data = {"content": "hi", **{f"f{i}": "x" for i in range(5)}}
    response = api.post(url("chat-messages", pk=chat.pk), data, format="multipart")
    assert response.status_code == 400
    assert response.json()["code"] == "too_many_fields"


def test_too_many_files_is_json(api, chat, settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 2
    files = [SimpleUploadedFile(f"a{i}.txt", b"hello", "text/plain") for i in range(4)]
    response = api.post(
        url("chat-messages", pk=chat.pk),
        {"content": "hi", "attachments": files},
        format="multipart",
    )
    assert response.status_code == 400
    assert response.json()["code"] == "too_many_files"
