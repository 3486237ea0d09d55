"""Runs, usage rows and the usage dashboard in the admin (view-only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import QuerySet, Sum
from django.http import HttpRequest
from django.urls import path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.timezone import localtime

from ..models import Run, Usage, UsageDashboard
from .base import _column_fields, _count, _model_html, _money, _short, _Styled, _ViewOnly


def _estimated(usage: Usage, value: Any, shown: Any) -> str:
    """``shown(value)``, marked ``~... (estimated)`` when the row's counts were estimated."""
    text = shown(value)
    return f"~{text} (estimated)" if usage.estimated and value is not None else text


@admin.register(Run)
class RunAdmin(_ViewOnly, _Styled, admin.ModelAdmin):
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

    @admin.display(description="cost (USD)", ordering="_cost")
    def cost_display(self, obj: Run) -> str:
        return _money(getattr(obj, "_cost", None))


@admin.register(Usage)
class UsageAdmin(_ViewOnly, _Styled, admin.ModelAdmin):
    """Every provider attempt with its tokens and frozen cost. Read-only: an audit trail."""

    list_display = (
        "when",
        "chat_display",
        "model_display",
        "status",
        "input_display",
        "output_display",
        "cache_display",
        "total_cost_display",
        "duration_display",
    )
    list_filter = ("status", "estimated", "provider", "model_id", "operation")
    search_fields = ("model_id", "error", "chat__title", "chat_title")
    list_select_related = ("chat",)
    raw_id_fields = ("chat", "message", "run")
    date_hierarchy = "created_at"
    change_list_template = "admin/django_llmchat/usage/change_list.html"
    actions = None  # the ledger: rows outlive their chat and user, never deleted one by one

    @admin.display(description="created", ordering="created_at")
    def when(self, obj: Usage) -> str:
        return date_format(localtime(obj.created_at), "Y-m-d H:i")

    def get_readonly_fields(self, request, obj=None):
        # Usage rows are an audit trail: frozen once written. A deleted chat or user shows
        # by the id and title its rows kept.
        fields = _column_fields(self.model)
        return [
            "chat_label" if name == "chat" else "user_label" if name == "user" else name
            for name in fields
        ]

    def get_fields(self, request, obj=None):
        return self.get_readonly_fields(request, obj)

    @admin.display(description="chat", ordering="chat")
    def chat_display(self, obj: Usage) -> str:
        return _short(obj.chat_label, 24)

    @admin.display(description="chat")
    def chat_label(self, obj: Usage) -> str:
        if obj.chat_exists:
            url = reverse("admin:django_llmchat_chat_change", args=[obj.chat_id])
            return format_html('<a href="{}">{}</a>', url, str(obj.chat))
        return obj.chat_label

    @admin.display(description="user")
    def user_label(self, obj: Usage) -> str:
        if obj.user_id is None:
            return "—"
        user = get_user_model()._default_manager.filter(pk=obj.user_id).first()
        return str(user) if user is not None else f"deleted user {obj.user_id}"

    @admin.display(description="model", ordering="model_id")
    def model_display(self, obj: Usage) -> str:
        return _model_html(obj, 28)

    @admin.display(description="in", ordering="input_tokens")
    def input_display(self, obj: Usage) -> str:
        return _estimated(obj, obj.input_tokens, _count)

    @admin.display(description="out", ordering="output_tokens")
    def output_display(self, obj: Usage) -> str:
        return _estimated(obj, obj.output_tokens, _count)

    @admin.display(description="cache r/w", ordering="cache_read_tokens")
    def cache_display(self, obj: Usage) -> str:
        if not obj.cache_read_tokens and not obj.cache_write_tokens:
            return "—"
        return f"{obj.cache_read_tokens or 0:,} / {obj.cache_write_tokens or 0:,}"

    @admin.display(description="cost (USD)", ordering="total_cost")
    def total_cost_display(self, obj: Usage) -> str:
        return _estimated(obj, obj.total_cost, _money)

    @admin.display(description="time", ordering="duration_ms")
    def duration_display(self, obj: Usage) -> str:
        return "—" if obj.duration_ms is None else f"{obj.duration_ms / 1000:.1f} s"


@admin.register(UsageDashboard)
class UsageDashboardAdmin(_ViewOnly, admin.ModelAdmin):
    """The usage dashboard: spend and tokens over time, by model, provider, user, status and
    chat, for a date range. Needs the permission to view usage rows."""

    def _can_view(self, request: HttpRequest) -> bool:
        return (
            request.user.is_active
            and request.user.is_staff
            and (
                request.user.has_perm("django_llmchat.view_usage")
                or request.user.has_perm("django_llmchat.view_usagedashboard")
            )
        )

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._can_view(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._can_view(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        return [path("", self.admin_site.admin_view(self.changelist_view), name=name)]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None):
        from django.core.exceptions import PermissionDenied
        from django.template.response import TemplateResponse

        from ..chats.dashboard import DashboardFilters, usage_summary

        if not self._can_view(request):
            raise PermissionDenied
        filters = DashboardFilters(request.GET)
        summary = None
        status = 400
        if filters.is_valid():
            status = 200
            data = filters.cleaned_data
            summary = usage_summary(data["start"], data["end"], data["period"])
            # shown with the range in force (the defaults filled in)
            filters = DashboardFilters({k: str(v) for k, v in data.items()})
        context = {
            **self.admin_site.each_context(request),
            "title": "Usage dashboard",
            "opts": self.opts,
            "filters": filters,
            "summary": summary,
            "chart_data": summary.chart_data() if summary else None,
            "usage_url": reverse("admin:django_llmchat_usage_changelist"),
            **(extra_context or {}),
        }
        return TemplateResponse(
            request, "admin/django_llmchat/usage/dashboard.html", context, status=status
        )
