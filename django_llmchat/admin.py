"""Admin: chats with their whole transcript, usage rows and the model registry."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet, Sum
from django.http import HttpRequest
from django.template.defaultfilters import floatformat

from .models import Chat, LLMModel, Run, Usage
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
    # runs that did not end with a reply are shown where they stopped: after the last
    # message they stored, else after their prompt
    runs = [r for r in Run.objects.filter(chat=chat).order_by("id") if r.status != Run.SUCCEEDED]
    marks: dict[int, list[Run]] = {}
    leading: list[Run] = []
    index = {m.pk: i for i, m in enumerate(messages)}
    last_of_run: dict[int, int] = {}
    for i, m in enumerate(messages):
        if m.run_id is not None:
            last_of_run[m.run_id] = i
    for run in runs:
        stored = [i for i in (last_of_run.get(run.pk), index.get(run.prompt_id)) if i is not None]
        if stored:
            marks.setdefault(messages[max(stored)].pk, []).append(run)
        else:
            leading.append(run)
    entries: list[dict[str, Any]] = [{"run": run} for run in leading]
    total_tokens = Tokens()
    total_cost = Cost()
    for m in messages:
        if m.pk in answered:
            entries.extend({"run": run} for run in marks.get(m.pk, ()))
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
        entries.extend({"run": run} for run in marks.get(m.pk, ()))
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
    readonly_fields = ("status", "active_run", "created_at", "updated_at")
    date_hierarchy = "created_at"
    change_form_template = "admin/django_llmchat/chat/change_form.html"
    fieldsets = (
        (None, {"fields": ("title", "user", ("provider", "model_id"), "agent")}),
        (
            "Request",
            {
                "fields": ("params", "schema", "tools", "context", "history"),
                "classes": ("collapse",),
            },
        ),
        ("Run", {"fields": ("status", "active_run", "created_at", "updated_at")}),
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


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    """Every run: what it answered, how it ended (with its safe error), its attempts, steps,
    worker and cost. Read-only: runs change through django_llmchat.runs alone."""

    list_display = (
        "id",
        "chat",
        "status",
        "error_type",
        "attempt",
        "steps",
        "cost_display",
        "worker",
        "created_at",
        "finished_at",
    )
    list_filter = ("status", "error_type", ("created_at", admin.DateFieldListFilter))
    search_fields = ("error", "worker", "task_id", "chat__title")
    list_select_related = ("chat",)
    date_hierarchy = "created_at"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).annotate(_cost=Sum("usages__total_cost"))

    def get_readonly_fields(self, request, obj=None):
        return _column_fields(self.model)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="cost (USD)", ordering="_cost")
    def cost_display(self, obj: Run) -> str:
        return _money(getattr(obj, "_cost", None))


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
    raw_id_fields = ("chat", "message", "run")
    date_hierarchy = "created_at"

    def get_readonly_fields(self, request, obj=None):
        # Usage rows are an audit trail: frozen once written.
        return _column_fields(self.model)

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


__all__ = ["ChatAdmin", "LLMModelAdmin", "RunAdmin", "UsageAdmin", "build_transcript"]


def _column_fields(model) -> list[str]:
    """The names of the model's own columns, in declaration order."""
    return [f.name for f in model._meta.get_fields() if f.concrete and not f.many_to_many]
