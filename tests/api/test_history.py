"""A chat's history policy over REST (validated, 400 naming the field), and summaries in
the message list and the admin transcript."""

import pytest
from django.urls import reverse

from django_llmchat.models import Chat, Message, Usage
from django_llmchat.values import Tokens

from .conftest import url

pytestmark = pytest.mark.django_db


def _with_summary(chat: Chat) -> Message:
    """A transcript with a stored summary covering its first turn, as a compaction leaves
    it (the summary's usage row included)."""
    chat.add_message(role="user", content="Where is Lisbon?")
    covered = chat.add_message(role="assistant", content="In Portugal.")
    chat.add_message(role="user", content="And Porto?")
    summary = chat.add_message(
        role="system",
        content="The user asked where Lisbon is (Portugal).",
        summary_until=covered,
        model_id="gpt-4.1-mini",
        provider="openai",
    )
    usage = Usage(
        chat=chat,
        message=summary,
        operation="summary",
        provider="openai",
        model_id="gpt-4.1-mini",
        status="succeeded",
    )
    usage.tokens = Tokens(input_tokens=40, output_tokens=12)
    usage.freeze_cost()
    usage.save()
    return summary


def test_history_is_set_read_and_validated(api, chat):
    response = api.patch(
        url("chat-detail", pk=chat.pk), {"history": {"strategy": "summarize"}}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["history"] == {"strategy": "summarize"}
    chat.refresh_from_db()
    assert chat.history == {"strategy": "summarize"}

    response = api.patch(url("chat-detail", pk=chat.pk), {"history": "windows"}, format="json")
    assert response.status_code == 400
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert "history" in str(body) and "strategy 'windows'" in str(body)

    response = api.patch(
        url("chat-detail", pk=chat.pk), {"history": {"keep": "half"}}, format="json"
    )
    assert response.status_code == 400 and "keep must be a number" in str(response.json())

    response = api.patch(url("chat-detail", pk=chat.pk), {"history": None}, format="json")
    assert response.status_code == 200 and response.json()["history"] is None


def test_summary_in_the_message_list(api, chat):
    summary = _with_summary(chat)
    response = api.get(url("chat-messages", pk=chat.pk))
    assert response.status_code == 200
    rows = response.json()["results"]
    shown = next(r for r in rows if r["id"] == summary.pk)
    assert shown["role"] == "system"
    assert shown["summary_until"] == summary.summary_until_id
    assert shown["tokens"]["input_tokens"] == 40 and shown["cost"]
    assert all(r["summary_until"] is None for r in rows if r["id"] != summary.pk)


def test_summary_in_the_admin_transcript(client, django_user_model, chat):
    summary = _with_summary(chat)
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    html = client.get(reverse("admin:django_llmchat_chat_change", args=[chat.pk])).content
    html = html.decode()
    assert "llmchat-badge-summary" in html
    assert f'href="#message-{summary.summary_until_id}"' in html
    assert "The user asked where Lisbon is" in html
