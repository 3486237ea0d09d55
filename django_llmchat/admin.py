"""Admin: chats with their whole transcript, usage rows and the model registry."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.paginator import InvalidPage, Paginator
from django.db.models import Exists, OuterRef, Prefetch, QuerySet, Sum
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.template.defaultfilters import floatformat, truncatechars
from django.urls import path, reverse
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join
from django.utils.timezone import localtime

from .models import Chat, Feedback, Limit, LLMModel, Message, Run, Usage, UsageDashboard
from .models.limit import LIMIT_FIELDS
from .values import Cost, Tokens

TRANSCRIPT_PAGE_SIZE = 50
"""Messages per page of a chat's transcript in the admin (the latest page comes first)."""


def _money(value: Any) -> str:
    return "—" if value is None else f"${floatformat(value, -6)}"


def _count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def _short(text: str, limit: int = 40) -> str:
    """``text`` on one line, cut at a word boundary to at most ``limit`` characters."""
    text = " ".join((text or "").split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if " " in cut[limit // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,.;:-") + "…"


def build_transcript(chat: Chat) -> dict[str, Any]:
    """The chat's messages arranged for display: each tool call with its result beneath.

    Runs a constant number of queries whatever the transcript length."""
    feedback = Feedback.objects.select_related("user").order_by("id")
    messages = list(chat.transcript().prefetch_related(Prefetch("feedback", queryset=feedback)))
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
                "feedback": list(m.feedback.all()),
            }
        )
        entries.extend({"run": run} for run in marks.get(m.pk, ()))
    return {
        "entries": entries,
        "last_message_id": messages[-1].pk if messages else None,
        "message_count": len(messages),
        "total_tokens": total_tokens,
        "total_cost": total_cost,
        "total_cost_display": _money(total_cost.total),
    }


def transcript_page(transcript: dict[str, Any], number: str | int | None) -> dict[str, Any]:
    """One page of :func:`build_transcript`'s entries, :data:`TRANSCRIPT_PAGE_SIZE` a page;
    no ``number`` (or a bad one) means the LAST page, where the latest messages are."""
    paginator = Paginator(transcript["entries"], TRANSCRIPT_PAGE_SIZE, orphans=5)
    try:
        page = paginator.page(int(number or paginator.num_pages))
    except (ValueError, InvalidPage):
        page = paginator.page(paginator.num_pages)
    return {
        **transcript,
        "entries": page.object_list,
        "page": page,
        "page_range": list(paginator.get_elided_page_range(page.number, on_each_side=2)),
    }


class _Styled:
    class Media:
        css = {"all": ("django_llmchat/admin.css",)}


class ChatForm(forms.ModelForm):
    """The chat's settings, with the provider and the model checked as the REST API checks
    them (:func:`django_llmchat.inputs.check_choice`): a provider that is not configured,
    or a model ``LLMCHAT["ALLOWED_MODELS"]`` does not allow, is a form error, not a failed
    next message."""

    class Meta:
        model = Chat
        fields = "__all__"

    def clean(self) -> dict[str, Any]:
        from .inputs import InputError, check_choice, check_model_id, check_provider

        data = super().clean()
        changed = [name for name in ("provider", "model_id") if name in self.changed_data]
        if self.instance.pk is None:
            changed = [name for name in ("provider", "model_id") if name in data]
        if not changed or self.errors.get("provider") or self.errors.get("model_id"):
            return data
        values = {name: data.get(name) for name in changed}
        try:
            if "provider" in values:
                check_provider(values["provider"])
            if "model_id" in values:
                check_model_id(values["model_id"])
            check_choice(values, self.instance if self.instance.pk else None)
        except InputError as exc:
            field = exc.field if exc.field in self.fields else None
            raise forms.ValidationError(
                {field: list(exc.reasons)} if field else exc.reason
            ) from None
        return data


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


LEDGER_NOTE = (
    "The usage rows of {what} stay: the usage ledger keeps each attempt's tokens and cost "
    "with the chat's id and title and the user's id, so the spending limits and the usage "
    "dashboard still count them. The messages, tool calls, runs and attachment files go."
)


