"""The admin's usage dashboard: its figures, its constant number of queries, its range."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_llmchat.chats.dashboard import usage_summary
from django_llmchat.models import Chat, Feedback, Usage

pytestmark = pytest.mark.django_db

URL = "admin:django_llmchat_usagedashboard_changelist"


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client


def make_usage(n: int, *, days: int = 30) -> None:
    """``n`` usage rows over ``days`` days, two users, three models, every tenth failed.

    At most 3,000 rows are built with bulk_create (then moved back to their days, as
    auto_now_add stamps now); more are copies of those, made in the database by
    ``INSERT ... SELECT`` (100,000 Python objects would take most of a minute)."""
    from django.contrib.auth import get_user_model

    base = Usage.objects.count()
    users = [get_user_model().objects.create_user(f"user{i}-{base}") for i in range(2)]
    chats = [
        Chat.objects.create(title=f"chat {i}", user=users[i % 2], provider="openai")
        for i in range(4)
    ]
    models = [("openai", "gpt-4.1-mini"), ("anthropic", "claude-haiku-4-5"), ("demo", "x")]
    built = min(n, 3000)
    per_day = -(-built // days)
    now = timezone.now()
    made = 0
    first_pk = None
    for day in range(days):
        count = min(per_day, built - made)
        if count <= 0:
            break
        rows = []
        for i in range(made, made + count):
            provider, model_id = models[i % 3]
            rows.append(
                Usage(
                    chat=chats[i % 4],
                    provider=provider,
                    model_id=model_id,
                    status="failed" if i % 10 == 0 else "succeeded",
                    input_tokens=100,
                    output_tokens=10,
                    cache_read_tokens=50,
                    cache_read_cost=Decimal("0.000005"),
                    total_cost=Decimal("0.0001"),
                )
            )
        created = Usage.objects.bulk_create(rows, batch_size=1000)
        first_pk = first_pk or created[0].pk
        Usage.objects.filter(pk__gte=created[0].pk, pk__lte=created[-1].pk).update(
            created_at=now - timedelta(days=day)
        )
        made += count
    last_pk = Usage.objects.order_by("-pk").values_list("pk", flat=True).first()
    columns = ", ".join(
        f.column for f in Usage._meta.concrete_fields if not f.primary_key
    )  # fmt: skip
    table = Usage._meta.db_table
    with connection.cursor() as cursor:
        while made < n:
            take = min(built, n - made)
            cursor.execute(
                f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {table} "
                f"WHERE id >= %s AND id <= %s ORDER BY id LIMIT %s",
                [first_pk, last_pk, take],
            )
            made += take


def dashboard_queries(admin_client, **params) -> tuple[int, str]:
    admin_client.get(reverse(URL), params)  # warm the per-process caches
    with CaptureQueriesContext(connection) as ctx:
        response = admin_client.get(reverse(URL), params)
    assert response.status_code == 200
    return len(ctx), response.content.decode()


def test_the_query_count_is_the_same_for_100_and_100000_rows(admin_client):
    make_usage(100)
    small, html = dashboard_queries(admin_client)
    assert "chart-spend" in html and "llmchat-dashboard-data" in html
    make_usage(99_900)
    assert Usage.objects.count() == 100_000
    large, html = dashboard_queries(admin_client)
    assert small == large
    assert "100,000" in html  # the attempts card


def test_the_top_users_and_chats_read_names_for_the_top_rows_alone():
    """The users' and chats' queries join no table: a name is a subquery PostgreSQL runs
    for the ``top`` rows after the sort, so their time follows the rows of the range, not
    the size of the chat and user tables (a join hashed every chat: see the Scale figures
    of docs/benchmarks.md)."""
    make_usage(300)
    for chat in Chat.objects.all():  # the rows of each chat are its user's
        Usage.objects.filter(chat=chat).update(user_id=chat.user_id)
    today = timezone.localdate()
    with CaptureQueriesContext(connection) as ctx:
        summary = usage_summary(today - timedelta(days=29), today, "day", top=3)
    user_sql, chat_sql = ctx.captured_queries[2]["sql"], ctx.captured_queries[3]["sql"]
    for sql, table in ((user_sql, "auth_user"), (chat_sql, Chat._meta.db_table)):
        assert table in sql and "JOIN" not in sql.upper(), sql
    assert {r["username"] for r in summary.by_user} == {
        u.username for u in get_user_model().objects.all()
    }
    assert len(summary.top_chats) == 3
    assert {c["title"] for c in summary.top_chats} <= {f"chat {i}" for i in range(4)}
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + chat_sql)
            plan = cursor.fetchone()[0][0]["Plan"]

        def subplans(node):
            if node.get("Parent Relationship") == "SubPlan":
                yield node
            for child in node.get("Plans", []):
                yield from subplans(child)

        # the title subquery ran once per listed chat, after the LIMIT
        assert [node["Actual Loops"] for node in subplans(plan)] == [3]


def test_usage_summary_runs_five_queries_and_adds_up():
    make_usage(300)
    today = timezone.localdate()
    with CaptureQueriesContext(connection) as ctx:
        summary = usage_summary(today - timedelta(days=29), today, "day")
    assert len(ctx) == 5
    totals = summary.totals
    assert totals["attempts"] == 300 and totals["failed"] == 30
    assert totals["cost"] == Decimal("0.0300")
    assert totals["tokens"] == 300 * 160
    assert len(summary.series) == 30
    assert sum(row["attempts"] for row in summary.series) == 300
    assert sum(row["cost"] for row in summary.series) == totals["cost"]
    assert {r["provider"] for r in summary.by_provider} == {"openai", "anthropic", "demo"}
    assert {r["status"]: r["attempts"] for r in summary.by_status} == {
        "succeeded": 270,
        "failed": 30,
        "cancelled": 0,
    }
    assert sum(r["attempts"] for r in summary.by_user) == 300
    assert summary.top_chats[0]["cost"] >= summary.top_chats[-1]["cost"]
    # cache savings: 50 cached tokens a row at the model's input price, less what they cost
    [mini] = [r for r in summary.by_model if r["model_id"] == "gpt-4.1-mini"]
    assert (
        mini["cache_savings"]
        == mini["cache_read_tokens"] * Decimal("0.4") / 1_000_000 - (mini["cache_read_cost"])
    )
    [unknown] = [r for r in summary.by_model if r["model_id"] == "x"]
    assert unknown["cache_savings"] == 0  # no input price known: nothing claimed


def test_ratings_by_model(admin_client, django_user_model):
    """Thumbs given in the range, counted by the model of the rated reply; a rating given
    before the range is not counted, and the page shows the table."""
    users = [django_user_model.objects.create_user(f"rater{i}") for i in range(3)]
    chat = Chat.objects.create(user=users[0], provider="openai", model_id="gpt-4.1-mini")
    mini = chat.messages.create(
        role="assistant", content="A", provider="openai", model_id="gpt-4.1-mini"
    )
    haiku = chat.messages.create(
        role="assistant", content="B", provider="anthropic", model_id="claude-haiku-4-5"
    )
    for user in users:
        mini.rate(1, user=user)
    haiku.rate(-1, user=users[0])
    haiku.rate(1, user=users[1])
    old = haiku.rate(-1, user=users[2])
    Feedback.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=90))
    today = timezone.localdate()
    summary = usage_summary(today - timedelta(days=29), today)
    assert summary.ratings == [
        {
            "provider": "openai",
            "model_id": "gpt-4.1-mini",
            "up": 3,
            "down": 0,
            "rated": 3,
            "share_up": 1.0,
        },
        {
            "provider": "anthropic",
            "model_id": "claude-haiku-4-5",
            "up": 1,
            "down": 1,
            "rated": 2,
            "share_up": 0.5,
        },
    ]
    _, html = dashboard_queries(admin_client)
    assert 'id="ratings-by-model"' in html and "claude-haiku-4-5" in html and "50%" in html


def test_weeks_and_months_cover_the_range():
    make_usage(60, days=60)
    today = timezone.localdate()
    weeks = usage_summary(today - timedelta(days=59), today, "week")
    assert weeks.series[0]["start"].weekday() == 0
    assert sum(r["attempts"] for r in weeks.series) == 60
    months = usage_summary(today - timedelta(days=59), today, "month")
    assert all(r["start"].day == 1 for r in months.series)
    assert sum(r["attempts"] for r in months.series) == 60
    with pytest.raises(ValueError, match="period must be one of day, week, month"):
        usage_summary(today, today, "hour")


def test_the_date_range_filters_rows(admin_client):
    make_usage(30)
    today = timezone.localdate()
    _, html = dashboard_queries(admin_client, start=str(today), end=str(today))
    assert f'value="{today}"' in html
    summary = usage_summary(today, today)
    assert summary.totals["attempts"] == 1
    assert len(summary.series) == 1


def test_a_bad_range_is_a_400_naming_the_field(admin_client):
    response = admin_client.get(reverse(URL), {"start": "2026-05-02", "end": "2026-05-01"})
    assert response.status_code == 400
    assert "The start date is after the end date." in response.content.decode()
    response = admin_client.get(reverse(URL), {"start": "yesterday"})
    assert response.status_code == 400
    assert "Enter a valid date." in response.content.decode()


def test_the_dashboard_is_linked_and_needs_the_view_permission(
    admin_client, client, django_user_model
):
    index = admin_client.get(reverse("admin:index")).content.decode()
    assert reverse(URL) in index
    usage_list = admin_client.get(reverse("admin:django_llmchat_usage_changelist")).content
    assert reverse(URL) in usage_list.decode()
    staff = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get(reverse(URL)).status_code == 403
    from django.contrib.auth.models import Permission

    staff.user_permissions.add(Permission.objects.get(codename="view_usage"))
    assert client.get(reverse(URL)).status_code == 200


def test_charts_come_from_local_static_files(admin_client):
    from django.contrib.staticfiles import finders

    _, html = dashboard_queries(admin_client)
    assert "django_llmchat/vendor/chart.umd.min.js" in html
    assert "cdn" not in html.lower()
    assert finders.find("django_llmchat/vendor/chart.umd.min.js")
    assert finders.find("django_llmchat/vendor/chart.js.LICENSE.md")
