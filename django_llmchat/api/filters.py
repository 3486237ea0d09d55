"""Filters of the model registry endpoint (django-filter)."""

from __future__ import annotations

import re

import django_filters
from django import forms
from django.db import connection
from django.db.models import Q, TextField
from django.db.models.functions import Cast
from rest_framework.exceptions import ValidationError

from ..models import LLMModel

__all__ = ["CAPABILITY_PATTERN", "LLMModelFilter"]

CAPABILITY_PATTERN = r"^[A-Za-z0-9_.:-]{1,64}$"
_WORD = re.compile(CAPABILITY_PATTERN)
_INTEGER = re.compile(r"[+-]?[0-9]+")


class ASCIIIntegerField(forms.IntegerField):
    """An integer in ASCII digits: Django's ``IntegerField`` reads any script's digits
    (``٣`` is 3) and ``3.0`` as 3."""

    def to_python(self, value):
        if value not in self.empty_values and not _INTEGER.fullmatch(str(value).strip()):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)


class IntegerFilter(django_filters.NumberFilter):
    """A whole number (``0.5`` is a 400, not rounded or read as a decimal)."""

    field_class = ASCIIIntegerField


class LLMModelFilter(django_filters.FilterSet):
    """``?provider=openai&family=gpt-4.1&capability=tools&search=mini``"""

    provider = django_filters.CharFilter(field_name="provider", help_text="Provider name.")
    family = django_filters.CharFilter(field_name="family", help_text="Model family.")
    capability = django_filters.CharFilter(
        method="filter_capability",
        help_text="A capability the model has (tools, vision, streaming...); repeat "
        "the parameter to require several.",
    )
    search = django_filters.CharFilter(
        method="filter_search", help_text="Part of the model id or name (case-insensitive)."
    )
    min_context_window = IntegerFilter(
        field_name="context_window", lookup_expr="gte", help_text="At least this many tokens."
    )

    class Meta:
        model = LLMModel
        fields = ["provider", "family", "capability", "search", "min_context_window"]

    def _capabilities(self) -> list[str]:
        name = "capability"
        if hasattr(self.data, "getlist"):
            values = self.data.getlist(name)
        else:
            values = [self.data[name]] if name in self.data else []
        for item in values:
            if not isinstance(item, str) or not _WORD.fullmatch(item):
                raise ValidationError({name: ["must be a capability name like 'tools'"]})
        return values

    def filter_queryset(self, queryset):
        self._capabilities()  # an empty ?capability= is refused too, not skipped
        return super().filter_queryset(queryset)

    def filter_capability(self, queryset, name, value):
        for item in self._capabilities():
            if connection.vendor == "postgresql":
                queryset = queryset.filter(capabilities__contains=[item])
            else:
                # JSON containment is not portable: match the quoted name in the JSON text
                queryset = queryset.alias(caps_text=Cast("capabilities", TextField())).filter(
                    caps_text__contains=f'"{item}"'
                )
        return queryset

    def filter_search(self, queryset, name, value):
        value = value.strip()[:255]
        if not value:
            return queryset
        return queryset.filter(Q(model_id__icontains=value) | Q(name__icontains=value))