@admin.register(Chat)
class ChatAdmin(_Styled, admin.ModelAdmin):
    form = ChatForm
    delete_confirmation_template = "admin/django_llmchat/chat/delete_confirmation.html"
    delete_selected_confirmation_template = (
        "admin/django_llmchat/chat/delete_selected_confirmation.html"
    )
    actions = ["export_finetune", "export_users_data", "erase_users_data"]
    list_display = (
        "short_title",
        "user",
        "model_display",
        "messages_count",
        "tokens_total",
        "cost_total",
        "status",
        "updated",
    )
    list_filter = (
        "provider",
        "model_id",
        "status",
        ("updated_at", admin.DateFieldListFilter),
        FeedbackFilter,
    )
    search_fields = ("title", "messages__content")
    list_select_related = ("user",)
    raw_id_fields = ("user",)
    readonly_fields = ("status", "active_run", "anonymised_at", "created_at", "updated_at")
    date_hierarchy = "created_at"
    change_form_template = "admin/django_llmchat/chat/change_form.html"
    # collapsed: the transcript below is what the page is for
    fieldsets = (
        (
            "Settings",
            {
                "fields": ("title", "user", ("provider", "model_id"), "agent", "retention_days"),
                "classes": ("collapse",),
            },
        ),
        (
            "Request",
            {
                "fields": ("params", "schema", "tools", "context", "history"),
                "classes": ("collapse",),
            },
        ),
        (
            "Run",
            {
                "fields": ("status", "active_run", "anonymised_at", "created_at", "updated_at"),
                "classes": ("collapse",),
            },
        ),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).with_totals()

    @admin.display(description="title", ordering="title")
    def short_title(self, obj: Chat) -> str:
        return _short(str(obj), 48)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, obj: Chat) -> str:
        return date_format(localtime(obj.updated_at), "Y-m-d H:i")

    @admin.display(description="model", ordering="model_id")
    def model_display(self, obj: Chat) -> str:
        return format_html(
            '<span class="llmchat-meta">{}/</span>{}', obj.provider, _short(obj.model_id, 32)
        )

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
            extra_context["transcript"] = transcript_page(
                build_transcript(chat), request.GET.get("transcript_page")
            )
        return super().change_view(request, object_id, form_url, extra_context)

    def delete_view(self, request, object_id, extra_context=None):
        extra_context = dict(extra_context or {})
        extra_context["ledger_note"] = LEDGER_NOTE.format(what="this chat")
        rows = Usage.objects.filter(chat_id=object_id) if str(object_id).isdigit() else None
        if rows is not None:
            extra_context["ledger_rows"] = rows.count()
            extra_context["ledger_cost"] = _money(rows.aggregate(c=Sum("total_cost"))["c"])
        return super().delete_view(request, object_id, extra_context)

    def delete_model(self, request: HttpRequest, obj: Chat) -> None:
        from .lifecycle import purge_chats

        purge_chats(Chat.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        from .lifecycle import purge_chats

        purge_chats(queryset)

    @admin.action(description="Export as fine-tuning JSONL")
    def export_finetune(self, request: HttpRequest, queryset: QuerySet):
        """The selected chats as OpenAI chat fine-tuning JSONL (see
        :mod:`django_llmchat.export`), streamed as a download."""
        from .export import filter_chats, finetune_lines

        chosen = filter_chats(chat_ids=list(queryset.values_list("pk", flat=True)))
        lines = (line + "\n" for line in finetune_lines(chosen))
        response = StreamingHttpResponse(lines, content_type="application/jsonl; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="llmchat-finetune.jsonl"'
        return response

    @admin.action(description="Export the data of the selected chats' users (JSON)")
    def export_users_data(self, request: HttpRequest, queryset: QuerySet):
        return export_users_response(_users_of(queryset))

    @admin.action(description="Erase the data of the selected chats' users", permissions=["delete"])
    def erase_users_data(self, request: HttpRequest, queryset: QuerySet):
        return erase_users_view(self, request, _users_of(queryset), queryset)


def _users_of(chats: QuerySet) -> QuerySet:
    from django.contrib.auth import get_user_model

    ids = chats.exclude(user__isnull=True).values("user_id")
    return get_user_model()._default_manager.filter(pk__in=ids).order_by("pk")


def export_users_response(users) -> HttpResponse:
    """A JSON download of :func:`django_llmchat.lifecycle.export_users` for ``users``."""
    import json

    from django.core.serializers.json import DjangoJSONEncoder

    from .lifecycle import export_users

    users = list(users)
    data = export_users(users)
    name = users[0].get_username() if len(users) == 1 else f"{len(users)}-users"
    response = HttpResponse(
        json.dumps(data, cls=DjangoJSONEncoder, ensure_ascii=False, indent=2),
        content_type="application/json",
    )
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    response["Content-Disposition"] = f'attachment; filename="llmchat-export-{safe}.json"'
    return response


def erase_users_view(modeladmin, request: HttpRequest, users, queryset: QuerySet):
    """The confirmation page of an erasure (``users``), then the erasure itself."""
    from django.contrib import messages
    from django.contrib.admin import helpers
    from django.template.response import TemplateResponse

    from .lifecycle import ErasureRefused, erase_user

    if not request.user.has_perm("django_llmchat.delete_chat"):
        modeladmin.message_user(
            request, "Erasing needs the permission to delete chats.", messages.ERROR
        )
        return None
    users = list(users)
    if request.POST.get("post") == "yes":
        for user in users:
            try:
                erasure = erase_user(user)
            except ErasureRefused as exc:
                modeladmin.message_user(request, str(exc), messages.ERROR)
                continue
            modeladmin.message_user(
                request,
                f"Erased {erasure.chats} chats of {user.get_username()}; "
                f"{erasure.usage_rows} usage rows anonymised.",
                messages.SUCCESS,
            )
        return None
    rows = []
    for user in users:
        chats = Chat.objects.filter(user_id=user.pk)
        rows.append(
            {
                "user": user,
                "chats": chats.count(),
                "messages": Message.objects.filter(chat__user_id=user.pk).count(),
                "usage_rows": Usage.objects.filter(user_id=user.pk).count(),
            }
        )
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": "Erase the users' data?",
        "opts": modeladmin.model._meta,
        "rows": rows,
        "queryset": queryset,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "action": request.POST.get("action"),
    }
    return TemplateResponse(request, "admin/django_llmchat/erase_confirmation.html", context)


@admin.action(description="Export their LLM chats (JSON)")
def export_llmchat_data(modeladmin, request: HttpRequest, queryset: QuerySet):
    """An action for the project's User admin: download the selected users' data."""
    return export_users_response(queryset.order_by("pk"))


@admin.action(description="Erase their LLM chats (usage rows anonymised)")
def erase_llmchat_data(modeladmin, request: HttpRequest, queryset: QuerySet):
    """An action for the project's User admin: erase the selected users' data (after a
    confirmation page)."""
    return erase_users_view(modeladmin, request, queryset.order_by("pk"), queryset)


@admin.register(Feedback)
class FeedbackAdmin(_Styled, admin.ModelAdmin):
    """Every rating of a reply, with its comment: filter by rating, open the chat at the
    reply. Read-only: feedback is the users' (``Message.rate()``, the REST route)."""

    list_display = ("thumb", "comment_short", "reply", "chat_link", "user", "updated_at")
    list_filter = ("rating", ("updated_at", admin.DateFieldListFilter))
    search_fields = ("comment", "message__chat__title")
    list_select_related = ("user", "message", "message__chat")
    date_hierarchy = "updated_at"
    ordering = ("-updated_at", "-id")

    def get_readonly_fields(self, request, obj=None):
        return _column_fields(self.model)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="rating", ordering="rating")
    def thumb(self, obj: Feedback) -> str:
        return "👍 +1" if obj.rating == 1 else "👎 -1"

    @admin.display(description="comment")
    def comment_short(self, obj: Feedback) -> str:
        return _short(obj.comment, 60)

    @admin.display(description="reply")
    def reply(self, obj: Feedback) -> str:
        return _short(obj.message.content, 48) or f"#{obj.message_id}"

    @admin.display(description="chat", ordering="message__chat_id")
    def chat_link(self, obj: Feedback) -> str:
        chat = obj.message.chat
        url = reverse("admin:django_llmchat_chat_change", args=[chat.pk])
        return format_html('<a href="{}#message-{}">{}</a>', url, obj.message_id, _short(str(chat)))


