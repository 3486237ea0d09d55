"""Archive, pin and tags in the chat admin: the tag box of the form (a comma list), the
tag filter, the archive/pin actions, and the search box (title, user, message words)."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest

from .. import inputs
from ..errors import ArgumentError, InputError
from ..models import Chat, ChatTag

__all__ = ["OrganiseAdminMixin", "TagFilter", "TagsFormMixin"]

TAG_CHOICES = 50  # the tag filter lists the most used tags


class TagsFormMixin(forms.Form):
    """A ``tags`` box: the chat's tags as a comma list, checked by
    :func:`django_llmchat.inputs.check_tags` (each trimmed here)."""

    tags = forms.CharField(
        required=False,
        max_length=(inputs.TAG_MAX_LENGTH + 2) * inputs.MAX_TAGS,
        help_text=f"Comma-separated, at most {inputs.MAX_TAGS} tags of up to "
        f"{inputs.TAG_MAX_LENGTH} characters.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        instance = getattr(self, "instance", None)
        if instance is not None and instance.pk is not None and "tags" in self.fields:
            self.initial.setdefault("tags", ", ".join(instance.tags))

    def clean_tags(self) -> list[str]:
        raw = self.cleaned_data.get("tags") or ""
        names = [part.strip() for part in raw.split(",") if part.strip()]
        try:
            return inputs.check_tags(names)
        except InputError as exc:
            raise forms.ValidationError(list(exc.reasons)) from None


class TagFilter(admin.SimpleListFilter):
    """Chats by tag (the most used ones)."""

    title = "tag"
    parameter_name = "tag"

    def lookups(self, request, model_admin):
        rows = (
            ChatTag.objects.values_list("name")
            .annotate(n=Count("id"))
            .order_by("-n", "name")[:TAG_CHOICES]
        )
        return [(name, f"{name} ({n})") for name, n in rows]

    def queryset(self, request, queryset):
        return queryset.tagged(self.value()) if self.value() else queryset


def _search_user_fields() -> list[str]:
    """The user model's name field and, when it has one, its email."""
    user = get_user_model()
    names = [user.USERNAME_FIELD]
    email = getattr(user, "EMAIL_FIELD", "email")
    if email not in names and any(f.name == email for f in user._meta.get_fields()):
        names.append(email)
    return names


class OrganiseAdminMixin:
    """For the chat ``ModelAdmin``: saves the form's tags, the archive and pin actions, and
    the search box: the words in the title, the user's name or email (parts of them), or
    a message (every word, through :meth:`ChatQuerySet.search`; message text is not
    searched when it is encrypted at rest)."""

    organise_actions = ["archive_chats", "unarchive_chats", "pin_chats", "unpin_chats"]
    search_help_text = "The title, the user's name or email, or words of a message."

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        if "tags" in form.cleaned_data and (not change or "tags" in form.changed_data):
            form.instance.set_tags(form.cleaned_data["tags"])

    def get_search_results(self, request: HttpRequest, queryset: QuerySet, search_term: str):
        from ..chats.search import SearchUnavailable

        term = search_term.strip()
        if not term:
            return queryset, False
        found = Q(title__icontains=term)
        for name in _search_user_fields():
            found |= Q(**{f"user__{name}__icontains": term})
        try:
            by_words = Chat.objects.search(term)
        except (ArgumentError, SearchUnavailable):
            pass  # no word in the term, or encrypted content: title and user alone
        else:
            found |= Q(pk__in=by_words.order_by().values("pk"))
        return queryset.filter(found), False

    def _organise(self, request: HttpRequest, queryset: QuerySet, what: str, **values) -> None:
        # update(): no activity, ``updated_at`` stays (as chat.archive() keeps it)
        count = queryset.order_by().update(**values)
        self.message_user(request, f"{count} chat(s) {what}.", messages.SUCCESS)

    @admin.action(description="Archive the selected chats", permissions=["change"])
    def archive_chats(self, request, queryset):
        self._organise(request, queryset, "archived", archived=True)

    @admin.action(description="Unarchive the selected chats", permissions=["change"])
    def unarchive_chats(self, request, queryset):
        self._organise(request, queryset, "unarchived", archived=False)

    @admin.action(description="Pin the selected chats", permissions=["change"])
    def pin_chats(self, request, queryset):
        self._organise(request, queryset, "pinned", pinned=True)

    @admin.action(description="Unpin the selected chats", permissions=["change"])
    def unpin_chats(self, request, queryset):
        self._organise(request, queryset, "unpinned", pinned=False)

    @admin.display(description="tags")
    def tags_list(self, obj: Chat) -> str:
        return ", ".join(obj.tags) or "—"
