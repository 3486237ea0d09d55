"""Replies as HTML (``markdown.py``): sanitized Markdown."""

import pytest
from django.urls import reverse

from django_llmchat.models import Chat

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client


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
