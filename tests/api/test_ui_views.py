"""The AI SDK transport's routes (``POST ui/chat``, ``GET ui/chat/{id}/stream``) refuse in
plain text: the SDK throws ``new Error(await response.text())``, so ``chat.error.message``
is the body. ``Accept: application/json`` gets the API's JSON error instead. (The
streams themselves: ``test_ui_chat.py``.)"""

import pytest

from django_llmchat.models import Chat, Run

from .conftest import url
from .test_limits import over_budget  # noqa: F401 - a fixture
from .test_ui_chat import post, user

pytestmark = pytest.mark.django_db

TEXT = "text/plain; charset=utf-8"


def test_a_400_is_its_message_as_text(api, chat):
    response = api.post(url("ui-chat"), {"id": str(chat.pk), "messages": []}, format="json")
    assert response.status_code == 400
    assert response["Content-Type"] == TEXT
    assert response.content.decode() == "messages: send at least the new message"


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream, application/json"])
def test_a_client_asking_for_json_gets_the_json_error(api, chat, accept):
    body = {"id": str(chat.pk), "messages": []}
    response = api.post(url("ui-chat"), body, format="json", HTTP_ACCEPT=accept)
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"messages": ["send at least the new message"]}


@pytest.mark.parametrize("accept", ["*/*", "application/json;q=0, */*", "application/*"])
def test_other_accepts_get_text(api, chat, accept):
    body = {"id": str(chat.pk), "messages": []}
    response = api.post(url("ui-chat"), body, format="json", HTTP_ACCEPT=accept)
    assert response.status_code == 400 and response["Content-Type"] == TEXT


def test_a_409_is_text(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script("First reply.")
    chat.ask("Tell me.")
    Run.objects.create(chat=chat, status=Run.QUEUED)
    response = post(api, chat.pk, trigger="regenerate-message")
    assert response.status_code == 409
    assert response["Content-Type"] == TEXT
    assert response.content.decode() == (
        "The chat has a run in progress; wait for it to end (or cancel it)."
    )


def test_a_budget_429_is_text_with_its_retry_after(api, chat, over_budget):  # noqa: F811
    response = post(api, chat.pk, user("Hello"))
    assert response.status_code == 429
    assert response["Content-Type"] == TEXT
    assert response.content.decode() == "The daily spending limit is reached."
    assert int(response["Retry-After"]) > 0
    assert not chat.messages.exists()


def test_a_415_and_a_413_are_text(api, chat, settings):
    response = api.generic("POST", url("ui-chat"), b"{}", "application/json; charset=bogus")
    assert response.status_code == 415 and response["Content-Type"] == TEXT
    assert "'bogus'" in response.content.decode()
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    body = {"id": str(chat.pk), "messages": [user("x" * 200)]}
    response = api.post(url("ui-chat"), body, format="json")
    assert response.status_code == 413 and response["Content-Type"] == TEXT
    assert response.content.decode() == "The request body is too large (at most 100 bytes)."


def test_a_405_keeps_its_allow_header(api):
    response = api.get(url("ui-chat"))
    assert response.status_code == 405 and response["Content-Type"] == TEXT
    assert response.content.decode() == 'Method "GET" not allowed.'
    assert "POST" in response["Allow"]


def test_an_anonymous_client_is_refused_in_text(clients):
    response = clients.anon.post(url("ui-chat"), {}, format="json")
    assert response.status_code in (401, 403) and response["Content-Type"] == TEXT
    assert response.content.decode() == "Authentication credentials were not provided."


def test_resuming_a_chat_that_is_not_yours_is_a_text_404(clients, chat):
    response = clients.other.get(url("ui-chat-stream", id=str(chat.pk)))
    assert response.status_code == 404 and response["Content-Type"] == TEXT
    assert response.content.decode() == "No such chat."
    response = clients.other.get(
        url("ui-chat-stream", id=str(chat.pk)), HTTP_ACCEPT="application/json"
    )
    assert response.json() == {"detail": "No such chat.", "code": "not_found"}


def test_resuming_an_id_no_chat_can_have_is_a_text_404(api):
    response = api.get("/api/ui/chat/a%00b/stream")
    assert response.status_code == 404 and response["Content-Type"] == TEXT
    assert response.content == b"Not found."


def test_the_routes_a_client_calls_itself_stay_json(clients, chat):
    """``ui/chat/{id}/messages`` and ``/stop`` are fetched by the page's own code."""
    for name in ("ui-chat-messages", "ui-chat-stop"):
        call = clients.other.get if name == "ui-chat-messages" else clients.other.post
        response = call(url(name, id=str(chat.pk)))
        assert response.status_code == 404 and response["Content-Type"] == "application/json"


@pytest.mark.django_db(transaction=True)  # closing the response closes the connections
def test_an_answer_that_is_no_refusal_is_untouched(api, chat, fake_llm):
    assert api.get(url("ui-chat-stream", id=str(chat.pk))).status_code == 204
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script("Hi.")
    response = post(api, chat.pk, user("Hello"))
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    assert b"".join(response.streaming_content).endswith(b"data: [DONE]\n\n")
    response.close()
    assert Chat.objects.get(pk=chat.pk).messages.count() == 2


def test_the_schema_documents_text_refusals_on_the_transport_routes(api):
    schema = api.get("/api/schema/?format=json").json()
    post_ = schema["paths"]["/api/ui/chat"]["post"]
    for code in ("400", "409", "413", "415", "429"):
        content = post_["responses"][code]["content"]
        assert content["text/plain"]["schema"]["type"] == "string", code
        assert "application/json" in content
    stream = schema["paths"]["/api/ui/chat/{id}/stream"]["get"]
    assert "text/plain" in stream["responses"]["404"]["content"]
    stop = schema["paths"]["/api/ui/chat/{id}/stop"]["post"]
    assert "text/plain" not in stop["responses"]["409"]["content"]
    assert not any(key.startswith("x-") for key in post_)
