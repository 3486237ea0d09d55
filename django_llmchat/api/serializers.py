"""Serializers: strict input (unknown fields are errors), complete output (messages with
their tool calls, results, citations, attachments, tokens and cost)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db.models.manager import BaseManager
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import SkipField

from .. import inputs
from ..errors import InputError
from ..models import Attachment, Chat, LLMModel, Message, Run, ToolCall, Usage
from ..models.usage import USAGE_COST_COLUMNS
from ..prepared import known_relations, known_rows
from ..values import TOKEN_FIELDS
from .errors import invalid

__all__ = [
    "AttachmentSerializer",
    "ChatSerializer",
    "LLMModelSerializer",
    "MessageContentSerializer",
    "MessageCreateSerializer",
    "MessageSerializer",
    "RunSerializer",
    "ToolCallSerializer",
    "UsageSerializer",
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
    """The name of a registered tool (the schema lists them)."""


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
                for f in self._readable_fields
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


class AttachmentSerializer(CompiledRepresentation, serializers.ModelSerializer):
    url = serializers.SerializerMethodField()

    class Meta:
        model = Attachment
        fields = ("id", "filename", "mime_type", "size", "sha256", "url")

    @extend_schema_field(OpenApiTypes.URI)
    def get_url(self, obj: Attachment) -> str | None:
        return attachment_url(obj, self.context.get("request"))


def attachment_url(att: Attachment, request) -> str | None:
    if not att.file:
        return None
    try:
        url = att.file.url
    except (ValueError, NotImplementedError):
        return None
    return request.build_absolute_uri(url) if request is not None else url


class ToolResultSerializer(CompiledRepresentation, serializers.Serializer):
    message_id = serializers.IntegerField(source="pk")
    content = serializers.CharField()


class ToolCallSerializer(CompiledRepresentation, serializers.ModelSerializer):
    id = serializers.CharField(source="call_id", help_text="The provider's tool call id.")
    result = ToolResultSerializer(
        allow_null=True, read_only=True, help_text="The tool message answering this call."
    )

    class Meta:
        model = ToolCall
        fields = ("id", "name", "arguments", "approval", "result")


class MessageSerializer(CompiledRepresentation, serializers.ModelSerializer):
    """A transcript message as the API shows it (read only). Load a page with
    :func:`load_messages` first: its relations come in a constant number of queries."""

    relations = ("tool_calls", "attachments")

    thinking = BlankIsNullCharField(
        source="thinking_text", allow_null=True, help_text="The model's reasoning text."
    )
    tool_calls = ToolCallSerializer(many=True)
    tool_call_id = serializers.CharField(
        allow_null=True, help_text="For a tool message: the call it answers."
    )
    citations = ValuesField()
    server_tool_calls = ValuesField()
    attachments = AttachmentSerializer(many=True)
    tokens = TokensSerializer()
    cost = serializers.SerializerMethodField()
    cache_until_here = serializers.BooleanField(source="cache_boundary")
    summary_until = serializers.IntegerField(
        source="summary_until_id",
        allow_null=True,
        help_text="For a summary (a stored compaction of the history): the id of the last "
        "message it covers; requests send it instead of the messages up to that one.",
    )

    class Meta:
        model = Message
        fields = (
            "id",
            "role",
            "content",
            "model_id",
            "provider",
            "finish_reason",
            "thinking",
            "tool_calls",
            "tool_call_id",
            "citations",
            "server_tool_calls",
            "attachments",
            "tokens",
            "cost",
            "cache_until_here",
            "summary_until",
            "created_at",
        )
        read_only_fields = fields

    @extend_schema_field(CostSerializer)
    def get_cost(self, m: Message) -> dict[str, str]:
        """Priced for replies and for messages with token counts; ``{}`` otherwise."""
        if m.role != "assistant" and m.tokens.is_empty:
            return {}
        return _COST.to_representation(m.cost())


def load_messages(messages: list[Message]) -> list[Message]:
    """Load what :class:`MessageSerializer` shows of ``messages`` (fetched with
    ``select_related("parent_tool_call")``) in four queries whatever their number: tool
    calls with their results, attachments, usage rows, registry rows."""
    ids = [m.pk for m in messages]
    if not ids:
        return messages
    calls: dict[int, list] = {i: [] for i in ids}
    # the columns ToolCallSerializer and ToolResultSerializer show, and no more: a
    # result's other columns (its JSON ones above all) cost more to read than the rest
    shown = ("message_id", "call_id", "name", "arguments", "approval")
    found = ToolCall.objects.filter(message_id__in=ids).select_related("result")
    for call in found.only(*shown, "result__id", "result__content"):
        calls[call.message_id].append(call)
    attachments: dict[int, list] = {i: [] for i in ids}
    for att in Attachment.objects.filter(message_id__in=ids):
        attachments[att.message_id].append(att)
    usages: dict[int, list] = {i: [] for i in ids}
    priced = ("message_id", *TOKEN_FIELDS, *USAGE_COST_COLUMNS.values())  # tokens, cost
    for row in Usage.objects.filter(message_id__in=ids).only(*priced):
        usages[row.message_id].append(row)
    for m in messages:
        known_relations(
            m, tool_calls=calls[m.pk], attachments=attachments[m.pk], usages=usages[m.pk]
        )
    # only a message without usage rows prices from the registry
    model_ids = {
        m.model_id for m in messages if m.model_id and not usages[m.pk] and m.supplied_cost is None
    }
    if model_ids:
        registry: dict[str, LLMModel] = {}
        for row in LLMModel.objects.filter(model_id__in=model_ids):
            registry.setdefault(row.model_id, row)
        for m in messages:
            if m.model_id in model_ids:
                m.model_info = registry.get(m.model_id)
    return messages


class MessageContentSerializer(StrictFieldsMixin, serializers.Serializer):
    """A user message in a JSON body: ``content`` alone (files need multipart)."""

    content = StrictCharField(trim_whitespace=False, help_text="The prompt (not empty).")


class MessageCreateSerializer(StrictFieldsMixin, serializers.Serializer):
    """A user message: ``content`` and, in a multipart body, ``attachments`` files."""

    content = StrictCharField(trim_whitespace=False, help_text="The prompt (not empty).")
    attachments = serializers.ListField(
        child=serializers.FileField(allow_empty_file=True),  # emptiness: the input rule
        required=False,
        help_text="Files (multipart/form-data only); types are sniffed from the content.",
    )

    def validate_content(self, value: str) -> str:
        return checked(inputs.check_text, value)

    def to_internal_value(self, data):
        if isinstance(data, Mapping) and "attachments" in data and not hasattr(data, "getlist"):
            raise serializers.ValidationError(
                {"attachments": ["send attachments as files in a multipart/form-data body"]}
            )
        return super().to_internal_value(data)

    def validate_attachments(self, files: list) -> list[tuple[str, bytes, str]]:
        return checked(inputs.check_attachments, files)


class RunSerializer(serializers.ModelSerializer):
    """A run: the answer to one prompt (or one continuation), how it went and what it cost.
    ``error`` is safe to show a user; the provider's own words stay in the logs."""

    url = serializers.SerializerMethodField()
    chat = serializers.IntegerField(source="chat_id", read_only=True)
    prompt = serializers.IntegerField(source="prompt_id", read_only=True, allow_null=True)
    tokens = serializers.SerializerMethodField()
    cost = serializers.SerializerMethodField()
    events_url = serializers.SerializerMethodField(
        help_text="Follow the chat's runs live (Server-Sent Events); after a POST it carries "
        "the position to resume from, so a run that ends before the client connects is "
        "still seen."
    )
    messages_url = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = (
            "id",
            "url",
            "chat",
            "prompt",
            "status",
            "error",
            "error_type",
            "interrupt_reason",
            "cancel_requested",
            "attempt",
            "steps",
            "tokens",
            "cost",
            "created_at",
            "started_at",
            "finished_at",
            "events_url",
            "messages_url",
        )
        read_only_fields = fields

    def _absolute(self, path: str) -> str:
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path

    @extend_schema_field(OpenApiTypes.URI)
    def get_url(self, obj) -> str:
        return self._absolute(reverse("llmchat-api:run-detail", kwargs={"pk": obj.pk}))

    @extend_schema_field(TokensSerializer)
    def get_tokens(self, obj) -> dict[str, int]:
        return tokens_dict(obj.tokens)

    @extend_schema_field(CostSerializer)
    def get_cost(self, obj) -> dict[str, str]:
        return cost_dict(obj.cost())

    @extend_schema_field(OpenApiTypes.URI)
    def get_events_url(self, obj) -> str:
        from urllib.parse import urlencode

        path = reverse("llmchat-api:chat-events", kwargs={"pk": obj.chat_id})
        after = self.context.get("events_after")
        if after is not None:
            path += "?" + urlencode({"last_event_id": after})
        return self._absolute(path)

    @extend_schema_field(OpenApiTypes.URI)
    def get_messages_url(self, obj) -> str:
        return self._absolute(reverse("llmchat-api:chat-messages", kwargs={"pk": obj.chat_id}))


