"""``GET chats/?archived=&pinned=&tag=``: the chat list's filters (django-filter), and the
chat's ``archived``, ``pinned`` and ``tags`` fields.

Archived chats are left out unless ``?archived=true`` (only them) or ``?archived=all``
(every chat) asks for them: an archive is put away, as in the chat apps people know.
``tag`` repeats (``?tag=work&tag=urgent``): a chat with all of them; a tag holds no comma,
so a comma in a value is a 400, not a second tag."""

from __future__ import annotations

import django_filters
from django import forms
from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from .. import inputs
from ..errors import InputError
from .fields import StrictCharField, checked

__all__ = [
    "CHAT_FILTER_PARAMETERS",
    "ChatFilter",
    "StrictBooleanField",
    "TagField",
    "filter_chats",
]

_FLAG = {"true": True, "false": False}


class _FlagField(forms.Field):
    """``true`` or ``false`` (and ``all`` when ``everything`` is allowed), nothing else:
    Django's boolean form fields read an unknown value as "not given"."""

    def __init__(self, *args, everything: bool = False, **kwargs):
        self.everything = everything
        super().__init__(*args, **kwargs)

    def to_python(self, value):
        if value is None:  # not in the query
            return None
        if value in _FLAG:
            return _FLAG[value]
        if self.everything and value == "all":
            return "all"
        words = "'true', 'false' or 'all'" if self.everything else "'true' or 'false'"
        raise forms.ValidationError(f"must be {words}", code="invalid")


class _FlagFilter(django_filters.Filter):
    field_class = _FlagField

    def filter(self, qs, value):
        if value is None or value == "all":
            return qs
        return qs.filter(**{self.field_name: value})


class ChatFilter(django_filters.FilterSet):
    """``?archived=true|false|all`` (default ``false``), ``?pinned=true|false``,
    ``?tag=<tag>`` (repeat to require several)."""

    archived = _FlagFilter(field_name="archived", everything=True)
    pinned = _FlagFilter(field_name="pinned")

    def _tags(self) -> list[str]:
        values = self.data.getlist("tag") if hasattr(self.data, "getlist") else []
        if len(values) > inputs.MAX_TAGS:
            raise ValidationError({"tag": [f"at most {inputs.MAX_TAGS} tags"]})
        try:
            return [inputs.check_tag(value) for value in values]
        except InputError as exc:
            raise ValidationError({"tag": list(exc.reasons)}) from None

    def filter_queryset(self, queryset):
        tags = self._tags()  # an empty ?tag= is refused too, not skipped
        queryset = super().filter_queryset(queryset)
        if self.form.cleaned_data.get("archived") is None:
            queryset = queryset.filter(archived=False)
        return queryset.tagged(*tags) if tags else queryset


def filter_chats(request, queryset):
    """``queryset`` narrowed by the list's filters; a 400 naming the parameter for a
    value they do not take."""
    found = ChatFilter(request.query_params, queryset=queryset, request=request)
    if not found.is_valid():
        raise ValidationError(found.errors)
    return found.qs


_TAG_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": inputs.TAG_MAX_LENGTH,
    "pattern": inputs.TAG_PATTERN,
}

CHAT_FILTER_PARAMETERS = [
    OpenApiParameter(
        "archived",
        {"type": "string", "enum": ["true", "false", "all"]},
        OpenApiParameter.QUERY,
        description="`false` (default): the chats not archived; `true`: the archived ones "
        "alone; `all`: both.",
    ),
    OpenApiParameter(
        "pinned",
        {"type": "string", "enum": ["true", "false"]},
        OpenApiParameter.QUERY,
        description="Only the pinned chats (`true`) or only the others (`false`). Without "
        "it the pinned come first in the plain list.",
    ),
    OpenApiParameter(
        "tag",
        {"type": "array", "items": _TAG_SCHEMA, "maxItems": inputs.MAX_TAGS},
        OpenApiParameter.QUERY,
        explode=True,
        description="The chats with this tag (exact); repeat it to require several.",
    ),
]


class StrictBooleanField(serializers.BooleanField):
    """JSON ``true`` or ``false`` (DRF's ``BooleanField`` also takes ``"yes"``, ``1``...)."""

    default_error_messages = {"invalid": "must be true or false"}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


@extend_schema_field(_TAG_SCHEMA)
class TagField(StrictCharField):
    """A tag (:func:`django_llmchat.inputs.check_tag`), as sent: a space at either end is
    refused, not trimmed (the schema's pattern says so)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_length", inputs.TAG_MAX_LENGTH)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        return checked(inputs.check_tag, super().to_internal_value(data), field="tags")
