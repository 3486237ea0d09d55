"""A JSON list field whose items read back as typed values (Citation, ServerToolCall)."""

from __future__ import annotations

from typing import Any

from django.db import models

from ..db.prepared import DeferredAttribute


def _to_plain(item: Any) -> Any:
    return item.to_dict() if hasattr(item, "to_dict") else item


class _ValueListDescriptor(DeferredAttribute):
    def __set__(self, instance: models.Model, value: Any) -> None:
        instance.__dict__[self.field.attname] = self.field.to_values(value)


class ValueListField(models.JSONField):
    """Stores a list of value objects as JSON; reads and assigns them as ``value_class``."""

    descriptor_class = _ValueListDescriptor

    def __init__(self, *args: Any, value_class: type | None = None, **kwargs: Any):
        self.value_class = value_class
        kwargs.setdefault("default", list)
        kwargs.setdefault("blank", True)
        super().__init__(*args, **kwargs)

    def deconstruct(self):
        name, _path, args, kwargs = super().deconstruct()
        # Migrations see a plain JSONField: the value class is behaviour, not schema.
        return name, "django.db.models.JSONField", args, kwargs

    def to_values(self, value: Any) -> Any:
        if value is None or self.value_class is None or not isinstance(value, list):
            return value
        return [
            self.value_class.from_dict(item) if isinstance(item, dict) else item for item in value
        ]

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        return self.to_values(super().from_db_value(value, expression, connection))

    def get_prep_value(self, value: Any) -> Any:
        if isinstance(value, list):
            value = [_to_plain(item) for item in value]
        return super().get_prep_value(value)
