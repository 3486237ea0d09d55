"""Bad input answers 400 naming the field and the reason; nothing answers 500."""

import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from django_llmchat.models import Chat, Message

from .conftest import url

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
PDF = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"


def post_message(api, chat, data, **kw):
    return api.post(url("chat-messages", pk=chat.pk), data, **kw)


@pytest.mark.parametrize("field", ["role", "model_id", "chat", "id", "provider", "tool_calls"])
def test_forged_message_fields_are_rejected(api, chat, field):
    response = post_message(api, chat, {"content": "hi", field: "x"}, format="json")
    assert response.status_code == 400
    assert response.json() == {field: ["unknown field"]}
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    "body, field, reason",
    [
        ({}, "content", "required"),
        ({"content": ""}, "content", "blank"),
        ({"content": "   \n"}, "content", "must not be empty"),
        ({"content": 42}, "content", "must be a string"),
        ({"content": None}, "content", "null"),
        ({"content": ["a"]}, "content", "must be a string"),
        ({"content": {"a": 1}}, "content", "must be a string"),
        ({"content": "a\x00b"}, "content", "Null characters"),
        ({"content": "hi", "attachments": ["aGk="]}, "attachments", "multipart"),
    ],
)
def test_bad_content(api, chat, body, field, reason):
    response = post_message(api, chat, body, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()
    assert list(errors) == [field]
    assert reason.lower() in " ".join(errors[field]).lower()
    assert not Message.objects.exists()


def test_content_length_limit(api, chat, settings):
    settings.LLMCHAT = {"MAX_CONTENT_LENGTH": 10}
    response = post_message(api, chat, {"content": "x" * 11}, format="json")
    assert response.status_code == 400
    assert "too long" in response.json()["content"][0]


@pytest.mark.parametrize(
    "body, content_type",
    [
        (b'{"content": ', "application/json"),
        (b"not json", "application/json"),
        (b'{"content": NaN}', "application/json"),
        (b"[" * 100_000, "application/json"),
        (b"\xff\xfe\x00", "application/json"),
    ],
)
def test_malformed_bodies(api, chat, body, content_type):
    response = api.generic("POST", url("chat-messages", pk=chat.pk), body, content_type)
    assert response.status_code == 400, response.content
    assert "detail" in response.json()


def test_a_list_body_is_rejected(api, chat):
    response = post_message(api, chat, [{"content": "hi"}], format="json")
    assert response.status_code == 400


def test_unsupported_media_type(api, chat):
    response = api.generic("POST", url("chat-messages", pk=chat.pk), b"content=hi", "text/plain")
    assert response.status_code == 415


def upload(name, data, content_type):
    return SimpleUploadedFile(name, data, content_type=content_type)


def test_too_many_attachments(api, chat, settings):
    settings.LLMCHAT = {"MAX_ATTACHMENTS": 2}
    files = [upload(f"{i}.png", PNG, "image/png") for i in range(3)]
    response = post_message(api, chat, {"content": "hi", "attachments": files}, format="multipart")
    assert response.status_code == 400
    assert "too many files" in response.json()["attachments"][0]


def test_oversized_attachment(api, chat, settings):
    settings.LLMCHAT = {"MAX_ATTACHMENT_SIZE": 16}
    response = post_message(
        api,
        chat,
        {"content": "hi", "attachments": [upload("big.png", PNG, "image/png")]},
        format="multipart",
    )
    assert response.status_code == 400
    assert "big.png: too large" in response.json()["attachments"][0]


def test_disallowed_type_is_sniffed_not_trusted(api, chat):
    # an executable that claims to be a PNG
    response = post_message(
        api,
        chat,
        {
            "content": "hi",
            "attachments": [upload("cat.png", b"MZ\x90\x00\x03" + b"\x00" * 40, "image/png")],
        },
        format="multipart",
    )
    assert response.status_code == 400
    assert "cat.png: the content is not image/png" in response.json()["attachments"][0]
    # a zip renamed to .pdf is a zip, which is not allowed
    response = post_message(
        api,
        chat,
        {"content": "hi", "attachments": [upload("doc.pdf", b"PK\x03\x04rest", "application/pdf")]},
        format="multipart",
    )
    assert response.status_code == 400
    assert "type application/zip is not allowed" in response.json()["attachments"][0]


def test_empty_attachment(api, chat):
    response = post_message(
        api,
        chat,
        {"content": "hi", "attachments": [upload("e.txt", b"", "text/plain")]},
        format="multipart",
    )
    assert response.status_code == 400
    assert "empty" in response.json()["attachments"][0]


def test_multipart_unknown_field(api, chat):
    response = post_message(
        api,
        chat,
        {"content": "hi", "role": "system", "extra": io.BytesIO(b"x")},
        format="multipart",
    )
    assert response.status_code == 400
    assert response.json() == {"extra": ["unknown field"], "role": ["unknown field"]}


def test_sniffing():
    from django_llmchat.inputs import sniff

    assert sniff(PNG, "application/pdf") == "image/png"
    assert sniff(PDF, None) == "application/pdf"
    assert sniff(b"RIFF\x00\x00\x00\x00WEBPVP8 ", None) == "image/webp"
    assert sniff(b"GIF89a...", None) == "image/gif"
    assert sniff("héllo wörld".encode(), None) == "text/plain"
    assert sniff(b"a,b\n1,2\n", "text/csv") == "text/csv"
    assert sniff(b'{"a": 1}', "application/json") == "application/json"
    assert sniff(b"\x00\x01\x02binary", "text/plain") is None
    # a multi-byte character cut at the end of the sniffed prefix is still text
    assert sniff("é".encode()[:1], None) == "text/plain"


# -- chats ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body, field, reason",
    [
        ({"id": 5}, "id", "unknown field"),
        ({"status": "idle"}, "status", "unknown field"),
        ({"user": 1}, "user", "unknown field"),
        ({"agent": "os.system"}, "agent", "unknown field"),
        ({"schema": {}}, "schema", "unknown field"),
        ({"provider": "nope"}, "provider", "is not configured"),
        ({"provider": 5}, "provider", "must be a string"),
        ({"model_id": ""}, "model_id", "blank"),
        ({"model_id": "  "}, "model_id", "blank"),
        ({"model_id": "x" * 300}, "model_id", "no more than 255"),
        ({"title": ["a"]}, "title", "must be a string"),
        ({"title": "a\x00"}, "title", "Null characters"),
        ({"params": []}, "params", "must be an object"),
        ({"params": "x"}, "params", "must be an object"),
        ({"params": {"temperature": "hot"}}, "params", "temperature must be a number"),
        ({"params": {"temperature": 3}}, "params", "temperature must be a number"),
        ({"params": {"temperature": True}}, "params", "temperature must be a number"),
        ({"params": {"max_tokens": 1.5}}, "params", "max_tokens must be an integer"),
        ({"params": {"max_tokens": 10**30}}, "params", "max_tokens must be an integer"),
        ({"params": {"stop": [1]}}, "params", "stop must be a string"),
        ({"params": {"anthropic": "x"}}, "params", "anthropic (provider options) must be"),
        ({"params": {"x": "a\x00"}}, "params", "NUL"),
        (
            {
                "params": {
                    "a": {
                        "b": {
                            "c": {
                                "d": {
                                    "e": {
                                        "f": {
                                            "g": {
                                                "h": {
                                                    "i": {
                                                        "j": {
                                                            "k": {
                                                                "l": {
                                                                    "m": {
                                                                        "n": {"o": {"p": {"q": 1}}}
                                                                    }
                                                                }
                                                            }
                                                        }
                                                    }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            },
            "params",
            "nested deeper",
        ),
        ({"context": []}, "context", "must be an object"),
        ({"context": {"skills": 1}}, "context", "reserved keys: skills"),
        ({"context": {"token_usage": 1}}, "context", "reserved keys: token_usage"),
        ({"tools": "weather"}, "tools", "list"),
        ({"tools": [1]}, "tools", "must be a string"),
        ({"tools": ["no_such_tool"]}, "tools", "unknown tools"),
    ],
)
def test_bad_chat_fields(api, chat, body, field, reason):
    for response in (
        api.post(url("chat-list"), body, format="json"),
        api.patch(url("chat-detail", pk=chat.pk), body, format="json"),
    ):
        assert response.status_code == 400, (body, response.content)
        errors = response.json()
        assert list(errors) == [field], errors
        assert reason.lower() in str(errors[field]).lower(), errors
    assert Chat.objects.count() == 1


def test_overflowing_numbers_in_json_fields(api, chat):
    # 1e400 parses as infinity, which JSON columns cannot store
    body = b'{"params": {"x": 1e400}}'
    response = api.generic("PATCH", url("chat-detail", pk=chat.pk), body, "application/json")
    assert response.status_code == 400
    assert list(response.json()) == ["params"]


def test_configured_provider_names_are_accepted(api, chat, settings):
    settings.LLMCHAT = {"PROVIDERS": {"my_vllm": {"class": "openai_compatible"}}}
    response = api.patch(url("chat-detail", pk=chat.pk), {"provider": "my_vllm"}, format="json")
    assert response.status_code == 200, response.content


@pytest.mark.parametrize(
    "path",
    [
        "/api/chats/99999999999999999999999999/",
        "/api/chats/9223372036854775808/",
        "/api/chats/9223372036854775808/messages/",
        "/api/chats/9223372036854775807/usage/",
        "/api/chats/abc/",
        "/api/chats/-1/",
        "/api/chats/1.5/messages/",
        "/api/models/99999999999999999999999/",
        "/api/chats/1/tool-calls/%00/approve/",
    ],
)
def test_odd_ids_are_404(api, path):
    response = api.get(path) if "approve" not in path else api.post(path)
    assert response.status_code == 404


def test_any_cursor_the_schema_allows_is_a_place_in_the_list(api, chat, owner):
    for path in (url("chat-messages", pk=chat.pk), url("chat-list"), url("chat-runs", pk=chat.pk)):
        for cursor in ("0.0", "b0.0", "99999999999999999.999999999999999999", "b1.1"):
            response = api.get(path, {"cursor": cursor})
            assert response.status_code == 200, (path, cursor, response.content)


@pytest.mark.parametrize(
    "params, field",
    [
        ({"cursor": "garbage"}, "cursor"),
        ({"cursor": "eyJ0Ijoibm90IGEgZGF0ZSIsImkiOjF9"}, "cursor"),  # {"t":"not a date","i":1}
        ({"cursor": "eyJ0IjoiMjAyNC0wMS0wMVQwMDowMDowMCswMDowMCIsImkiOjFlOTl9"}, "cursor"),
        ({"cursor": "eyJ0IjoiMjAyNC0wMS0wMVQwMDowMDowMCIsImkiOjF9"}, "cursor"),  # naive time
        ({"cursor": "W10"}, "cursor"),  # []
        ({"cursor": "\x00"}, "cursor"),
        ({"cursor": "1.2\n"}, "cursor"),  # the pattern's "$" alone lets a newline end it
        ({"cursor": "\u0661.\u0662"}, "cursor"),  # Arabic-Indic digits
        ({"cursor": "\uff11.\uff12"}, "cursor"),  # full-width digits
        ({"cursor": "é"}, "cursor"),
        ({"cursor": ""}, "cursor"),
        ({"cursor": "1.2.3"}, "cursor"),
        ({"cursor": "b-1.2"}, "cursor"),
        ({"cursor": "1.1234567890123456789"}, "cursor"),
        ({"page_size": "0"}, "page_size"),
        ({"page_size": "abc"}, "page_size"),
        ({"page_size": "99999999999999999999"}, "page_size"),
        ({"page_size": "²"}, "page_size"),
        ({"from": "middle"}, "from"),
    ],
)
def test_bad_pagination_params(api, chat, params, field):
    for path in (url("chat-messages", pk=chat.pk), url("chat-list")):
        response = api.get(path, params)
        assert response.status_code == 400, (path, params, response.content)
        assert field in response.json()


# Arabic-Indic, full-width and superscript digits: str.isdigit() and a regex's \d take them
OTHER_DIGITS = ["\u0661\u0667\u0661\u0662-\u0660", "\uff11-\uff10", "1-\u00b2", "\u0660"]


@pytest.mark.parametrize("value", OTHER_DIGITS)
def test_event_ids_are_ascii_digits(api, chat, settings, value):
    settings.LLMCHAT = {"EVENTS_URL": "redis://127.0.0.1:1/0"}
    response = api.get(url("chat-events", pk=chat.pk), HTTP_LAST_EVENT_ID=value)
    assert response.status_code == 400, response.content
    assert response.json() == {"Last-Event-ID": ["must be an event id such as 1712000000000-0"]}
    # the query parameter's refusal names the query parameter
    response = api.get(url("chat-events", pk=chat.pk), {"last_event_id": value})
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["last_event_id"]


def test_events_bad_last_event_id(api, chat, settings):
    settings.LLMCHAT = {"EVENTS_URL": "redis://127.0.0.1:1/0"}
    for value in ("abc", "1-2-3", "99999999999999999999-0", "-1", "1-"):
        response = api.get(url("chat-events", pk=chat.pk), HTTP_LAST_EVENT_ID=value)
        assert response.status_code == 400, value
        assert "Last-Event-ID" in response.json()
    response = api.get(url("chat-events", pk=chat.pk), {"follow": "forever"})
    assert response.status_code == 400