@admin.register(Run)
class RunAdmin(_Styled, admin.ModelAdmin):
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

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # shown, never saved: no SAVE button

    @admin.display(description="cost (USD)", ordering="_cost")
    def cost_display(self, obj: Run) -> str:
        return _money(getattr(obj, "_cost", None))


@admin.register(Usage)
class UsageAdmin(_Styled, admin.ModelAdmin):
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # shown, never saved: no SAVE button

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
        return format_html(
            '<span class="llmchat-meta">{}/</span>{}', obj.provider, _short(obj.model_id, 28)
        )

    @admin.display(description="in", ordering="input_tokens")
    def input_display(self, obj: Usage) -> str:
        shown = _count(obj.input_tokens)
        return f"~{shown} (estimated)" if obj.estimated and obj.input_tokens is not None else shown

    @admin.display(description="out", ordering="output_tokens")
    def output_display(self, obj: Usage) -> str:
        return _count(obj.output_tokens)

    @admin.display(description="cache r/w", ordering="cache_read_tokens")
    def cache_display(self, obj: Usage) -> str:
        if not obj.cache_read_tokens and not obj.cache_write_tokens:
            return "—"
        return f"{obj.cache_read_tokens or 0:,} / {obj.cache_write_tokens or 0:,}"

    @admin.display(description="cost (USD)", ordering="total_cost")
    def total_cost_display(self, obj: Usage) -> str:
        shown = _money(obj.total_cost)
        return f"~{shown} (estimated)" if obj.estimated and obj.total_cost is not None else shown

    @admin.display(description="time", ordering="duration_ms")
    def duration_display(self, obj: Usage) -> str:
        return "—" if obj.duration_ms is None else f"{obj.duration_ms / 1000:.1f} s"


