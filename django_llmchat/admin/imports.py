"""The chat admin's import page: a file read into new chats of a user by
:func:`django_llmchat.chats.imports.import_file`, as ``manage.py llmchat_import`` reads it
(ChatGPT's ``conversations.json`` or the export's ``.zip``, or a django-llmchat export).
Staff with the permission to add chats only; a file that cannot be imported is an error on
the form, and then nothing of it is stored."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from ..chats.imports import Imported, import_file
from ..errors import ArgumentError
from ..models import Chat, Message

__all__ = ["NOTES_SHOWN", "ImportForm", "import_view"]

NOTES_SHOWN = 10
"""The notes of an import shown on the page after it (the rest counted)."""

FORMATS = [
    ("auto", "Told apart by its shape"),
    ("chatgpt", "ChatGPT's data export"),
    ("llmchat", "A django-llmchat export (llmchat_export_user)"),
]


class ImportForm(forms.Form):
    """The file, the user whose chats it becomes (``user_field``: the chat form's own
    field for ``Chat.user``, with its raw-id widget), and the format."""

    file = forms.FileField(
        help_text="ChatGPT's conversations.json or the .zip of its data export, or a file "
        "of manage.py llmchat_export_user. Nothing is sent to a provider."
    )
    format = forms.ChoiceField(choices=FORMATS, initial="auto", required=False)

    def __init__(self, *args: Any, user_field: forms.Field, **kwargs: Any):
        super().__init__(*args, **kwargs)
        user_field.required = True
        user_field.label = "User"
        user_field.help_text = "The owner of the imported chats."
        self.fields["user"] = user_field
        self.order_fields(["file", "user", "format"])

    def run(self) -> Imported | None:
        """Import the valid form's file, all of it or nothing (in one transaction): what
        was stored, or ``None`` with the reason as an error on ``file``."""
        data = self.cleaned_data
        try:
            with transaction.atomic():
                format = data.get("format") or "auto"
                return import_file(data["file"], user=data["user"], format=format)
        except ArgumentError as exc:  # ImportFormatError, or a file attachment refused
            self.add_error("file", f"Nothing was imported: {exc}.")
            return None


def import_view(model_admin: Any, request: HttpRequest):
    """GET: the form; POST: the import, then the chat list with what was imported told
    by the admin's messages (each note of the import a warning)."""
    if not model_admin.has_add_permission(request):
        raise PermissionDenied
    user_field = model_admin.formfield_for_dbfield(Chat._meta.get_field("user"), request)
    if request.method == "POST":
        form = ImportForm(request.POST, request.FILES, user_field=user_field)
        imported = form.run() if form.is_valid() else None
        if imported is not None:
            _report(model_admin, request, imported, form.cleaned_data)
            url = reverse("admin:django_llmchat_chat_changelist")
            return HttpResponseRedirect(f"{url}?user={form.cleaned_data['user'].pk}")
    else:
        form = ImportForm(user_field=user_field)
    context = {
        **model_admin.admin_site.each_context(request),
        "title": "Import chats",
        "opts": model_admin.opts,
        "form": form,
        "media": model_admin.media + form.media,
    }
    return TemplateResponse(request, "admin/django_llmchat/chat/import_form.html", context)


def _report(model_admin: Any, request: HttpRequest, imported: Imported, data: dict) -> None:
    chats = imported.chats
    owner = data["user"]
    count = Message.objects.filter(chat__in=[chat.pk for chat in chats]).count()
    for chat in chats:
        model_admin.log_addition(request, chat, f"Imported from {data['file'].name}.")
    model_admin.message_user(
        request,
        f"Imported {len(chats)} chat{'s' if len(chats) != 1 else ''} ({count:,} messages) "
        f"for {owner.get_username()}.",
        messages.SUCCESS,
    )
    for note in imported.notes[:NOTES_SHOWN]:
        model_admin.message_user(request, f"Note: {note}", messages.WARNING)
    if len(imported.notes) > NOTES_SHOWN:
        model_admin.message_user(
            request,
            f"And {len(imported.notes) - NOTES_SHOWN} more notes (the command "
            "manage.py llmchat_import prints them all).",
            messages.WARNING,
        )
