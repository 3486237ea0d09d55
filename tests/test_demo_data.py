"""``manage.py llmchat_demo_data``: a month of labelled sample usage for the dashboard."""

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F
from django.utils import timezone

from django_llmchat.chats.dashboard import usage_summary
from django_llmchat.models import Chat, Usage

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("llmchat_demo_data", *args, stdout=out)
    return out.getvalue()


def test_writes_a_month_of_labelled_priced_usage(django_user_model):
    real = Chat.objects.create(title="A real chat")
    Usage.objects.create(chat=real, provider="openai", model_id="gpt-4.1-mini")
    output = run("--per-day", "10")
    assert "sample usage rows over 30 days" in output
    sample = Usage.objects.filter(operation="sample")
    count = sample.count()
    assert count > 200
    assert f"Wrote {count} " in output
    assert sample.exclude(chat__title__startswith="Sample: ").count() == 0
    assert set(sample.values_list("chat__user__username", flat=True)) == {
        "sample-ada",
        "sample-ben",
        "sample-chloe",
    }
    assert not django_user_model.objects.get(username="sample-ada").has_usable_password()
    assert sample.filter(status="failed").exists()
    assert sample.filter(total_cost__isnull=True).count() == 0  # every model is priced
    assert sample.filter(model_id="demo-model").exclude(total_cost=0).exists()
    today = timezone.localdate()
    summary = usage_summary(today - timedelta(days=29), today)
    assert all(row["attempts"] for row in summary.series)  # a row every day
    assert summary.totals["cache_savings"] > 0
    # each row is its chat's user's, on the ledger's own column: "By user" names them
    assert sample.exclude(user_id=F("chat__user_id")).count() == 0
    assert sample.filter(user__isnull=True).count() == 0
    by_user = {row["username"]: row["attempts"] for row in summary.by_user}
    # the real chat's row has no user; every sample row has one
    assert by_user.pop(None) == 1
    assert set(by_user) == {"sample-ada", "sample-ben", "sample-chloe"}
    assert sum(by_user.values()) == count

    # again: replaced, not added to; --clear removes it all, and only it
    run("--per-day", "10", "--seed", "3")
    assert 200 < Usage.objects.filter(operation="sample").count() < 2 * count
    assert Chat.objects.filter(title__startswith="Sample: ").count() == 12
    assert "Removed" in run("--clear")
    assert not Usage.objects.filter(operation="sample").exists()
    assert list(Chat.objects.all()) == [real]
    assert Usage.objects.count() == 1


def test_bad_options_are_refused():
    with pytest.raises(CommandError, match="--days must be between 1 and 366"):
        run("--days", "0")
    with pytest.raises(CommandError, match="--per-day must be between 1 and 10000"):
        run("--per-day", "0")
