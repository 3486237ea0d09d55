"""Usage totals over REST (``api/usage.py``): per chat and per model, and for an empty chat."""

from decimal import Decimal

import pytest

from django_llmchat.models import Usage
from tests.factories import build_transcript

from .conftest import url

pytestmark = pytest.mark.django_db


def test_usage_totals_and_per_model(api, chat):
    build_transcript(chat, 3, with_attachments=False)  # 6 attempts on gpt-4.1-mini
    Usage.objects.create(
        chat=chat,
        provider="anthropic",
        model_id="claude-haiku-4-5",
        status="failed",
        input_tokens=50,
        total_cost=Decimal("0.00005"),
    )
    chat.add_message(
        role="assistant", content="by hand", model_id="gpt-4.1-mini", provider="openai", cost="0.01"
    )
    response = api.get(url("chat-usage", pk=chat.pk))
    assert response.status_code == 200
    body = response.json()
    assert body["chat"] == chat.pk
    assert body["tokens"] == {
        "input_tokens": 650,
        "output_tokens": 120,
        "cache_read_tokens": 60,
        "total_tokens": 830,
    }
    assert Decimal(body["cost"]["total"]) == Decimal("0.0006") + Decimal("0.00005") + Decimal(
        "0.01"
    )
    assert body["attempts"] == {"succeeded": 6, "failed": 1}
    by_model = {(m["provider"], m["model_id"]): m for m in body["by_model"]}
    assert by_model[("anthropic", "claude-haiku-4-5")]["tokens"] == {
        "input_tokens": 50,
        "total_tokens": 50,
    }
    openai = by_model[("openai", "gpt-4.1-mini")]
    assert openai["attempts"] == 6
    assert Decimal(openai["cost"]["total"]) == Decimal("0.0106")
    # the same totals as the model layer
    assert body["tokens"]["total_tokens"] == chat.tokens.total_tokens
    assert Decimal(body["cost"]["total"]) == chat.cost().total
    # the active path: its messages' attempts (not the failed one, which stored none)
    assert body["path"]["tokens"]["total_tokens"] == 780 == chat.path_tokens().total_tokens
    assert Decimal(body["path"]["cost"]["total"]) == Decimal("0.0106") == chat.path_cost().total


def test_usage_of_an_empty_chat(api, chat):
    assert api.get(url("chat-usage", pk=chat.pk)).json() == {
        "chat": chat.pk,
        "tokens": {},
        "cost": {},
        "estimated": 0,
        "attempts": {},
        "by_model": [],
        "path": {"tokens": {}, "cost": {}},
    }
