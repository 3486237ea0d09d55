"""The admin's spending limits: each user's use against the limit in effect."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_llmchat.models import Chat, Limit, Usage

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client


def a_user_who_spent(django_user_model, name: str, usd: str) -> Limit:
    user = django_user_model.objects.create_user(name)
    chat = Chat.objects.create(user=user)
    Usage.objects.create(chat=chat, status="succeeded", total_cost=Decimal(usd), input_tokens=50)
    return Limit.objects.create(user=user, usd_per_month=Decimal("10"))


def test_the_list_shows_spend_against_the_limit(admin_client, django_user_model, settings):
    settings.LLMCHAT = {"LIMITS": {"default": {"usd_per_day": "2.00", "concurrent_runs": 2}}}
    a_user_who_spent(django_user_model, "alice", "0.5")
    url = reverse("admin:django_llmchat_limit_changelist")
    admin_client.get(url)
    with CaptureQueriesContext(connection) as few:
        html = admin_client.get(url).content.decode()
    assert "alice" in html
    assert "$0.5000 of $2.00 (25%)" in html
    assert "$0.5000 of $10.00 (5%)" in html  # the row's own monthly limit
    assert "50 (no limit)" in html  # tokens today, no token limit
    assert "0 of 2 (0%)" in html  # open runs
    for i in range(5):
        a_user_who_spent(django_user_model, f"user{i}", "1")
    with CaptureQueriesContext(connection) as many:
        admin_client.get(url)
    assert len(few) == len(many)  # the use comes with the rows


def test_the_form_shows_the_limits_in_effect(admin_client, django_user_model, settings):
    settings.LLMCHAT = {"LIMITS": {"default": {"usd_per_day": "2.00"}}}
    row = a_user_who_spent(django_user_model, "bob", "3")
    response = admin_client.get(reverse("admin:django_llmchat_limit_change", args=[row.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    assert "usd_per_day: 2.00, usd_per_month: 10" in html
    row.unlimited = True
    row.save()
    html = admin_client.get(
        reverse("admin:django_llmchat_limit_change", args=[row.pk])
    ).content.decode()
    assert "no limit" in html
    assert admin_client.get(reverse("admin:django_llmchat_limit_add")).status_code == 200
