from decimal import Decimal

import pytest
from pydantic import BaseModel

from django_llmchat.errors import ArgumentError
from django_llmchat.models import Chat, LLMModel, Message, Usage
from django_llmchat.values import Cost, Tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat():
    return Chat.objects.create(model_id="gpt-4.1-mini", provider="openai")


def test_defaults_come_from_settings(settings):
    settings.LLMCHAT = {"DEFAULT_MODEL": "claude-haiku-4-5", "DEFAULT_PROVIDER": "anthropic"}
    c = Chat.objects.create()
    assert (c.model_id, c.provider) == ("claude-haiku-4-5", "anthropic")


def test_with_instructions_replace_append_clear(chat):
    assert chat.with_instructions("Be terse.") is chat
    chat.with_instructions("Be kind.")
    assert list(chat.messages.filter(role="system").values_list("content", flat=True)) == [
        "Be kind."
    ]
    chat.with_instructions("Answer in French.", append=True)
    assert list(chat.messages.filter(role="system").values_list("content", flat=True)) == [
        "Be kind.",
        "Answer in French.",
    ]
    chat.with_instructions(None)
    assert not chat.messages.filter(role="system").exists()


def test_with_model(chat):
    LLMModel.objects.create(provider="anthropic", model_id="claude-haiku-4-5", name="Haiku")
    chat.with_model("claude-haiku-4-5")
    chat.refresh_from_db()
    assert (chat.model_id, chat.provider) == ("claude-haiku-4-5", "anthropic")
    chat.with_model("my-local", provider="ollama")
    chat.refresh_from_db()
    assert (chat.model_id, chat.provider) == ("my-local", "ollama")
    with pytest.raises(ArgumentError):
        chat.with_model("")


def test_with_tools_by_name_function_and_object(chat):
    def weather(city: str) -> str:
        return "sunny"

    class Search:
        name = "search"

    chat.with_tools(weather, Search(), "clock").with_tools("clock")
    chat.refresh_from_db()
    assert chat.tools == ["weather", "search", "clock"]
    chat.with_tools("only", replace=True)
    assert chat.tools == ["only"]
    with pytest.raises(ArgumentError):
        chat.with_tools(42)


def test_with_temperature_params_schema(chat):
    chat.with_temperature(0.2).with_params(max_tokens=100, anthropic={"top_k": 5})
    chat.refresh_from_db()
    assert chat.params == {"temperature": 0.2, "max_tokens": 100, "anthropic": {"top_k": 5}}
    for bad in (-1, 3, "hot", True):
        with pytest.raises(ArgumentError, match="temperature"):
            chat.with_temperature(bad)

    class Person(BaseModel):
        name: str
        age: int

    chat.with_schema(Person)
    chat.refresh_from_db()
    assert chat.schema["properties"]["age"]["type"] == "integer"
    chat.with_schema({"type": "object"})
    assert chat.schema == {"type": "object"}
    chat.with_schema(None)
    assert chat.schema is None
    with pytest.raises(ArgumentError, match="schema"):
        chat.with_schema(42)


def test_cache_until_here(chat):
    with pytest.raises(ArgumentError):
        chat.cache_until_here()
    chat.add_message(role="user", content="first")
    last = chat.add_message(role="user", content="doc")
    assert chat.cache_until_here() is chat
    last.refresh_from_db()
    assert last.cache_boundary
    assert Message.objects.filter(cache_boundary=True).count() == 1


def test_chat_tokens_and_cost(chat):
    m = chat.add_message(role="assistant", content="a")
    Usage.objects.create(
        chat=chat,
        message=m,
        status="failed",
        input_tokens=5,
        total_cost=Decimal("0.001"),
        input_cost=Decimal("0.001"),
    )
    Usage.objects.create(
        chat=chat,
        message=m,
        status="succeeded",
        input_tokens=10,
        output_tokens=4,
        total_cost=Decimal("0.002"),
    )
    chat.add_message(
        role="assistant", content="hand-built", tokens=Tokens(1, 1), cost=Decimal("0.5")
    )
    assert chat.tokens == Tokens(16, 5)
    assert chat.cost().total == Decimal("0.503")
    assert Chat.objects.create().cost() == Cost()
    assert Chat.objects.create().tokens == Tokens()


def test_with_totals_annotation(chat):
    from tests.factories import build_transcript

    build_transcript(chat, 3)
    row = Chat.objects.with_totals().get(pk=chat.pk)
    assert row.message_count == 12
    assert row.total_tokens == 6 * 130
    assert row.total_cost == Decimal("0.0006")
