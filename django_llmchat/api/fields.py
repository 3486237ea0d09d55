"""The fields the API's serializers are made of: strict input (a string is a string, a
provider is a configured one, the rules of :mod:`django_llmchat.inputs` as field errors)
and fast output (:class:`CompiledRepresentation`, value objects, tokens and cost)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db.models.manager import BaseManager
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import SkipField

from .. import inputs
from ..db.prepared import known_rows
from ..errors import InputError
from .errors import invalid

__all__ = [
    "BlankIsNullCharField",
    "CompiledRepresentation",
    "CostSerializer",
    "HistoryPolicyField",
    "JSONObjectField",
    "ProviderField",
    "StrictCharField",
    "StrictFieldsMixin",
    "TokensSerializer",
    "ToolNameField",
    "ValuesField",
    "checked",
    "cost_dict",
    "tokens_dict",
]


# -- strict input ---------------------------------------------------------------------------
def checked(rule, value: Any, *args: Any, **kwargs: Any) -> Any:
    """``rule(value, ...)`` of :mod:`django_llmchat.inputs` in a ``validate_<field>``
    (or a field's ``to_internal_value``): its refusal is that field's reasons."""
    try:
        return rule(value, *args, **kwargs)
    except InputError as exc:
        raise invalid(exc, nested=False) from None


class StrictFieldsMixin:
    """Reject keys that are not writable fields of the serializer, naming them."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            writable = {name for name, field in self.fields.items() if not field.read_only}
            unknown = sorted(str(key) for key in data.keys() if key not in writable)
            if unknown:
                raise serializers.ValidationError({key: ["unknown field"] for key in unknown})
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A string and nothing else (DRF's ``CharField`` turns numbers into strings)."""

    default_error_messages = {"invalid": "must be a string"}

    def run_validation(self, data=serializers.empty):
        # the schema's maxLength is of the value sent, before surrounding whitespace is
        # trimmed: a longer one is refused whatever it trims to
        if isinstance(data, str) and self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().run_validation(data)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class ProviderField(StrictCharField):
    """A configured provider's name (the schema lists them): one in
    ``LLMCHAT["PROVIDERS"]``, or a built-in one whose key (or URL) the environment gives;
    with ``LLMCHAT["ALLOWED_MODELS"]``, one it names (:func:`inputs.check_provider`)."""

    def to_internal_value(self, data):
        return checked(inputs.check_provider, super().to_internal_value(data))


class ToolNameField(StrictCharField):
    """The name of a registered tool or of a configured MCP server's tools (``mcp:...``):
    an open string in the schema (a pattern and the names known as examples)."""


class HistoryPolicyField(serializers.JSONField):
    """A chat's history policy (:func:`inputs.check_history`): ``null``, a strategy's
    name, or an object of history options; the schema states each option."""


@extend_schema_field({"type": "object", "additionalProperties": {}})
class JSONObjectField(serializers.JSONField):
    """A JSON object (checked by the serializer's ``validate_<field>``)."""


# -- output pieces ------------------------------------------------------------------------
class CompiledRepresentation:
    """``to_representation`` from the declared fields, as DRF's ``Serializer`` does it
    (each field's ``source``, ``None`` stays ``None``, nested serializers render nested),
    with what each field reads and how it renders worked out once per serializer: a page
    of rows pays no per-row field lookup. ``relations`` name many-valued sources read
    from the rows loaded with the instance (no queryset built per row); with
    ``omit_none`` a ``None`` value leaves its key out."""

    relations: tuple[str, ...] = ()
    omit_none = False

    def _compiled_plan(self) -> list:
        plan = self.__dict__.get("_compiled_plan_cache")
        if plan is None:
            plan = [
                (f.field_name, _getter(f, self.relations), _renderer(f))
                for f in self.fields.values()
                if not f.write_only
            ]
            self.__dict__["_compiled_plan_cache"] = plan
        return plan

    def to_representation(self, instance):
        out = {}
        omit = self.omit_none
        for name, get, render in self._compiled_plan():
            try:
                value = get(instance)
            except SkipField:
                continue
            if value is None:
                if not omit:
                    out[name] = None
                continue
            out[name] = render(value)
        return out


def _getter(field, relations: tuple[str, ...]):
    attrs = field.source_attrs
    if not attrs:  # source="*"
        return lambda instance: instance
    if len(attrs) > 1:
        return field.get_attribute
    name = attrs[0]
    if name in relations:

        def related(instance):
            rows = known_rows(instance, name)
            return rows if rows is not None else list(getattr(instance, name).all())

        return related
    slow = field.get_attribute

    def attribute(instance):
        if isinstance(instance, dict):
            return slow(instance)
        try:
            return getattr(instance, name)
        except (AttributeError, ObjectDoesNotExist):
            return slow(instance)  # DRF's rules: a default, None when nullable, or skip

    return attribute


def _renderer(field):
    if isinstance(field, serializers.ListSerializer):
        child = field.child.to_representation

        def many(value):
            rows = value.all() if isinstance(value, BaseManager) else value
            return [child(row) for row in rows]

        return many
    return field.to_representation


class ValuesField(serializers.ListField):
    """A list of value objects (``Citation``, ``ServerToolCall``) as their dicts."""

    def __init__(self, **kwargs):
        super().__init__(child=serializers.DictField(), **kwargs)

    def to_representation(self, data):
        return [item.to_dict() if hasattr(item, "to_dict") else dict(item) for item in data]


class BlankIsNullCharField(serializers.CharField):
    """Text that reads as ``null`` when blank."""

    def to_representation(self, value):
        return str(value) if value else None


class TokensSerializer(CompiledRepresentation, serializers.Serializer):
    """Token counts; a missing count was not reported."""

    omit_none = True

    input_tokens = serializers.IntegerField(required=False, allow_null=True)
    output_tokens = serializers.IntegerField(required=False, allow_null=True)
    cache_read_tokens = serializers.IntegerField(required=False, allow_null=True)
    cache_write_tokens = serializers.IntegerField(required=False, allow_null=True)
    thinking_tokens = serializers.IntegerField(required=False, allow_null=True)
    total_tokens = serializers.IntegerField(required=False, allow_null=True)


class CostSerializer(CompiledRepresentation, serializers.Serializer):
    """USD as decimal strings; a missing part means the price is unknown."""

    omit_none = True

    input = serializers.DecimalField(max_digits=20, decimal_places=10, required=False)
    output = serializers.DecimalField(max_digits=20, decimal_places=10, required=False)
    cache_read = serializers.DecimalField(max_digits=20, decimal_places=10, required=False)
    cache_write = serializers.DecimalField(max_digits=20, decimal_places=10, required=False)
    thinking = serializers.DecimalField(max_digits=20, decimal_places=10, required=False)
    total = serializers.DecimalField(max_digits=20, decimal_places=10, required=False)


_TOKENS = TokensSerializer()
_COST = CostSerializer()


def tokens_dict(tokens) -> dict[str, int]:
    """``Tokens`` as :class:`TokensSerializer` renders them."""
    return _TOKENS.to_representation(tokens)


def cost_dict(cost) -> dict[str, str]:
    """``Cost`` as :class:`CostSerializer` renders it: USD parts as decimal strings with
    ten places (sums of a database come with more)."""
    return _COST.to_representation(cost)


DOUBLE_TEXTING_HELP = (
    "What this message does while a run of the chat is queued or working: `enqueue` "
    "(answered after it), `reject` (refused: 409 `double_texting_rejected`), `interrupt` "
    "(the run stops, its partial reply kept) or `rollback` (the run stops, its partial "
    "reply and steps deleted). Default: the chat's `double_texting`, else "
    '`LLMCHAT["DOUBLE_TEXTING"]`.'
)


class DoubleTextingField(serializers.ChoiceField):
    """A double-texting policy (:mod:`django_llmchat.runs.policy`)."""

    def __init__(self, **kwargs):
        from ..runs.policy import POLICIES

        kwargs.setdefault("help_text", DOUBLE_TEXTING_HELP)
        super().__init__(POLICIES, **kwargs)