@admin.register(UsageDashboard)
class UsageDashboardAdmin(admin.ModelAdmin):
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        return [path("", self.admin_site.admin_view(self.changelist_view), name=name)]

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None):
        from django.core.exceptions import PermissionDenied
        from django.template.response import TemplateResponse

        from .dashboard import DashboardFilters, usage_summary

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


CAPABILITY_CHOICES = (
    ("streaming", "streaming"),
    ("tools", "tools"),
    ("vision", "vision (images in)"),
    ("pdf", "PDF in"),
    ("thinking", "thinking"),
    ("structured_output", "structured output"),
    ("prompt_caching", "prompt caching"),
)
MODALITY_CHOICES = (
    ("text", "text"),
    ("image", "image"),
    ("pdf", "PDF"),
    ("audio", "audio"),
    ("video", "video"),
)
PRICE_FIELDS = {
    "input_mtok": "input",
    "output_mtok": "output",
    "cache_read_mtok": "cache read",
    "cache_write_mtok": "cache write",
}


def _with_current(choices: tuple, values: Any) -> list[tuple[str, str]]:
    """``choices`` plus any stored value they do not list (kept, never dropped)."""
    known = [value for value, _ in choices]
    extra = [(v, v) for v in (values or []) if isinstance(v, str) and v not in known]
    return [*choices, *extra]


def _price_field(label: str) -> forms.DecimalField:
    return forms.DecimalField(
        label=f"{label} (USD / 1M tokens)",
        required=False,
        min_value=Decimal(0),
        decimal_places=6,
        max_digits=16,
    )


