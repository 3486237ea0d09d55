"""Feedback on replies: ``Message.rate()`` / ``unrate()`` / ``feedback_of()``, the table's
rules, the admin, and what the data lifecycle does with it."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from django_llmchat.chats.lifecycle import anonymise_chats, erase_user, export_user
from django_llmchat.errors import ArgumentError
from django_llmchat.models import Chat, Feedback, Usage

pytestmark = pytest.mark.django_db


@pytest.fixture
def ann(django_user_model):
    return django_user_model.objects.create_user("ann")


@pytest.fixture
def reply(ann):
    chat = Chat.objects.create(user=ann, title="Trip", provider="openai", model_id="m")
    chat.add_message(role="user", content="Capital of France?")
    return chat.add_message(role="assistant", content="Paris.")


def test_rate_once_per_user_a_repeat_updates(reply, ann, django_user_model):
    row = reply.rate(1, comment="  spot on  ", user=ann)
    assert (row.rating, row.comment, row.user_id, row.is_positive) == (1, "spot on", ann.pk, True)
    again = reply.rate(-1, user=ann)
    assert again.pk == row.pk and (again.rating, again.comment) == (-1, "")
    assert again.updated_at >= row.updated_at and again.is_negative
    bob = django_user_model.objects.create_user("bob")
    reply.rate(1, user=bob)
    assert reply.feedback.count() == 2
    assert reply.feedback_of(ann).rating == -1 and reply.feedback_of(bob).rating == 1
    assert reply.feedback_of() is None
    anonymous = reply.rate(1)  # no user: one too
    assert reply.rate(-1).pk == anonymous.pk and reply.feedback_of().rating == -1
    assert reply.unrate(user=ann) is True and reply.unrate(user=ann) is False
    assert reply.feedback_of(ann) is None and reply.feedback.count() == 2


@pytest.mark.parametrize(
    "rating, comment, field",
    [
        (0, "", "rating"),
        (2, "", "rating"),
        (True, "", "rating"),
        ("1", "", "rating"),
        (1.0, "", "rating"),
        (1, 42, "comment"),
        (1, "x" * (Feedback.COMMENT_MAX_LENGTH + 1), "comment"),
        (1, "nul\x00", "comment"),
    ],
)
def test_bad_ratings_and_comments_are_refused(reply, rating, comment, field):
    with pytest.raises(ArgumentError) as caught:
        reply.rate(rating, comment=comment)
    assert caught.value.field == field and str(caught.value).startswith(field)
    assert not Feedback.objects.exists()


def test_only_stored_assistant_replies_take_feedback(reply):
    prompt = reply.chat.messages.get(role="user")
    with pytest.raises(ArgumentError, match="must be an assistant reply, not a user message"):
        prompt.rate(1)
    with pytest.raises(ArgumentError, match="stored"):
        type(reply)(chat=reply.chat, role="assistant", content="unsaved").rate(1)
    assert reply.rate(1, comment="x" * Feedback.COMMENT_MAX_LENGTH).comment.startswith("x")


def test_the_table_holds_its_rules(reply, ann):
    Feedback.objects.create(message=reply, user=ann, rating=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Feedback.objects.create(message=reply, user=ann, rating=-1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Feedback.objects.create(message=reply, rating=5)


def test_feedback_goes_with_its_message(reply, ann):
    reply.rate(1, user=ann)
    reply.chat.delete()
    assert not Feedback.objects.exists()


def test_the_admin_shows_feedback_and_filters_by_rating(admin_client, reply, ann):
    reply.rate(-1, comment="Too short", user=ann)
    chat = reply.chat
    other = Chat.objects.create(title="Unrated", provider="openai", model_id="m")
    html = admin_client.get(reverse("admin:django_llmchat_chat_change", args=[chat.pk]))
    html = html.content.decode()
    assert "llmchat-feedback-down" in html and "Too short" in html and "ann" in html

    changelist = reverse("admin:django_llmchat_chat_changelist")
    down = admin_client.get(changelist, {"feedback": "-1"}).content.decode()
    assert "Trip" in down and "Unrated" not in down
    assert "Trip" not in admin_client.get(changelist, {"feedback": "1"}).content.decode()
    assert "Unrated" in admin_client.get(changelist).content.decode() and other.pk

    feedback_list = reverse("admin:django_llmchat_feedback_changelist")
    Usage.objects.create(
        chat=chat,
        message=reply,
        provider="openai",
        model_id="gpt-4.1-mini",
        total_cost=Decimal("0.0025"),
    )
    type(reply).objects.filter(pk=reply.pk).update(provider="openai", model_id="gpt-4.1-mini")
    page = admin_client.get(feedback_list, {"rating": "-1"}).content.decode()
    assert "Too short" in page and f"#message-{reply.pk}" in page
    assert "$0.002500" in page and "openai/gpt-4.1-mini" in page  # the reply's usage
    assert (
        "Too short"
        in admin_client.get(feedback_list, {"message__model_id": "gpt-4.1-mini"}).content.decode()
    )
    assert "Too short" not in admin_client.get(feedback_list, {"rating": "1"}).content.decode()
    row = Feedback.objects.get()
    detail = admin_client.get(reverse("admin:django_llmchat_feedback_change", args=[row.pk]))
    assert detail.status_code == 200 and b"Too short" in detail.content


MARKDOWN = (
    "Here is **the summary**:\n\n| city | temp |\n|---|--:|\n| Oslo | 4 |\n\n<script>x()</script>"
)


def test_the_feedback_admin_renders_the_reply_as_markdown(admin_client, reply, ann):
    type(reply).objects.filter(pk=reply.pk).update(content=MARKDOWN)
    reply.rate(1, comment="Clear", user=ann)
    page = admin_client.get(reverse("admin:django_llmchat_feedback_changelist"))
    page = page.content.decode()
    # the list: the reply's words, not its markers
    assert "Here is the summary:" in page and "**the summary**" not in page
    assert "<script>x()" not in page
    detail = admin_client.get(
        reverse("admin:django_llmchat_feedback_change", args=[Feedback.objects.get().pk])
    )
    html = detail.content.decode()
    assert '<div class="llmchat-content llmchat-markdown">' in html
    assert "<strong>the summary</strong>" in html and "<td>Oslo</td>" in html
    assert "**the summary**" not in html  # nowhere on the page as its raw text
    assert f"#message-{reply.pk}" in html  # the reply in its chat, a click away
    # sanitized as on the chat's page: the script is text, never a tag
    assert "<script>x()" not in html and "&lt;script&gt;x()" in html


def test_the_transcript_query_count_does_not_grow_with_feedback(django_assert_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_llmchat.admin import build_transcript

    counts = []
    for turns in (2, 30):
        chat = Chat.objects.create(provider="openai", model_id="m")
        for i in range(turns):
            chat.add_message(role="user", content=f"q{i}")
            chat.add_message(role="assistant", content=f"a{i}").rate(1)
        with CaptureQueriesContext(connection) as ctx:
            data = build_transcript(chat)
        counts.append(len(ctx))
        assert sum(len(e.get("feedback", ())) for e in data["entries"]) == turns
    assert counts[0] == counts[1]


def test_anonymise_keeps_ratings_without_words_or_users(reply, ann, django_user_model):
    bob = django_user_model.objects.create_user("bob", is_staff=True)
    reply.rate(1, comment="mine", user=ann)
    reply.rate(-1, comment="staff", user=bob)
    anonymise_chats(Chat.objects.filter(pk=reply.chat_id))
    rows = list(Feedback.objects.order_by("rating").values_list("rating", "comment", "user_id"))
    assert rows == [(-1, "", None), (1, "", None)]
    assert reply.rate(1).pk == min(Feedback.objects.values_list("pk", flat=True))


def test_export_and_erase_of_a_user_take_their_feedback(reply, ann, django_user_model):
    staff = django_user_model.objects.create_user("staff", is_staff=True)
    reply.rate(1, comment="great", user=ann)
    reply.rate(-1, comment="said staff", user=staff)
    entry = export_user(ann)["users"][0]
    assert [(f["rating"], f["comment"], f["chat_id"]) for f in entry["feedback"]] == [
        (1, "great", reply.chat_id)
    ]
    erase_user(staff)  # no chat of theirs: their feedback on ann's chat goes
    assert list(Feedback.objects.values_list("user_id", flat=True)) == [ann.pk]
