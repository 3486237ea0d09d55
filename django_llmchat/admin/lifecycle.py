"""Admin actions exporting and erasing users' data (the GDPR recipe of the Data lifecycle page)."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse

from ..models import Chat, Message, Usage


def _users_of(chats: QuerySet) -> QuerySet:

    ids = chats.exclude(user__isnull=True).values("user_id")
    return get_user_model()._default_manager.filter(pk__in=ids).order_by("pk")


def export_users_response(users) -> HttpResponse:
    """A JSON download of :func:`django_llmchat.chats.lifecycle.export_users` for ``users``."""
    import json

    from django.core.serializers.json import DjangoJSONEncoder

    from ..chats.lifecycle import export_users

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

    from ..chats.lifecycle import ErasureRefused, erase_user

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
