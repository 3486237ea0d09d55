"""The admin chat list's tokens and cost agree with the chat's own page (and with
``chat.tokens`` / ``chat.cost()``): hand-built messages count, provider attempts count."""

import re
from decimal import Decimal

import pytest
from django.urls import reverse

from django_llmchat.models import Chat, Usage
from django_llmchat.values import Tokens

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client


def _row(html: str, title: str) -> tuple[str, str]:
    """The list's tokens and cost cells of the chat titled ``title``."""
    row = next(r for r in html.split("<tr") if f">{title}</a>" in r)
    tokens = re.search(r'class="field-tokens_total">([^<]*)<', row).group(1)
    cost = re.search(r'class="field-cost_total">([^<]*)<', row).group(1)
    return tokens, cost


def _page_totals(admin_client, chat) -> tuple[str, str]:
    html = admin_client.get(reverse("admin:django_llmchat_chat_change", args=[chat.pk]))
    html = html.content.decode()
    tokens = re.search(r"<span>total (\S+) tokens</span>", html).group(1)
    cost = re.search(r'<span class="llmchat-cost">([^<]*)</span>', html).group(1)
    return tokens, cost


def test_a_hand_built_reply_shows_its_tokens_and_cost_in_the_list(admin_client):
    # the quickstart's "Imported" chat: the page shows 15 tokens and $0.00002
    chat = Chat.objects.create(title="Imported")
    chat.add_message(
        role="assistant",
        content="Paris.",
        model_id="gpt-4.1-mini",
        finish_reason="stop",
        tokens=Tokens(input_tokens=12, output_tokens=3),
        cost=Decimal("0.00002"),
    )
    html = admin_client.get(reverse("admin:django_llmchat_chat_changelist")).content.decode()
    assert _row(html, "Imported") == ("15", "$0.000020")
    assert _page_totals(admin_client, chat) == ("15", "$0.000020")
    row = Chat.objects.with_totals().get(pk=chat.pk)
    assert row.total_tokens == chat.tokens.total_tokens == 15
    assert row.total_cost == chat.cost().total == Decimal("0.00002")


def test_real_attempts_and_a_hand_built_message_add_up_in_the_list(admin_client, fake_llm):
    from django_llmchat.testing import Reply

    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("Paris.", usage={"input_tokens": 40, "output_tokens": 5}))
    chat = Chat.objects.create(title="Mixed", provider="openai", model_id="gpt-4.1-mini")
    chat.ask("The capital of France?")
    attempt = Usage.objects.get(chat=chat)
    assert attempt.total_cost is not None and attempt.total_cost > 0
    attempt_tokens = attempt.tokens.total_tokens
    html = admin_client.get(reverse("admin:django_llmchat_chat_changelist")).content.decode()
    page = _page_totals(admin_client, chat)
    assert _row(html, "Mixed") == page
    assert page[0] == f"{attempt_tokens:,}"
    # an imported reply on top: both sources count, on the list as on the page
    chat.add_message(role="user", content="And Spain?")
    chat.add_message(
        role="assistant",
        content="Madrid.",
        model_id="gpt-4.1-mini",
        tokens=Tokens(input_tokens=12, output_tokens=3),
        cost=Decimal("0.00002"),
    )
    html = admin_client.get(reverse("admin:django_llmchat_chat_changelist")).content.decode()
    tokens, cost = _row(html, "Mixed")
    assert tokens == f"{attempt_tokens + 15:,}" == _page_totals(admin_client, chat)[0]
    row = Chat.objects.with_totals().get(pk=chat.pk)
    assert row.total_cost == attempt.total_cost + Decimal("0.00002") == chat.cost().total
    assert cost == _page_totals(admin_client, chat)[1]


def test_a_chat_with_no_counts_shows_a_dash(admin_client):
    chat = Chat.objects.create(title="Empty")
    chat.add_message(role="user", content="hello")
    html = admin_client.get(reverse("admin:django_llmchat_chat_changelist")).content.decode()
    assert _row(html, "Empty") == ("—", "—")
    row = Chat.objects.with_totals().get(pk=chat.pk)
    assert row.total_tokens is None and row.total_cost is None
