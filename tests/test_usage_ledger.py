"""The usage ledger: usage rows outlive their chat and their user, so the spending limits
and the dashboard still count them; deleting is never a way to reset spend."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from django_llmchat.chats.dashboard import usage_summary
from django_llmchat.errors import BudgetExceededError
from django_llmchat.models import Chat, Usage
from django_llmchat.runs import limits
from django_llmchat.testing import Reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("spender", password="pw")


def ask(fake_llm, chat, text="Hello"):
    fake_llm.script(Reply("Hi there", usage={"input_tokens": 1000, "output_tokens": 500}))
    return chat.ask(text)


def spent(chat, usd: str) -> Usage:
    return Usage.objects.create(
        chat=chat,
        provider="openai",
        model_id="gpt-4.1-mini",
        status=Usage.SUCCEEDED,
        input_tokens=10,
        total_cost=Decimal(usd),
    )


def test_a_deleted_chat_keeps_its_usage_rows_and_the_limit_still_refuses(fake_llm, user):
    fake_llm.configure("openai", "gpt-4.1-mini", LIMITS={"default": {"usd_per_day": "1.00"}})
    chat = Chat.objects.create(user=user, title="Expensive trip", provider="openai")
    ask(fake_llm, chat)
    spent(chat, "1.20")
    before = limits.spend(user.pk)["usd_per_day"]
    rows = list(Usage.objects.filter(chat_id=chat.pk).values_list("pk", flat=True))
    assert before >= Decimal("1.20") and len(rows) == 2

    chat_id = chat.pk
    chat.delete()
    limits.forget()

    kept = Usage.objects.filter(pk__in=rows)
    assert kept.count() == 2
    assert set(kept.values_list("chat_id", "user_id", "chat_title")) == {
        (chat_id, user.pk, "Expensive trip")
    }
    assert limits.spend(user.pk)["usd_per_day"] == before
    fresh = Chat.objects.create(user=user, provider="openai")
    with pytest.raises(BudgetExceededError) as info:
        fresh.ask("Still here?")
    assert info.value.limit == "usd_per_day" and info.value.used == before


def test_a_deleted_user_keeps_their_usage_rows_and_the_totals(fake_llm, user):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(user=user, title="Gone soon", provider="openai")
    ask(fake_llm, chat)
    spent(chat, "0.50")
    user_id, chat_id = user.pk, chat.pk
    today = timezone.localdate()
    before = usage_summary(today, today)

    user.delete()  # cascades to the chat

    assert not Chat.objects.filter(pk=chat_id).exists()
    rows = Usage.objects.filter(user_id=user_id)
    assert rows.count() == 2 and set(rows.values_list("chat_title", flat=True)) == {"Gone soon"}
    assert rows.cost().total >= Decimal("0.50")  # what the limits sum, by the same column
    after = usage_summary(today, today)
    assert after.totals["cost"] == before.totals["cost"]
    assert after.totals["attempts"] == before.totals["attempts"] == 2
    (by_user,) = after.by_user
    assert by_user["user_id"] == user_id and by_user["username"] is None
    (top,) = after.top_chats
    assert top["chat_id"] == chat_id and top["title"] == "Gone soon" and top["deleted"]


def test_the_dashboard_names_live_chats_and_users(fake_llm, user):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(user=user, title="Alive", provider="openai")
    spent(chat, "0.10")
    today = timezone.localdate()
    summary = usage_summary(today, today)
    assert summary.top_chats[0]["title"] == "Alive" and not summary.top_chats[0]["deleted"]
    assert summary.by_user[0]["username"] == "spender"


def test_a_chat_of_a_ledger_row_reads_the_kept_title(user):
    chat = Chat.objects.create(user=user, title="Kept")
    row = spent(chat, "0.01")
    assert row.chat_exists and row.chat_label == "Kept"
    chat.delete()
    row = Usage.objects.get(pk=row.pk)
    assert not row.chat_exists and row.chat_label == "Kept (deleted)"
    assert Usage.objects.select_related("chat").get(pk=row.pk).chat_label == "Kept (deleted)"
    untitled = Chat.objects.create(user=user)
    other, untitled_id = spent(untitled, "0.01"), untitled.pk
    untitled.delete()
    assert Usage.objects.get(pk=other.pk).chat_label == f"Chat {untitled_id} (deleted)"


def test_deleting_chats_in_bulk_keeps_each_title(user):
    chats = [Chat.objects.create(user=user, title=f"chat {i}") for i in range(3)]
    for chat in chats:
        spent(chat, "0.01")
    Chat.objects.filter(user=user).delete()
    assert sorted(Usage.objects.values_list("chat_title", flat=True)) == [
        "chat 0",
        "chat 1",
        "chat 2",
    ]


def test_the_month_still_counts_yesterdays_rows_of_a_deleted_chat(fake_llm, user):
    fake_llm.configure("openai", "gpt-4.1-mini", LIMITS={"default": {"usd_per_month": "1.00"}})
    chat = Chat.objects.create(user=user, provider="openai")
    row = spent(chat, "1.50")
    start = limits._windows(timezone.now())["month"][0]
    when = max(start, timezone.now() - timedelta(days=1))
    Usage.objects.filter(pk=row.pk).update(created_at=when)
    chat.delete()
    limits.forget()
    with pytest.raises(BudgetExceededError) as info:
        limits.admit(Chat.objects.create(user=user, provider="openai"))
    assert info.value.limit == "usd_per_month"


def test_the_usage_admin_shows_rows_of_deleted_chats_and_users(client, django_user_model, user):
    admin = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(admin)
    chat = Chat.objects.create(user=user, title="Old plans")
    row = spent(chat, "0.02")
    live = client.get(reverse("admin:django_llmchat_usage_change", args=[row.pk]))
    assert live.status_code == 200 and "spender" in live.text
    assert reverse("admin:django_llmchat_chat_change", args=[chat.pk]) in live.text
    user.delete()

    listing = client.get(reverse("admin:django_llmchat_usage_changelist"))
    assert listing.status_code == 200 and "Old plans (deleted)" in listing.text
    found = client.get(reverse("admin:django_llmchat_usage_changelist") + "?q=Old+plans")
    assert "Old plans (deleted)" in found.text
    filtered = client.get(reverse("admin:django_llmchat_usage_changelist") + "?status=succeeded")
    assert filtered.status_code == 200 and "Old plans (deleted)" in filtered.text
    page = client.get(reverse("admin:django_llmchat_usage_change", args=[row.pk]))
    assert page.status_code == 200
    assert "Old plans (deleted)" in page.text and f"deleted user {row.user_id}" in page.text
    dashboard = client.get(reverse("admin:django_llmchat_usagedashboard_changelist"))
    assert dashboard.status_code == 200
    assert f"(deleted user {row.user_id})" in dashboard.text and "Old plans" in dashboard.text


def test_the_ledger_has_no_database_constraint_to_its_chat_or_user():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Usage._meta.db_table)
    foreign = {c["columns"][0]: c["foreign_key"] for c in constraints.values() if c["foreign_key"]}
    assert "chat_id" not in foreign and "user_id" not in foreign
    assert "message_id" in foreign and "run_id" in foreign  # SET_NULL, as before
