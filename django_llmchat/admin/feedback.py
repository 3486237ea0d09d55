"""Feedback on replies: every rating with its comment, the rated reply's model and what it
cost (its usage rows), and the chat list's filter."""

from __future__ import annotations

from html import unescape

from django.contrib import admin
from django.db.models import Exists, OuterRef, Sum
from django.urls import reverse
from django.utils.html import format_html, strip_tags

from ..chats.markdown import render_markdown
from ..models import Feedback
from .base import _short, _Styled, _ViewOnly


class FeedbackFilter(admin.SimpleListFilter):
    """Chats by the ratings of their replies."""

    title = "feedback"
    parameter_name = "feedback"

    def lookups(self, request, model_admin):
        return (("1", "a reply rated 👍"), ("-1", "a reply rated 👎"), ("any", "any rated reply"))

    def queryset(self, request, queryset):
        rated = Feedback.objects.filter(message__chat=OuterRef("pk"))
        if self.value() in ("1", "-1"):
            return queryset.filter(Exists(rated.filter(rating=int(self.value()))))
        if self.value() == "any":
            return queryset.filter(Exists(rated))
        return queryset


@admin.register(Feedback)
class FeedbackAdmin(_ViewOnly, _Styled, admin.ModelAdmin):
    """Every rating of a reply, with its comment, the reply's model and its cost (the sum of
    its usage rows): filter by rating or model, open the chat at the reply. Read-only:
    feedback is the users' (``Message.rate()``, the REST route)."""

    list_display = (
        "thumb",
        "comment_short",
        "reply",
        "reply_model",
        "reply_cost",
        "chat_link",
        "user",
        "updated_at",
    )
    list_filter = ("rating", "message__model_id", ("updated_at", admin.DateFieldListFilter))
    search_fields = ("comment", "message__chat__title")
    list_select_related = ("user", "message", "message__chat")
    date_hierarchy = "updated_at"
    ordering = ("-updated_at", "-id")

    def get_queryset(self, request):
        # the reply's cost in the list's own statement (no query per row)
        return super().get_queryset(request).annotate(cost=Sum("message__usages__total_cost"))

    @admin.display(description="model", ordering="message__model_id")
    def reply_model(self, obj: Feedback) -> str:
        message = obj.message
        return f"{message.provider}/{message.model_id}" if message.provider else message.model_id

    @admin.display(description="cost", ordering="cost")
    def reply_cost(self, obj: Feedback) -> str:
        cost = getattr(obj, "cost", None)
        return "—" if cost is None else f"${cost:.6f}"

    @admin.display(description="rating", ordering="rating")
    def thumb(self, obj: Feedback) -> str:
        return "👍 +1" if obj.rating == 1 else "👎 -1"

    @admin.display(description="comment")
    def comment_short(self, obj: Feedback) -> str:
        return _short(obj.comment, 60)

    def get_readonly_fields(self, request, obj=None):
        # the reply rendered and a link to it in its chat, in place of its raw text
        fields = [f for f in super().get_readonly_fields(request, obj) if f != "message"]
        return [*fields, "chat_link", "reply_rendered"]

    def get_fields(self, request, obj=None):
        return [f for f in super().get_fields(request, obj) if f != "message"]

    @admin.display(description="reply")
    def reply(self, obj: Feedback) -> str:
        # the reply's text as read, not its markdown markers (its page renders it)
        return _short(_plain(obj.message.content), 48) or f"#{obj.message_id}"

    @admin.display(description="the rated reply")
    def reply_rendered(self, obj: Feedback) -> str:
        """The reply as the chat's page shows it: its markdown rendered and sanitized."""
        return format_html(
            '<div class="llmchat-content llmchat-markdown">{}</div>',
            render_markdown(obj.message.content),
        )

    @admin.display(description="chat", ordering="message__chat_id")
    def chat_link(self, obj: Feedback) -> str:
        chat = obj.message.chat
        url = reverse("admin:django_llmchat_chat_change", args=[chat.pk])
        return format_html('<a href="{}#message-{}">{}</a>', url, obj.message_id, _short(str(chat)))


def _plain(text: str | None) -> str:
    """The text a markdown reply reads as: rendered (and sanitized), its tags dropped."""
    return unescape(strip_tags(render_markdown(text)))
