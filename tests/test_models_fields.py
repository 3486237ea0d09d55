"""``ValueListField`` (``models/fields.py``): a JSON list whose items are value objects
when assigned, read, deferred and loaded; stored as plain JSON; a plain JSONField to
migrations."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from django_llmchat.models import Chat, Message
from django_llmchat.models.fields import ValueListField
from django_llmchat.values import Citation

pytestmark = pytest.mark.django_db


def test_assigned_dicts_read_as_values_and_values_stay():
    message = Message(citations=[{"url": "https://a.example"}])
    assert isinstance(message.citations[0], Citation)
    assert message.citations[0].url == "https://a.example"
    value = Citation.from_dict({"url": "https://b.example"})
    message.citations = [value, "kept as it is"]
    assert message.citations == [value, "kept as it is"]
    message.citations = None
    assert message.citations is None


def test_stored_as_plain_json_and_loaded_as_values():
    chat = Chat.objects.create()
    value = Citation.from_dict({"url": "https://a.example", "title": "A"})
    message = Message.objects.create(chat=chat, role="assistant", citations=[value])
    with connection.cursor() as cursor:
        table = Message._meta.db_table
        cursor.execute(f"SELECT citations FROM {table} WHERE id = %s", [message.pk])
        raw = cursor.fetchone()[0]
    raw = json.loads(raw) if isinstance(raw, str | bytes) else raw
    assert raw == [value.to_dict()]
    loaded = Message.objects.get(pk=message.pk)
    assert loaded.citations == [value] and isinstance(loaded.citations[0], Citation)
    deferred = Message.objects.defer("citations").get(pk=message.pk)
    assert deferred.citations == [value] and isinstance(deferred.citations[0], Citation)


def test_a_field_without_a_value_class_is_plain_json():
    field = ValueListField()
    assert field.to_values([{"a": 1}]) == [{"a": 1}] and field.default is list and field.blank
    assert ValueListField(value_class=Citation).to_values({"not": "a list"}) == {"not": "a list"}


def test_migrations_see_a_plain_json_field():
    field = Message._meta.get_field("citations")
    name, path, args, kwargs = field.deconstruct()
    assert path == "django.db.models.JSONField" and "value_class" not in kwargs
