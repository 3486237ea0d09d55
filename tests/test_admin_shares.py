"""The admin's share links: listed with their chats, a share's page shows its snapshot,
the "revoke" action ends the selected links (and only them)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_llmchat.chats import shares
from django_llmchat.models import Chat, ChatShare

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client


@pytest.fixture
def shared(django_user_model):
    user = django_user_model.objects.create_user("shares-owner")
    chat = Chat.objects.create(user=user, title="Holiday plans")
    chat.add_message("user", "Where to **go**?")
    chat.add_message("assistant", "Try <b>Lisbon</b>.")
    first, token1 = shares.share_chat(chat)
    second, token2 = shares.share_chat(chat, ["thinking"])
    return chat, (first, token1), (second, token2)


def test_the_list_shows_each_share_with_its_chat(admin_client, shared):
    chat, (first, token1), _ = shared
    page = admin_client.get(reverse("admin:django_llmchat_chatshare_changelist"))
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count("Holiday plans") >= 2 and "thinking" in html
    assert reverse("admin:django_llmchat_chat_change", args=[chat.pk]) in html
    assert token1 not in html  # a link cannot be shown: only its hash is stored


def test_a_share_page_shows_the_snapshot_read_only(admin_client, shared):
    _, (first, _), _ = shared
    page = admin_client.get(reverse("admin:django_llmchat_chatshare_change", args=[first.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert "<strong>go</strong>" in html and "&lt;b&gt;Lisbon&lt;/b&gt;" in html
    assert 'name="_save"' not in html
    assert admin_client.get(reverse("admin:django_llmchat_chatshare_add")).status_code == 403


def test_the_revoke_action_ends_the_selected_links(admin_client, shared):
    _, (first, token1), (second, token2) = shared
    response = admin_client.post(
        reverse("admin:django_llmchat_chatshare_changelist"),
        {"action": "revoke", "_selected_action": [first.pk]},
        follow=True,
    )
    assert response.status_code == 200 and "1 share link(s) revoked" in response.content.decode()
    assert shares.find_share(token1) is None and shares.find_share(token2) is not None
    assert list(ChatShare.objects.values_list("pk", flat=True)) == [second.pk]