class MessageAcceptedSerializer(serializers.Serializer):
    message = MessageSerializer()
    run = RunSerializer()


# -- chats --------------------------------------------------------------------------------
class ChatSerializer(StrictFieldsMixin, serializers.ModelSerializer):
    """A chat: its model and provider, parameters, tools and context, its run status, and
    totals over its messages and provider attempts."""

    title = StrictCharField(max_length=255, required=False, allow_blank=True)
    model_id = StrictCharField(max_length=255, required=False)
    provider = ProviderField(max_length=64, required=False)
    params = JSONObjectField(
        required=False,
        help_text="Request parameters: temperature, max_tokens, top_p, stop, thinking, "
        "parallel_tool_calls, and vendor options under the provider's name.",
    )
    tools = serializers.ListField(
        child=ToolNameField(max_length=255),
        required=False,
        help_text="Names of registered tools.",
    )
    context = JSONObjectField(
        required=False, help_text="Context keys the chat's tools and agent can read."
    )
    history = serializers.JSONField(
        required=False,
        allow_null=True,
        help_text='What of the transcript each request sends: "window", "summarize", "all", '
        'a history processor\'s name (LLMCHAT["HISTORY_PROCESSORS"]), or an object of '
        'history options with "strategy" (an "estimator" is a name of '
        'LLMCHAT["TOKEN_ESTIMATORS"]); names, never dotted paths. null: the agent\'s or '
        "the project's policy.",
    )
    message_count = serializers.IntegerField(read_only=True)
    total_tokens = serializers.IntegerField(read_only=True, allow_null=True)
    total_cost = serializers.DecimalField(
        max_digits=20, decimal_places=10, read_only=True, allow_null=True
    )
    url = serializers.SerializerMethodField()
    messages_url = serializers.SerializerMethodField()
    events_url = serializers.SerializerMethodField()
    status = serializers.CharField(
        read_only=True,
        help_text="What the chat is doing: idle, queued, running or awaiting_approval.",
    )
    last_run = serializers.SerializerMethodField(
        help_text="The chat's latest run: its id, status and safe error (null before the first)."
    )

    class Meta:
        model = Chat
        fields = (
            "id",
            "url",
            "title",
            "model_id",
            "provider",
            "agent",
            "params",
            "tools",
            "context",
            "schema",
            "history",
            "status",
            "last_run",
            "message_count",
            "total_tokens",
            "total_cost",
            "messages_url",
            "events_url",
            "created_at",
            "updated_at",
        )
        read_only_fields = ("agent", "schema", "status", "created_at", "updated_at")

    def _url(self, name: str, obj: Chat) -> str:
        path = reverse(f"llmchat-api:{name}", kwargs={"pk": obj.pk})
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path

    @extend_schema_field(OpenApiTypes.URI)
    def get_url(self, obj: Chat) -> str:
        return self._url("chat-detail", obj)

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "properties": {
                "id": {"type": "integer"},
                "status": {"type": "string"},
                "error": {"type": "string"},
                "error_type": {"type": "string"},
                "url": {"type": "string", "format": "uri"},
            },
        }
    )
    def get_last_run(self, obj: Chat) -> dict[str, Any] | None:
        if hasattr(obj, "_last_run_id"):  # annotated by Chat.objects.with_totals()
            values = {
                name: getattr(obj, f"_last_run_{name}")
                for name in ("id", "status", "error", "error_type")
            }
        else:
            values = obj.runs.order_by("-id").values("id", "status", "error", "error_type").first()
        if not values or values["id"] is None:
            return None
        request = self.context.get("request")
        path = reverse("llmchat-api:run-detail", kwargs={"pk": values["id"]})
        return {**values, "url": request.build_absolute_uri(path) if request else path}

    @extend_schema_field(OpenApiTypes.URI)
    def get_messages_url(self, obj: Chat) -> str:
        return self._url("chat-messages", obj)

    @extend_schema_field(OpenApiTypes.URI)
    def get_events_url(self, obj: Chat) -> str:
        return self._url("chat-events", obj)

    def to_representation(self, instance: Chat) -> dict[str, Any]:
        for name in ("message_count", "total_tokens", "total_cost"):
            if not hasattr(instance, name):
                setattr(instance, name, 0 if name == "message_count" else None)
        return super().to_representation(instance)

    def validate_model_id(self, value: str) -> str:
        return checked(inputs.check_model_id, value)

    def validate_params(self, value: Any) -> dict[str, Any]:
        return checked(inputs.check_params, value)

    def validate_context(self, value: Any) -> dict[str, Any]:
        return checked(inputs.check_context, value)

    def validate_tools(self, value: list[str]) -> list[str]:
        return checked(inputs.check_tools, value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """The fields together (:func:`django_llmchat.inputs.check_choice`): the
        provider and model, ``max_tokens`` within the model's output, the history policy
        with the chat's model."""
        try:
            return inputs.check_choice(attrs, self.instance)
        except InputError as exc:
            raise invalid(exc) from None


class ChatUsageModelSerializer(serializers.Serializer):
    provider = serializers.CharField()
    model_id = serializers.CharField()
    attempts = serializers.IntegerField(help_text="Provider attempts (retries included).")
    tokens = TokensSerializer()
    cost = CostSerializer()


class UsageSerializer(serializers.Serializer):
    """Token and cost totals of a chat, and per model."""

    chat = serializers.IntegerField()
    tokens = TokensSerializer()
    cost = CostSerializer()
    attempts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Provider attempts by status."
    )
    by_model = ChatUsageModelSerializer(many=True)


class LLMModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = LLMModel
        fields = (
            "id",
            "provider",
            "model_id",
            "name",
            "family",
            "context_window",
            "max_output_tokens",
            "modalities",
            "capabilities",
            "pricing",
        )
        read_only_fields = fields
