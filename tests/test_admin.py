import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_llmchat.models import Chat, Message
from tests.factories import build_transcript

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client


def _queries_for_chat_page(admin_client, turns):
    chat = Chat.objects.create(title=f"chat {turns}", model_id="gpt-4.1-mini", provider="openai")
    build_transcript(chat, turns)
    url = reverse("admin:django_llmchat_chat_change", args=[chat.pk])
    admin_client.get(url)  # warm per-process caches (content types, session)
    with CaptureQueriesContext(connection) as ctx:
        response = admin_client.get(url)
    assert response.status_code == 200
    return len(ctx), response.content.decode()


def test_chat_page_query_count_is_constant(admin_client):
    small, html = _queries_for_chat_page(admin_client, 3)  # 12 messages
    large, _ = _queries_for_chat_page(admin_client, 250)  # 1,000 messages
    assert small == large


def test_chat_list_columns_and_search(admin_client):
    chat = Chat.objects.create(title="weather chat", model_id="gpt-4.1-mini", provider="openai")
    build_transcript(chat, 2)
    other = Chat.objects.create(title="other", model_id="claude-haiku-4-5", provider="anthropic")
    Message.objects.create(chat=other, role="user", content="bonjour")
    url = reverse("admin:django_llmchat_chat_changelist")
    html = admin_client.get(url).content.decode()
    assert "weather chat" in html and "other" in html
    assert "520" in html  # 4 usage rows x 130 tokens
    html = admin_client.get(url, {"q": "bonjour"}).content.decode()
    assert "other" in html and "weather chat" not in html
    html = admin_client.get(url, {"provider": "anthropic"}).content.decode()
    assert "weather chat" not in html


def test_chat_list_query_count_is_constant(admin_client):
    url = reverse("admin:django_llmchat_chat_changelist")
    for i in range(3):
        build_transcript(Chat.objects.create(title=f"c{i}"), 1)
    admin_client.get(url)
    with CaptureQueriesContext(connection) as small:
        admin_client.get(url)
    for i in range(20):
        build_transcript(Chat.objects.create(title=f"d{i}"), 1)
    with CaptureQueriesContext(connection) as large:
        admin_client.get(url)
    assert len(small) == len(large)


def test_usage_and_model_admin_pages(admin_client):
    from django_llmchat.models import LLMModel

    chat = Chat.objects.create(title="x")
    build_transcript(chat, 1)
    LLMModel.objects.create(
        provider="openai",
        model_id="gpt-4.1",
        name="GPT-4.1",
        pricing={"input_mtok": "2", "output_mtok": "8"},
    )
    assert admin_client.get(reverse("admin:django_llmchat_usage_changelist")).status_code == 200
    html = admin_client.get(reverse("admin:django_llmchat_llmmodel_changelist")).content.decode()
    assert "$2/M" in html and "$8/M" in html


def test_a_lost_attempt_shows_its_estimate_as_an_estimate(admin_client):
    from decimal import Decimal

    from django_llmchat.models import Usage

    chat = Chat.objects.create(title="lost")
    Usage.objects.create(
        chat=chat,
        provider="openai",
        model_id="gpt-4.1-mini",
        status=Usage.LOST,
        estimated=True,
        input_tokens=1234,
        total_cost=Decimal("0.0004936"),
    )
    url = reverse("admin:django_llmchat_usage_changelist")
    html = admin_client.get(url).content.decode()
    assert "lost" in html and html.count("(estimated)") == 2
    filtered = admin_client.get(url, {"estimated__exact": "1"})
    assert filtered.status_code == 200 and "(estimated)" in filtered.content.decode()


def test_a_run_that_did_not_succeed_shows_where_it_stopped(admin_client):
    from django_llmchat.models import Run

    chat = Chat.objects.create(title="runs", model_id="gpt-4.1-mini", provider="openai")
    build_transcript(chat, 1)
    prompt = chat.add_message(role="user", content="And now?")
    Run.objects.create(
        chat=chat,
        prompt=prompt,
        status="failed",
        error_type="rate_limit",
        error="The provider is rate limiting requests; retry later.",
        attempt=1,
    )
    chat.add_message(role="user", content="Hello again")
    html = admin_client.get(reverse("admin:django_llmchat_chat_change", args=[chat.pk])).content
    html = html.decode()
    marker = html.index("The provider is rate limiting requests")
    assert html.index("And now?") < marker < html.index("Hello again")
    assert "llmchat-run-failed" in html and "rate_limit" in html
    listing = admin_client.get(reverse("admin:django_llmchat_run_changelist"))
    assert listing.status_code == 200 and "rate_limit" in listing.content.decode()
    page = admin_client.get(reverse("admin:django_llmchat_run_change", args=[chat.runs.get().pk]))
    assert page.status_code == 200


def test_usage_and_run_pages_are_read_only(admin_client):
    from django_llmchat.models import Run, Usage

    chat = Chat.objects.create(title="x", model_id="gpt-4.1-mini", provider="openai")
    build_transcript(chat, 1)
    usage = Usage.objects.filter(chat=chat).first()
    url = reverse("admin:django_llmchat_usage_change", args=[usage.pk])
    html = admin_client.get(url).content.decode()
    assert "gpt-4.1-mini" in html
    assert 'name="_save"' not in html and 'name="_continue"' not in html
    assert admin_client.post(url, {"status": "failed"}).status_code == 403
    usage.refresh_from_db()
    assert usage.status == "succeeded"
    run = Run.objects.create(chat=chat, status="failed", error="boom")
    html = admin_client.get(reverse("admin:django_llmchat_run_change", args=[run.pk])).content
    assert b'name="_save"' not in html
    # the list shows tokens and cost in their own short columns, with no bulk actions
    html = admin_client.get(reverse("admin:django_llmchat_usage_changelist")).content.decode()
    assert "$0.0001" in html and "10 / 0" in html and 'name="action"' not in html