class LLMModelForm(forms.ModelForm):
    """Capabilities and modalities as checkboxes, the four token prices as numbers (USD per
    million tokens). Tiered prices and other price keys are shown, and kept as they are."""

    capabilities = forms.MultipleChoiceField(
        choices=CAPABILITY_CHOICES, widget=forms.CheckboxSelectMultiple, required=False
    )
    input_modalities = forms.MultipleChoiceField(
        label="input", choices=MODALITY_CHOICES, widget=forms.CheckboxSelectMultiple,
        required=False,
    )  # fmt: skip
    output_modalities = forms.MultipleChoiceField(
        label="output", choices=MODALITY_CHOICES, widget=forms.CheckboxSelectMultiple,
        required=False,
    )  # fmt: skip

    input_mtok = _price_field("input")
    output_mtok = _price_field("output")
    cache_read_mtok = _price_field("cache read")
    cache_write_mtok = _price_field("cache write")

    class Meta:
        model = LLMModel
        exclude = ("modalities", "pricing")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        pricing = self.instance.pricing or {}
        modalities = self.instance.modalities or {}
        self.fields["capabilities"].choices = _with_current(
            CAPABILITY_CHOICES, self.instance.capabilities
        )
        for side in ("input", "output"):
            field = self.fields[f"{side}_modalities"]
            field.choices = _with_current(MODALITY_CHOICES, modalities.get(side))
            self.initial.setdefault(f"{side}_modalities", modalities.get(side) or [])
        for key in PRICE_FIELDS:
            value = pricing.get(key)
            if isinstance(value, dict):  # tiered: shown as text below, kept as it is
                self.fields[key].disabled = True
                self.fields[key].help_text = "tiered: " + _tiers_text(value)
                value = value.get("base")
            self.initial.setdefault(key, value)

    def save(self, commit: bool = True) -> LLMModel:
        model = self.instance
        data = self.cleaned_data
        model.capabilities = list(data.get("capabilities") or [])
        modalities = dict(model.modalities or {})
        modalities["input"] = list(data.get("input_modalities") or [])
        modalities["output"] = list(data.get("output_modalities") or [])
        model.modalities = modalities
        pricing = dict(model.pricing or {})
        for key in PRICE_FIELDS:
            if self.fields[key].disabled:
                continue
            value = data.get(key)
            if value is None:
                pricing.pop(key, None)
            else:
                pricing[key] = format(value.normalize(), "f")
        model.pricing = pricing
        return super().save(commit)


def _price_text(value: Any) -> str:
    if isinstance(value, dict):
        return f"${value.get('base')}" + (f" ({_tiers_text(value)})" if value.get("tiers") else "")
    return f"${value}"


def _tiers_text(value: dict) -> str:
    return ", ".join(
        f"${tier.get('price')} above {tier.get('start'):,} prompt tokens"
        for tier in value.get("tiers") or ()
        if isinstance(tier.get("start"), int)
    )


@admin.register(LLMModel)
class LLMModelAdmin(_Styled, admin.ModelAdmin):
    form = LLMModelForm
    list_display = (
        "model_id",
        "provider",
        "name",
        "context_window",
        "max_output_tokens",
        "input_price",
        "output_price",
        "cache_read_price",
        "capabilities_display",
    )
    list_filter = ("provider", "family")
    search_fields = ("model_id", "name", "family")
    readonly_fields = ("pricing_display", "metadata_display", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": (("provider", "model_id"), ("name", "family"))}),
        ("Limits", {"fields": (("context_window", "max_output_tokens"),)}),
        ("Capabilities", {"fields": ("capabilities",)}),
        ("Modalities", {"fields": (("input_modalities", "output_modalities"),)}),
        (
            "Prices",
            {
                "fields": (
                    ("input_mtok", "output_mtok"),
                    ("cache_read_mtok", "cache_write_mtok"),
                    "pricing_display",
                )
            },
        ),
        ("Sources", {"fields": ("metadata_display", "created_at", "updated_at")}),
    )

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

    @admin.display(description="cache read")
    def cache_read_price(self, obj: LLMModel) -> str:
        return self._price(obj, "cache_read_mtok")

    @admin.display(description="capabilities")
    def capabilities_display(self, obj: LLMModel) -> str:
        return format_html_join(
            " ", '<span class="llmchat-chip">{}</span>', ((c,) for c in obj.capabilities or ())
        )

    @admin.display(description="all prices (USD)")
    def pricing_display(self, obj: LLMModel) -> str:
        rows = sorted((obj.pricing or {}).items())
        if not rows:
            return "no price known: costs of this model show as unknown"
        return format_html(
            '<table class="llmchat-kv">{}</table>',
            format_html_join(
                "",
                "<tr><th>{}</th><td>{}</td></tr>",
                ((key.replace("_", " "), _price_text(value)) for key, value in rows),
            ),
        )

    @admin.display(description="sources")
    def metadata_display(self, obj: LLMModel) -> str:
        meta = obj.metadata or {}
        sources = ", ".join(meta.get("sources") or ()) or "entered by hand"
        genai = meta.get("genai_prices") or {}
        if genai:
            sources += f" (genai-prices: {genai.get('provider')}/{genai.get('model')})"
        return truncatechars(sources, 200)


