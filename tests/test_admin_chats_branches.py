"""The admin transcript of a chat that branches: the active path, "2 of 3" where it
branches with buttons switching the branch, the switch itself, and its refusals."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_llmchat.models import Chat, Message, Run
from tests import test_admin

pytestmark = pytest.mark.django_db
admin_client = test_admin.admin_client  # a superuser's client (the fixture)


def branched_chat() -> tuple[Chat, list[Message]]:
    """France? Paris. | (the reply regenerated twice: Paris! and Lyon?)."""
    chat = Chat.objects.create(title="Trip", provider="openai", model_id="gpt-4.1-mini")
    prompt = chat.add_message(role="user", content="Capital of France?")
    replies = [chat.add_message(role="assistant", content="Paris.")]
    for text in ("Paris!", "Lyon?"):
        Message.objects.filter(pk__in=[r.pk for r in replies]).update(on_path=False)
        reply = Message(chat=chat, role="assistant", content=text, parent=prompt)
        reply.placed = True
        reply.save()
        replies.append(reply)
    return chat, replies


def change_url(chat):
    return reverse("admin:django_llmchat_chat_change", args=[chat.pk])


def switch_url(chat):
    return reverse("admin:django_llmchat_chat_switch", args=[chat.pk])


def test_the_transcript_shows_the_active_path_and_where_it_branches(admin_client):
    chat, (paris, bang, lyon) = branched_chat()
    html = admin_client.get(change_url(chat)).content.decode()
    assert "Lyon?" in html and "Paris!" not in html and "Paris." not in html
    assert "3 of 3" in html
    assert f'value="{bang.pk}" aria-label="switch to the previous alternative"' in html
    assert 'aria-label="switch to the next alternative" disabled' in html
    assert "2 more messages in other branches" in html
    assert f'<form id="llmchat-switch" method="post" action="{switch_url(chat)}">' in html


def test_switching_from_the_admin(admin_client):
    chat, (paris, bang, lyon) = branched_chat()
    response = admin_client.post(switch_url(chat), {"switch_to": paris.pk})
    assert response.status_code == 302
    assert response["Location"].endswith(f"?message={paris.pk}#message-{paris.pk}")
    assert [m.content for m in chat.transcript()] == ["Capital of France?", "Paris."]
    html = admin_client.get(response["Location"]).content.decode()
    assert "1 of 3" in html and "Switched to another branch." in html


def test_switch_refusals_are_messages_not_errors(admin_client):
    chat, (paris, bang, lyon) = branched_chat()
    other = Chat.objects.create(title="Other")
    stranger = other.add_message(role="user", content="hi")
    for target in (stranger.pk, "x", ""):
        response = admin_client.post(switch_url(chat), {"switch_to": target}, follow=True)
        assert response.status_code == 200
        assert "Cannot switch" in response.content.decode()
    Run.objects.create(chat=chat, status=Run.RUNNING)
    response = admin_client.post(switch_url(chat), {"switch_to": paris.pk}, follow=True)
    assert "has a run in progress" in response.content.decode()
    assert [m.content for m in chat.transcript()][-1] == "Lyon?"
    assert admin_client.get(switch_url(chat)).status_code == 405
    missing = reverse("admin:django_llmchat_chat_switch", args=[999999])
    assert admin_client.post(missing, {"switch_to": paris.pk}).status_code == 302


def test_a_user_who_may_only_view_sees_no_buttons_and_cannot_switch(client, django_user_model):
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_chat"))
    client.force_login(viewer)
    chat, (paris, bang, lyon) = branched_chat()
    html = client.get(change_url(chat)).content.decode()
    assert (
        "3 of 3" in html
        and "llmchat-switch" not in html.split("</style>")[-1].split("Transcript")[-1]
    )
    assert client.post(switch_url(chat), {"switch_to": paris.pk}).status_code == 403


def test_the_page_of_a_branched_chat_costs_constant_queries(admin_client):
    from tests.factories import build_transcript

    def queries(turns):
        chat = Chat.objects.create(title=f"chat {turns}", provider="openai", model_id="m")
        build_transcript(chat, turns)
        last = chat.messages.filter(role="assistant").order_by("-position").first()
        Message.objects.filter(pk=last.pk).update(on_path=False)
        again = Message(chat=chat, role="assistant", content="again", parent_id=last.parent_id)
        again.placed = True
        again.save()
        admin_client.get(change_url(chat))
        with CaptureQueriesContext(connection) as ctx:
            assert admin_client.get(change_url(chat)).status_code == 200
        return len(ctx)

    assert queries(3) == queries(120)
