"""The admin's transcript (``admin/transcripts.py``): in order, in a constant number of
queries, paginated latest page first, a cut result and refused files shown."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_llmchat.models import Chat
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
