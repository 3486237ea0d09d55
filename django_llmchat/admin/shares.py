"""Share links: every snapshot a chat was shared as, its chat, what it includes and when
it was made; a share's page shows the snapshot; the "revoke" action (or deleting) ends
the links."""

from __future__ import annotations

from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from ..chats.markdown import render_markdown
from ..models import ChatShare
from .base import _short, _Styled, _ViewOnly


@admin.register(ChatShare)
class ChatShareAdmin(_ViewOnly, _Styled, admin.ModelAdmin):
    """The chats' share links (their tokens are not stored: a link cannot be shown here).
    Read-only: a share is made by ``POST chats/{id}/share/`` or
    :func:`django_llmchat.chats.shares.share_chat`; revoking deletes it."""

    list_display = ("__str__", "chat_link", "included", "message_count", "created_at")
    list_filter = (("created_at", admin.DateFieldListFilter),)
    search_fields = ("chat__title",)
    list_select_related = ("chat",)
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    actions = ("revoke",)

    def get_readonly_fields(self, request, obj=None):
        fields = [f for f in super().get_readonly_fields(request, obj) if f != "snapshot"]
        return [*fields, "chat_link", "snapshot_rendered"]

    def get_fields(self, request, obj=None):
        return [f for f in self.get_readonly_fields(request, obj) if f != "chat"]

    @admin.display(description="chat", ordering="chat__title")
    def chat_link(self, obj: ChatShare) -> str:
        url = reverse("admin:django_llmchat_chat_change", args=[obj.chat_id])
        return format_html('<a href="{}">{}</a>', url, _short(str(obj.chat)))

    @admin.display(description="includes")
    def included(self, obj: ChatShare) -> str:
        return ", ".join(obj.include or []) or "—"

    @admin.display(description="snapshot")
    def snapshot_rendered(self, obj: ChatShare) -> str:
        rows = [
            (message.get("role", ""), render_markdown(message.get("content", "")))
            for message in (obj.snapshot or {}).get("messages", [])
        ]
        if not rows:
            return "—"
        return format_html_join(
            "", '<div class="llmchat-share-message"><strong>{}</strong> {}</div>', rows
        )

    @admin.action(description="Revoke the selected share links", permissions=["delete"])
    def revoke(self, request, queryset):
        deleted, _ = queryset.delete()
        self.message_user(request, f"{deleted} share link(s) revoked.", messages.SUCCESS)
