"""The chat admin: its form checks provider, model and double-texting policy as the API
does, the transcript, where a fork came from, the import page, the ledger note on delete
pages."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet, Sum
from django.http import HttpRequest, StreamingHttpResponse
from django.urls import reverse
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.timezone import localtime

from ..models import Chat, Usage
from .base import _model_html, _money, _short, _Styled
from .feedback import FeedbackFilter
from .imports import import_view
from .lifecycle import _users_of, erase_users_view, export_users_response
from .organise import OrganiseAdminMixin, TagFilter, TagsFormMixin
from .transcripts import build_transcript, transcript_page


class ChatForm(TagsFormMixin, forms.ModelForm):
    """The chat's settings, with the provider and the model checked as the REST API checks
    them (:func:`django_llmchat.inputs.check_choice`): a provider that is not configured,
    or a model ``LLMCHAT["ALLOWED_MODELS"]`` does not allow, is a form error, not a failed
    next message. ``double_texting`` is one of the policies or empty (the setting's), as
    a prompt checks it (:func:`django_llmchat.runs.policy.policy_error`)."""

    class Meta:
        model = Chat
        fields = "__all__"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "double_texting" in self.fields:
            self.fields["double_texting"].widget = forms.Select(
                choices=_policy_choices(self.initial.get("double_texting"))
            )

    def clean_double_texting(self) -> str:
        from ..runs.policy import policy_error

        value = self.cleaned_data.get("double_texting") or ""
        problem = policy_error(value) if value else None
        if problem is not None:
            raise forms.ValidationError(f"Must be {problem.removeprefix('must be ')}.")
        return value

    def clean(self) -> dict[str, Any]:
        from ..inputs import InputError, check_choice, check_model_id, check_provider

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


def _policy_choices(current: Any) -> list[tuple[str, str]]:
    """The double-texting policies, after "the setting's" (empty); a stored value that is
    none of them is listed too, so the form shows it (and refuses it)."""
    from ..conf import settings
    from ..runs.policy import POLICIES

    choices = [("", f'LLMCHAT["DOUBLE_TEXTING"] ({settings.DOUBLE_TEXTING})')]
    choices += [(policy, policy) for policy in POLICIES]
    if current and current not in POLICIES:
        choices.append((current, current))
    return choices


LEDGER_NOTE = (
    "The usage rows of {what} stay: the usage ledger keeps each attempt's tokens and cost "
    "with the chat's id and title and the user's id, so the spending limits and the usage "
    "dashboard still count them. The messages, tool calls, runs and attachment files go."
)


@admin.register(Chat)
class ChatAdmin(OrganiseAdminMixin, _Styled, admin.ModelAdmin):
    form = ChatForm
    change_list_template = "admin/django_llmchat/chat/change_list.html"
    delete_confirmation_template = "admin/django_llmchat/chat/delete_confirmation.html"
    delete_selected_confirmation_template = (
        "admin/django_llmchat/chat/delete_selected_confirmation.html"
    )
    actions = [
        *OrganiseAdminMixin.organise_actions,
        "export_finetune",
        "export_transcripts",
        "export_users_data",
        "erase_users_data",
    ]
    list_display = (
        "short_title",
        "title_source",
        "user",
        "model_display",
        "messages_count",
        "tokens_total",
        "cost_total",
        "status",
        "tags_list",
        "updated",
    )
    list_filter = (
        "provider",
        "model_id",
        "status",
        ("updated_at", admin.DateFieldListFilter),
        FeedbackFilter,
        "archived",
        "pinned",
        TagFilter,
    )
    # the title, the user's name and email, message words: OrganiseAdminMixin
    search_fields = ("title",)
    list_select_related = ("user",)
    raw_id_fields = ("user",)
    readonly_fields = (
        "title_source",
        "status",
        "active_run",
        "anonymised_at",
        "created_at",
        "updated_at",
        "forked_from_link",
        "forked_from_message_link",
    )
    date_hierarchy = "created_at"
    change_form_template = "admin/django_llmchat/chat/change_form.html"
    # collapsed: the transcript below is what the page is for
    fieldsets = (
        (
            "Settings",
            {
                "fields": (
                    ("title", "title_source"),
                    "user",
                    ("provider", "model_id"),
                    "agent",
                    "retention_days",
                    "double_texting",
                    ("archived", "pinned"),
                    "tags",
                ),
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
        return super().get_queryset(request).with_totals().with_tags()

    def get_fieldsets(self, request: HttpRequest, obj: Chat | None = None):
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or (obj.forked_from_id is None and obj.forked_from_message_id is None):
            return fieldsets
        fork = ("Forked from", {"fields": (("forked_from_link", "forked_from_message_link"),)})
        return (fork, *fieldsets)

    @admin.display(description="chat")
    def forked_from_link(self, obj: Chat) -> str:
        """The chat this one was forked from, a link to its page."""
        if obj.forked_from_id is None:
            return "— (deleted)"
        url = reverse("admin:django_llmchat_chat_change", args=[obj.forked_from_id])
        return format_html('<a href="{}">{}</a>', url, _short(str(obj.forked_from), 48))

    @admin.display(description="at message")
    def forked_from_message_link(self, obj: Chat) -> str:
        """The source's message the fork ends with, a link to it in the source's
        transcript (on the active path, or another branch)."""
        message = obj.forked_from_message
        if message is None:
            return "— (deleted)"
        url = reverse("admin:django_llmchat_chat_change", args=[message.chat_id])
        where = "" if message.on_path else " (in another branch than the active one)"
        return format_html(
            '<a href="{}?message={}#message-{}">#{} {}: {}</a>{}',
            url,
            message.pk,
            message.pk,
            message.pk,
            message.role,
            _short(message.content, 40) or "—",
            where,
        )

    @admin.display(description="title", ordering="title")
    def short_title(self, obj: Chat) -> str:
        return _short(str(obj), 48)

    @admin.display(description="updated", ordering="updated_at")
    def updated(self, obj: Chat) -> str:
        return date_format(localtime(obj.updated_at), "Y-m-d H:i")

    @admin.display(description="model", ordering="model_id")
    def model_display(self, obj: Chat) -> str:
        return _model_html(obj, 32)

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
                build_transcript(chat),
                request.GET.get("transcript_page"),
                focus=request.GET.get("message"),
            )
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self):
        from django.urls import path

        switch = self.admin_site.admin_view(self.switch_view)
        imports = self.admin_site.admin_view(self.import_view)
        return [
            path("import/", imports, name="django_llmchat_chat_import"),
            path("<path:object_id>/switch/", switch, name="django_llmchat_chat_switch"),
            *super().get_urls(),
        ]

    def import_view(self, request: HttpRequest):
        """The import page (:func:`django_llmchat.admin.imports.import_view`)."""
        return import_view(self, request)

    def switch_view(self, request: HttpRequest, object_id: str):
        """POST ``switch_to=<message id>``: that message's branch becomes the chat's
        active path (:func:`django_llmchat.runs.switch_to`); back to the transcript, on
        the page of that message."""
        from urllib.parse import urlencode

        from django.contrib import messages
        from django.core.exceptions import PermissionDenied
        from django.http import HttpResponseNotAllowed, HttpResponseRedirect

        from .. import runs
        from ..errors import ArgumentError, RunInProgress

        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        chat = self.get_object(request, object_id)
        if chat is None:
            self.message_user(request, f"No chat with ID “{object_id}”.", messages.WARNING)
            return HttpResponseRedirect(reverse("admin:index", current_app=self.admin_site.name))
        if not self.has_change_permission(request, chat):
            raise PermissionDenied
        target = request.POST.get("switch_to", "")
        change = reverse("admin:django_llmchat_chat_change", args=[chat.pk])
        try:
            runs.switch_to(chat.pk, int(target) if target.isdigit() else target)
        except RunInProgress:
            self.message_user(
                request,
                "The chat has a run in progress: switch branches once it ends (or cancel it).",
                messages.ERROR,
            )
            return HttpResponseRedirect(change)
        except ArgumentError as exc:
            self.message_user(request, f"Cannot switch: {exc}.", messages.ERROR)
            return HttpResponseRedirect(change)
        self.message_user(request, "Switched to another branch.", messages.SUCCESS)
        return HttpResponseRedirect(f"{change}?{urlencode({'message': target})}#message-{target}")

    def delete_view(self, request, object_id, extra_context=None):
        extra_context = dict(extra_context or {})
        extra_context["ledger_note"] = LEDGER_NOTE.format(what="this chat")
        rows = Usage.objects.filter(chat_id=object_id) if str(object_id).isdigit() else None
        if rows is not None:
            extra_context["ledger_rows"] = rows.count()
            extra_context["ledger_cost"] = _money(rows.aggregate(c=Sum("total_cost"))["c"])
        return super().delete_view(request, object_id, extra_context)

    def has_delete_permission(self, request: HttpRequest, obj: Chat | None = None) -> bool:
        """A chat with a run queued, running or awaiting a decision is not deleted (cancel
        the run first)."""
        if obj is not None and obj.runs.unfinished().exists():
            return False
        return super().has_delete_permission(request, obj)

    def delete_model(self, request: HttpRequest, obj: Chat) -> None:
        self.delete_queryset(request, Chat.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        """Deletes the idle ones, each under its lock (no run starts meanwhile); a chat
        with a run in progress stays, and the page says so."""
        from django.contrib import messages
        from django.db import transaction

        from .. import runs
        from ..chats.lifecycle import purge_chats

        kept = []
        for chat_id in queryset.order_by().values_list("pk", flat=True):
            with transaction.atomic():
                if runs.hold_if_idle(chat_id):
                    purge_chats(Chat.objects.filter(pk=chat_id))
                else:
                    kept.append(chat_id)
        if kept:
            self.message_user(
                request,
                f"{len(kept)} chat(s) with a run in progress were not deleted: cancel the "
                "run first.",
                messages.WARNING,
            )

    @admin.action(description="Export as fine-tuning JSONL")
    def export_finetune(self, request: HttpRequest, queryset: QuerySet):
        """The selected chats as OpenAI chat fine-tuning JSONL (see
        :mod:`django_llmchat.chats.export`), streamed as a download."""
        from ..chats.export import filter_chats, finetune_lines

        chosen = filter_chats(chat_ids=list(queryset.values_list("pk", flat=True)))
        lines = (line + "\n" for line in finetune_lines(chosen))
        response = StreamingHttpResponse(lines, content_type="application/jsonl; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="llmchat-finetune.jsonl"'
        return response

    @admin.action(description="Export transcripts as JSON")
    def export_transcripts(self, request: HttpRequest, queryset: QuerySet):
        """The selected chats' active paths as one JSON array (see
        :func:`django_llmchat.chats.export.transcript_dict`), streamed as a download."""
        from ..chats.export import filter_chats, transcripts_json

        chosen = filter_chats(chat_ids=list(queryset.values_list("pk", flat=True)))
        response = StreamingHttpResponse(
            transcripts_json(chosen), content_type="application/json; charset=utf-8"
        )
        response["Content-Disposition"] = 'attachment; filename="llmchat-transcripts.json"'
        return response

    @admin.action(description="Export the data of the selected chats' users (JSON)")
    def export_users_data(self, request: HttpRequest, queryset: QuerySet):
        return export_users_response(_users_of(queryset))

    @admin.action(description="Erase the data of the selected chats' users", permissions=["delete"])
    def erase_users_data(self, request: HttpRequest, queryset: QuerySet):
        return erase_users_view(self, request, _users_of(queryset), queryset)
