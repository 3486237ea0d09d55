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


def test_chat_page_renders_transcript_in_order(admin_client):
    _, html = _queries_for_chat_page(admin_client, 2)
    assert "Transcript" in html
    # each tool call is followed by its result, before the next assistant answer
    first_call = html.index("call_0")
    assert first_call < html.index("sunny 0") < html.index("It is sunny (0).")
    assert html.index("question 0") < first_call < html.index("question 1")
    assert '<details class="llmchat-thinking"><summary>Thinking</summary>' in html
    assert "llmchat-badge-user" in html and "llmchat-badge-assistant" in html
    # the tool messages are shown beneath their calls, not again on their own
    assert html.count("sunny 0") == 1
    assert "8 messages" in html
    assert "doc.txt" in html
    assert "attempts:" not in html  # one attempt a reply: none listed (model fallbacks are)


def test_transcript_loading_query_count(django_assert_num_queries):
    from django_llmchat.admin import build_transcript as arrange

    counts = []
    for turns in (3, 125):  # 12 and 500 messages
        chat = Chat.objects.create(model_id="gpt-4.1-mini", provider="openai")
        build_transcript(chat, turns)
        with CaptureQueriesContext(connection) as ctx:
            data = arrange(chat)
            for entry in data["entries"]:
                entry["message"].to_dict()
                _ = entry["message"].tool_call_id
        counts.append(len(ctx))
        assert data["message_count"] == turns * 4
    assert counts[0] == counts[1]


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


def test_llm_model_form_edits_prices_and_capabilities_as_fields(admin_client):
    from django_llmchat.models import LLMModel

    model = LLMModel.objects.create(
        provider="openai",
        model_id="gpt-x",
        name="GPT X",
        capabilities=["streaming", "custom_flag"],
        modalities={"input": ["text"], "output": ["text"]},
        pricing={
            "input_mtok": {"base": "1.25", "tiers": [{"start": 200000, "price": "2.5"}]},
            "output_mtok": "10",
            "web_searches_kcount": "25",
        },
    )
    url = reverse("admin:django_llmchat_llmmodel_change", args=[model.pk])
    html = admin_client.get(url).content.decode()
    assert 'type="checkbox" name="capabilities" value="tools"' in html
    assert 'value="custom_flag"' in html  # a stored value the choices do not list is kept
    assert 'name="output_mtok"' in html and 'value="10"' in html
    assert "$2.5 above 200,000 prompt tokens" in html
    assert '<textarea name="pricing"' not in html and '<textarea name="capabilities"' not in html
    response = admin_client.post(
        url,
        {
            "provider": "openai",
            "model_id": "gpt-x",
            "name": "GPT X",
            "family": "",
            "context_window": "1000",
            "max_output_tokens": "",
            "capabilities": ["streaming", "tools", "custom_flag"],
            "input_modalities": ["text", "image"],
            "output_modalities": ["text"],
            "output_mtok": "12.50",
            "cache_read_mtok": "0.3",
            "cache_write_mtok": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    model.refresh_from_db()
    assert model.capabilities == ["streaming", "tools", "custom_flag"]
    assert model.modalities == {"input": ["text", "image"], "output": ["text"]}
    assert model.pricing == {
        "input_mtok": {"base": "1.25", "tiers": [{"start": 200000, "price": "2.5"}]},
        "output_mtok": "12.5",
        "cache_read_mtok": "0.3",
        "web_searches_kcount": "25",
    }
    bad = admin_client.post(url, {"provider": "openai", "model_id": "gpt-x", "name": "X",
                                  "output_mtok": "-1"})  # fmt: skip
    assert bad.status_code == 200
    assert "Ensure this value is greater than or equal to 0." in bad.content.decode()


def test_a_long_transcript_is_paginated_with_the_latest_page_first(admin_client):
    chat = Chat.objects.create(title="long", model_id="gpt-4.1-mini", provider="openai")
    build_transcript(chat, 100, with_attachments=False)  # 400 messages, 300 entries
    url = reverse("admin:django_llmchat_chat_change", args=[chat.pk])
    html = admin_client.get(url).content.decode()
    # (the builder writes the questions first, then the answers)
    assert "It is sunny (99)." in html and "question 0" not in html
    assert "Latest message" in html and "?transcript_page=2" in html
    assert '<fieldset class="module aligned collapse' in html  # the settings, collapsed
    first = admin_client.get(url, {"transcript_page": "1"}).content.decode()
    assert "question 0" in first and "It is sunny (99)." not in first
    junk = admin_client.get(url, {"transcript_page": "x"}).content.decode()
    assert "It is sunny (99)." in junk  # a bad page number shows the latest


def test_replies_render_as_sanitized_markdown(admin_client):
    chat = Chat.objects.create(title="md", model_id="gpt-4.1-mini", provider="openai")
    chat.add_message(role="user", content="**not markdown** from the user")
    chat.add_message(
        role="assistant",
        content=(
            "**bold** and a [link](https://example.com)\n\n"
            "| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\nprint('x')\n```\n\n"
            '<script>alert(1)</script> <img src=x onerror="alert(2)"> '
            "[click](javascript:alert(3))"
        ),
    )
    html = admin_client.get(reverse("admin:django_llmchat_chat_change", args=[chat.pk]))
    html = html.content.decode()
    assert "<strong>bold</strong>" in html
    assert "<table>" in html and "<td>1</td>" in html
    assert '<code class="language-python">print(&#x27;x&#x27;)' in html or (
        "<code class=\"language-python\">print('x')" in html
    )
    assert '<a href="https://example.com" rel="noopener noreferrer nofollow">link</a>' in html
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    assert "<img" not in html.split('id="transcript"')[1]
    assert 'href="javascript:' not in html
    assert "**not markdown** from the user" in html  # user text shown as typed


@pytest.mark.django_db(transaction=True)
def test_a_cut_result_and_refused_files_are_shown_on_the_chat_page(admin_client, fake_llm):
    from django_llmchat.testing import Reply
    from django_llmchat.testing import ToolCall as Call
    from django_llmchat.tools import ToolResult, tool

    @tool(name="admin_page")
    def page() -> ToolResult:
        """Returns a long page"""
        return ToolResult("y" * 50, attachments=[("evil.html", b"<html><b>hi</b></html>")])

    fake_llm.configure("openai", "gpt-4.1-mini", TOOL_RESULT_MAX_CHARS=20)
    fake_llm.script(Reply(tool_calls=[Call("admin_page")]), Reply("Done."))
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini").with_tools(page)
    chat.ask("fetch it")
    html = admin_client.get(reverse("admin:django_llmchat_chat_change", args=[chat.pk]))
    html = html.content.decode()
    # beside the result's text (which carries the marker for the model), from the row
    assert 'llmchat-truncated">truncated: 50 characters, 20 kept</span>' in html
    assert 'llmchat-refused">file evil.html refused: type text/html is not allowed' in html
