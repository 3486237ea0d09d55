"""Spending limits over REST: a 429 with the limit, when it resets and Retry-After."""

from decimal import Decimal

import pytest
from django.utils import timezone

from django_llmchat.models import Message, Run, Usage

from .conftest import url

pytestmark = pytest.mark.django_db


@pytest.fixture
def over_budget(settings, chat):
    settings.LLMCHAT = {
        "LIMITS": {"default": {"usd_per_day": "2.00"}},
        "PROVIDERS": {"openai": {"api_key": "k"}},
    }
    Usage.objects.create(chat=chat, status="succeeded", total_cost=Decimal("2.5"))


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
def test_over_the_daily_limit_is_a_429(api, chat, over_budget, accept):
    response = api.post(
        url("chat-messages", pk=chat.pk), {"content": "hi"}, format="json", HTTP_ACCEPT=accept
    )
    assert response.status_code == 429
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["code"] == "budget_exceeded"
    assert body["limit"] == "usd_per_day"
    assert body["detail"] == "The daily spending limit is reached."
    assert Decimal(body["used"]) == Decimal("2.5") and body["allowed"] == "2.00"
    resets_at = timezone.datetime.fromisoformat(body["resets_at"])
    wait = int(response["Retry-After"])
    assert 0 < wait <= 24 * 3600
    assert abs((resets_at - timezone.now()).total_seconds() - wait) < 5
    assert not Message.objects.exists() and not Run.objects.exists()


def test_another_users_budget_is_theirs(clients, over_budget, django_user_model):
    response = clients.other.post(url("chat-list"), {"title": "mine"}, format="json")
    assert response.status_code == 201
    # reading stays allowed over a limit
    assert clients.owner.get(url("chat-list")).status_code == 200


def test_concurrent_runs_over_rest(api, chat, settings):
    from django_llmchat import runs

    settings.LLMCHAT = {
        "LIMITS": {"default": {"concurrent_runs": 1}},
        "TASKS_EAGER_WITHOUT_BROKER": False,
    }
    runs.enqueue(chat, Message(chat=chat, role="user", content="first"))
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "2nd"}, format="json")
    assert response.status_code == 429
    assert response.json()["limit"] == "concurrent_runs"
    assert response.json()["resets_at"] is None
    assert "Retry-After" not in response
