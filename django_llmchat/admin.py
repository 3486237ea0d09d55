"""Admin: chats with their whole transcript, usage rows and the model registry."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.defaultfilters import floatformat

from .models import Chat, LLMModel, Usage
from .values import Cost, Tokens


def _money(value: Any) -> str:
    return "—" if value is None else f"${floatformat(value, -6)}"


def build_transcript(chat: Chat) -> dict[str, Any]:
    """The chat's messages arranged for display: each tool call with its result beneath.

    Runs a constant number of queries whatever the transcript length."""
    messages = list(chat.transcript())
    model_ids = {m.model_id for m in messages if m.model_id}
    registry = {}
    if model_ids:
        for row in LLMModel.objects.filter(model_id__in=model_ids):
            registry.setdefault(row.model_id, row)
    answered: set[int] = set()
    for m in messages:
        if m.model_id:
            m.model_info = registry.get(m.model_id)
        for call in m.tool_calls.all():
            result = call.get_result()
            if result is not None:
                answered.add(result.pk)
    entries = []
    total_tokens = Tokens()
    total_cost = Cost()
    for m in messages:
        if m.pk in answered:
            continue  # shown beneath its tool call
        calls = []
        for call in m.tool_calls.all():
            result = call.get_result()
            calls.append({"call": call, "result": result})
        tokens = m.tokens
        cost = m.cost() if (m.role == "assistant" or not tokens.is_empty) else Cost()
        total_tokens = total_tokens + tokens
        total_cost = total_cost + cost
        entries.append(
            {
                "message": m,
                "tool_calls": calls,
                "tokens": tokens,
                "cost": cost,
                "cost_display": _money(cost.total) if cost.total is not None else "",
                "attachments": list(m.attachments.all()),
            }
        )
    return {
        "entries": entries,
        "message_count": len(messages),
        "total_tokens": total_tokens,
        "total_cost": total_cost,
        "total_cost_display": _money(total_cost.total),
    }


@admin.register(Chat)
class ChatAdmin(admin.ModelAdmin):
    list_display = (
        "__str__",
        "user",
        "provider",
        "model_id",
        "messages_count",
        "tokens_total",
        "cost_total",
        "status",
        "updated_at",
    )
    list_filter = ("provider", "model_id", "status", ("updated_at", admin.DateFieldListFilter))
    search_fields = ("title", "messages__content")
    list_select_related = ("user",)
    raw_id_fields = ("user",)
    readonly_fields = ("status", "error", "created_at", "updated_at")
    date_hierarchy = "created_at"
    change_form_template = "admin/django_llmchat/chat/change_form.html"
    fieldsets = (
        (None, {"fields": ("title", "user", ("provider", "model_id"), "agent")}),
        (
            "Request",
            {"fields": ("params", "schema", "tools", "context"), "classes": ("collapse",)},
        ),
        ("Run", {"fields": ("status", "error", "cancel_requested", "created_at", "updated_at")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).with_totals()

    @admin.display(description="messages", ordering="message_count")
    def messages_count(self, obj: Chat) -> int:
        return obj.message_count

    @admin.display(description="tokens", ordering="total_tokens")
    def tokens_total(self, obj: Chat) -> str:
        return "—" if obj.total_tokens is None else f"{obj.total_tokens:,}"

    @admin.display(description="cost (USD)", ordering="total_cost")
    def cost_total(self, obj: Chat) -> str:
        return _money(obj.total_cost)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = dict(extra_context or {})
        chat = self.get_object(request, object_id)
        if chat is not None:
            extra_context["transcript"] = build_transcript(chat)
        return super().change_view(request, object_id, form_url, extra_context)


@admin.register(Usage)
class UsageAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "chat",
        "provider",
        "model_id",
        "status",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "total_cost_display",
        "duration_ms",
    )
    list_filter = ("status", "provider", "model_id", "operation")
    search_fields = ("model_id", "error")
    list_select_related = ("chat",)
    raw_id_fields = ("chat", "message")
    date_hierarchy = "created_at"

    def get_readonly_fields(self, request, obj=None):
        # Usage rows are an audit trail: frozen once written.
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="cost (USD)", ordering="total_cost")
    def total_cost_display(self, obj: Usage) -> str:
        return _money(obj.total_cost)


@admin.register(LLMModel)
class LLMModelAdmin(admin.ModelAdmin):
    list_display = (
        "model_id",
        "provider",
        "name",
        "family",
        "context_window",
        "max_output_tokens",
        "input_price",
        "output_price",
    )
    list_filter = ("provider", "family")
    search_fields = ("model_id", "name", "family")

    @staticmethod
    def _price(obj: LLMModel, key: str) -> str:
        value = (obj.pricing or {}).get(key)
        if isinstance(value, dict):
            value = value.get("base")
        return "—" if value is None else f"${value}/M"

    @admin.display(description="input")
    def input_price(self, obj: LLMModel) -> str:
        return self._price(obj, "input_mtok")

    @admin.display(description="output")
    def output_price(self, obj: LLMModel) -> str:
        return self._price(obj, "output_mtok")


__all__ = ["ChatAdmin", "UsageAdmin", "LLMModelAdmin", "build_transcript"]