__all__ = [
    "TRANSCRIPT_PAGE_SIZE",
    "ChatAdmin",
    "LLMModelAdmin",
    "LLMModelForm",
    "RunAdmin",
    "UsageAdmin",
    "build_transcript",
    "transcript_page",
]


def _column_fields(model) -> list[str]:
    """The names of the model's own columns, in declaration order."""
    return [f.name for f in model._meta.get_fields() if f.concrete and not f.many_to_many]


@admin.register(Limit)
class LimitAdmin(_Styled, admin.ModelAdmin):
    """Each user's own spending limits (empty fields keep ``LLMCHAT["LIMITS"]``), with
    what they used today, this month and this hour against the limit in effect."""

    list_display = (
        "user",
        "usd_today",
        "usd_this_month",
        "tokens_today",
        "runs_last_hour",
        "open_runs",
        "unlimited",
        "note",
    )
    list_filter = ("unlimited",)
    search_fields = ("note",)
    raw_id_fields = ("user",)
    list_select_related = ("user",)
    readonly_fields = ("in_effect", "updated_at")
    fieldsets = (
        (None, {"fields": ("user", "unlimited", "note")}),
        (
            "Limits (empty: the default of the settings)",
            {
                "fields": (
                    "usd_per_day",
                    "usd_per_month",
                    "tokens_per_day",
                    "runs_per_hour",
                    "concurrent_runs",
                    "soft",
                )
            },
        ),
        ("Use", {"fields": ("in_effect", "updated_at")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        from .limits import spend_annotations

        names = spend_annotations("user_id")
        return super().get_queryset(request).annotate(**{f"_{k}": v for k, v in names.items()})

    @staticmethod
    def _in_effect(obj: Limit) -> dict[str, Any]:
        from .limits import limits_for

        row = {name: getattr(obj, name) for name in (*LIMIT_FIELDS, "soft", "unlimited")}
        return limits_for(obj.user, row)

    def _against(self, obj: Limit, name: str, *, money: bool = False) -> str:
        used = getattr(obj, f"_{name}", None) or 0
        allowed = self._in_effect(obj).get(name)
        shown = f"${used:.4f}" if money else str(used)
        if allowed is None:
            return f"{shown} (no limit)"
        limit = f"${allowed:.2f}" if money else str(allowed)
        share = f" ({float(used) / float(allowed):.0%})" if allowed else ""
        return f"{shown} of {limit}{share}"

    @admin.display(description="USD today", ordering="_usd_per_day")
    def usd_today(self, obj: Limit) -> str:
        return self._against(obj, "usd_per_day", money=True)

    @admin.display(description="USD this month", ordering="_usd_per_month")
    def usd_this_month(self, obj: Limit) -> str:
        return self._against(obj, "usd_per_month", money=True)

    @admin.display(description="tokens today", ordering="_tokens_per_day")
    def tokens_today(self, obj: Limit) -> str:
        return self._against(obj, "tokens_per_day")

    @admin.display(description="runs last hour")
    def runs_last_hour(self, obj: Limit) -> str:
        return self._against(obj, "runs_per_hour")

    @admin.display(description="queued or running")
    def open_runs(self, obj: Limit) -> str:
        return self._against(obj, "concurrent_runs")

    @admin.display(description="limits in effect")
    def in_effect(self, obj: Limit) -> str:
        if obj.pk is None:
            return "—"
        found = self._in_effect(obj)
        if not found:
            return "no limit"
        return ", ".join(f"{name}: {value}" for name, value in found.items())
