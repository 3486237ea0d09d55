"""The serializers' fields (``api/fields.py``): strings that are strings, unknown keys
refused by name, and ``CompiledRepresentation`` rendering as DRF's ``Serializer`` does
(sources, nesting, ``None``, write-only fields left out) with its plan worked out once."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import pytest
from rest_framework import serializers

from django_llmchat.api.fields import (
    BlankIsNullCharField,
    CompiledRepresentation,
    StrictCharField,
    StrictFieldsMixin,
    ValuesField,
    cost_dict,
    tokens_dict,
)
from django_llmchat.values import Citation, Cost, Tokens


class Inner(CompiledRepresentation, serializers.Serializer):
    name = serializers.CharField()


class Outer(CompiledRepresentation, serializers.Serializer):
    title = serializers.CharField()
    label = serializers.CharField(source="meta.label")
    secret = serializers.CharField(write_only=True)
    inner = Inner()
    items = Inner(many=True)
    whole = serializers.SerializerMethodField()

    def get_whole(self, obj):
        return obj.title.upper()


class Omitting(CompiledRepresentation, serializers.Serializer):
    omit_none = True
    a = serializers.IntegerField(allow_null=True)
    b = serializers.IntegerField(allow_null=True)


def _row(**kw):
    return SimpleNamespace(
        title="t",
        meta=SimpleNamespace(label="L"),
        secret="s",
        inner=SimpleNamespace(name="n"),
        items=[SimpleNamespace(name="x")],
        **kw,
    )


def test_renders_as_drfs_serializer_without_the_write_only_fields():
    class Plain(serializers.Serializer):
        title = serializers.CharField()
        label = serializers.CharField(source="meta.label")
        secret = serializers.CharField(write_only=True)
        inner = Inner()
        items = Inner(many=True)

    row = _row()
    ours = Outer(row).data
    assert ours == {**Plain(row).data, "whole": "T"}
    assert "secret" not in ours and ours["items"] == [{"name": "x"}]


def test_the_plan_is_worked_out_once_per_serializer():
    serializer = Outer()
    plan = serializer._compiled_plan()
    assert serializer._compiled_plan() is plan
    assert [name for name, _get, _render in plan] == ["title", "label", "inner", "items", "whole"]


def test_none_stays_none_or_is_left_out():
    assert Omitting(SimpleNamespace(a=1, b=None)).data == {"a": 1}
    row = _row()
    row.inner = None
    assert Outer(row).data["inner"] is None


def test_tokens_and_cost_dicts():
    assert tokens_dict(Tokens(input_tokens=3, output_tokens=0)) == {
        "input_tokens": 3,
        "output_tokens": 0,
        "total_tokens": 3,
    }
    assert cost_dict(Cost(input=Decimal("0.1"), total=Decimal("0.10000000001"))) == {
        "input": "0.1000000000",
        "total": "0.1000000000",
    }
    assert cost_dict(Cost()) == {}


@pytest.mark.parametrize("value", [1, 1.5, True, None, ["a"], {"a": 1}])
def test_a_strict_char_field_takes_strings_only(value):
    field = StrictCharField(allow_null=False)
    with pytest.raises(serializers.ValidationError):
        field.run_validation(value)
    assert field.run_validation(" ok ") == "ok"


def test_the_length_is_of_the_value_sent():
    field = StrictCharField(max_length=3)
    assert field.run_validation(" ab") == "ab"
    with pytest.raises(serializers.ValidationError):
        field.run_validation(" ab ")  # four characters sent, whatever they trim to


def test_unknown_keys_are_refused_by_name():
    class Strict(StrictFieldsMixin, serializers.Serializer):
        name = serializers.CharField()
        shown = serializers.CharField(read_only=True)

    serializer = Strict(data={"name": "x", "shown": "y", "other": 1})
    assert not serializer.is_valid()
    assert serializer.errors == {"other": ["unknown field"], "shown": ["unknown field"]}
    assert Strict(data={"name": "x"}).is_valid()


def test_values_and_blank_is_null():
    cited = Citation.from_dict({"url": "u"})
    assert ValuesField().to_representation([cited, {"a": 1}]) == [cited.to_dict(), {"a": 1}]
    field = BlankIsNullCharField()
    assert field.to_representation("") is None and field.to_representation("x") == "x"
