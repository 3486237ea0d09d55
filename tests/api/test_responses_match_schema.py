"""API responses match the OpenAPI schema the API publishes (what the serializers declare
is what they render)."""

import pytest
from jsonschema import Draft202012Validator

from django_llmchat.models import LLMModel, Message
from tests.factories import build_transcript

from .conftest import url

pytestmark = pytest.mark.django_db


@pytest.fixture
def schema(api):
    response = api.get(url("schema") + "?format=json")
    assert response.status_code == 200
    return response.json()


def check(schema, component, body):
    root = {**schema, "$ref": f"#/components/schemas/{component}"}
    errors = [
        f"{list(e.absolute_path)}: {e.message}"
        for e in Draft202012Validator(root).iter_errors(body)
    ]
    assert not errors, errors


def test_transcript_pages_match_the_schema(api, chat, schema):
    build_transcript(chat, 20)
    LLMModel.objects.create(
        provider="openai",
        model_id="priced-model",
        name="p",
        pricing={"input_mtok": "1.00", "output_mtok": "2.00"},
    )
    hand = Message.objects.create(
        chat=chat,
        role="assistant",
        content="hand",
        model_id="priced-model",
        input_tokens=1000,
        output_tokens=500,
    )
    first = api.get(url("chat-messages", pk=chat.pk)).json()
    check(schema, "PaginatedMessageList", first)
    last = api.get(url("chat-messages", pk=chat.pk) + "?from=end").json()
    check(schema, "PaginatedMessageList", last)
    shown = {m["id"]: m for m in last["results"]}
    # a message without usage rows is priced from the registry
    assert shown[hand.pk]["cost"]["total"] == "0.0020000000"
    assert shown[hand.pk]["tokens"] == {
        "input_tokens": 1000,
        "output_tokens": 500,
        "total_tokens": 1500,
    }
    calls = [m for m in first["results"] if m["tool_calls"]]
    assert calls and calls[0]["tool_calls"][0]["result"]["content"].startswith("sunny")
    assert any(m["attachments"] for m in first["results"])
    assert all(m["thinking"] in (None, "Let me see.") for m in first["results"])


def test_chats_runs_usage_and_models_match_the_schema(api, chat, schema, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script("Hello!")
    chat.ask("Hi")
    check(schema, "PaginatedChatSearchList", api.get(url("chat-list")).json())
    found = api.get(url("chat-list"), {"search": "hello"}).json()
    assert found["results"] and found["results"][0]["match"]["message"]
    check(schema, "PaginatedChatSearchList", found)
    check(schema, "Chat", api.get(url("chat-detail", pk=chat.pk)).json())
    check(schema, "PaginatedRunList", api.get(url("chat-runs", pk=chat.pk)).json())
    check(schema, "Usage", api.get(url("chat-usage", pk=chat.pk)).json())
    accepted = api.post(url("chat-messages", pk=chat.pk), {"content": "Again"}, format="json")
    check(schema, "MessageAccepted", accepted.json())
    check(schema, "Error", api.get(url("chat-detail", pk=999999)).json())
