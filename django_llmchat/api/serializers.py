"""Serializers: strict input (unknown fields are errors), complete output (messages with
their tool calls, results, citations, attachments, tokens and cost)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db.models.manager import BaseManager
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.fields import SkipField

from ..conf import settings
from ..context import Context
from ..models import Attachment, Chat, LLMModel, Message, Run, ToolCall, Usage
from ..models.usage import USAGE_COST_COLUMNS
from ..prepared import known_relations, known_rows
from ..values import TOKEN_FIELDS
from .uploads import check_upload

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

MAX_JSON_DEPTH = 16
MAX_TOOLS = 128


# -- strict input ---------------------------------------------------------------------------
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
    with ``LLMCHAT["ALLOWED_MODELS"]``, one it names."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        names = configured_provider_names()
        if value not in names:
            raise serializers.ValidationError(
                f"provider {value[:64]!r} is not configured; one of: {', '.join(names) or '-'}"
            )
        return value


class ToolNameField(StrictCharField):
    """The name of a registered tool (the schema lists them)."""


@extend_schema_field({"type": "object", "additionalProperties": {}})
class JSONObjectField(serializers.JSONField):
    """A JSON object (checked by the serializer's ``validate_<field>``)."""


def check_json(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Reject what JSON columns cannot store everywhere: non-finite numbers, NUL
    characters (PostgreSQL), nesting deeper than ``max_depth``."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise serializers.ValidationError(f"nested deeper than {max_depth} levels")
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str) or "\x00" in key:
                    raise serializers.ValidationError("keys must be strings without NUL")
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            if "\x00" in item:
                raise serializers.ValidationError("strings must not contain NUL characters")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise serializers.ValidationError("numbers must be finite")
        elif item is not None and not isinstance(item, bool | int):
            raise serializers.ValidationError(f"unsupported value {type(item).__name__}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_params(params: dict[str, Any]) -> None:
    """Types of the request parameters the providers read; others pass through."""
    from ..providers import PROVIDERS

    errors: list[str] = []

    def number(key: str, low: float, high: float) -> None:
        value = params.get(key)
        if value is not None and (not _is_number(value) or not low <= value <= high):
            errors.append(f"{key} must be a number between {low:g} and {high:g}")

    number("temperature", 0, 2)
    number("top_p", 0, 1)
    max_tokens = params.get("max_tokens")
    if max_tokens is not None and (
        type(max_tokens) is not int or not 1 <= max_tokens <= 10_000_000
    ):
        errors.append("max_tokens must be an integer between 1 and 10000000")
    for key in ("stop", "stop_sequences"):
        value = params.get(key)
        if value is not None and not (
            isinstance(value, str)
            or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        ):
            errors.append(f"{key} must be a string or a list of strings")
    thinking = params.get("thinking")
    if thinking is not None and not isinstance(thinking, dict | bool):
        errors.append("thinking must be an object")
    ptc = params.get("parallel_tool_calls")
    if ptc is not None and not isinstance(ptc, bool):
        errors.append("parallel_tool_calls must be a boolean")
    names = sorted(set(PROVIDERS) | set(settings.PROVIDERS or {}))
    for name in names:
        if name in params and not isinstance(params[name], dict):
            errors.append(f"{name} (provider options) must be an object")
    if not errors:
        from ..vendor_options import problems

        errors.extend(problems(params, [n for n in names if n in params]))
    if errors:
        raise serializers.ValidationError(errors)


def configured_provider_names() -> list[str]:
    """The providers the API accepts: those in ``LLMCHAT["PROVIDERS"]`` and the built-in
    ones the environment configures (their API key variable, or Ollama's URL), narrowed
    to those ``LLMCHAT["ALLOWED_MODELS"]`` names when it is set."""
    from ..providers import API_KEY_ENV, BASE_URL_ENV, PROVIDERS

    names = set(settings.PROVIDERS or {})
    for name in PROVIDERS:
        envs = (*API_KEY_ENV.get(name, ()), *BASE_URL_ENV.get(name, ()))
        if any(os.environ.get(env) for env in envs):
            names.add(name)
    allowed = settings.ALLOWED_MODELS
    if allowed is not None:
        names &= {entry.split("/", 1)[0] for entry in allowed}
    return sorted(names)


def model_allowed(provider: str, model_id: str) -> bool:
    """Whether ``LLMCHAT["ALLOWED_MODELS"]`` (when set) lists ``provider/model_id`` or
    ``provider/*``."""
    allowed = settings.ALLOWED_MODELS
    if allowed is None:
        return True
    return f"{provider}/{model_id}" in allowed or f"{provider}/*" in allowed


def provider_names() -> list[str]:
    """Provider names a chat may use: the built-in ones and those in ``LLMCHAT``."""
    from ..providers import PROVIDERS

    return sorted(set(PROVIDERS) | set(settings.PROVIDERS or {}))


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
        child=serializers.FileField(allow_empty_file=True),  # emptiness: check_upload
        required=False,
        help_text="Files (multipart/form-data only); types are sniffed from the content.",
    )

    def validate_content(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("must not be empty")
        limit = settings.MAX_CONTENT_LENGTH
        if limit and len(value) > limit:
            raise serializers.ValidationError(
                f"is too long ({len(value)} characters; at most {limit})"
            )
        return value

    def to_internal_value(self, data):
        if isinstance(data, Mapping) and "attachments" in data and not hasattr(data, "getlist"):
            raise serializers.ValidationError(
                {"attachments": ["send attachments as files in a multipart/form-data body"]}
            )
        return super().to_internal_value(data)

    def validate_attachments(self, files: list) -> list[tuple[str, bytes, str]]:
        limit = settings.MAX_ATTACHMENTS
        if limit is not None and len(files) > limit:
            raise serializers.ValidationError(f"too many files ({len(files)}; at most {limit})")
        return [check_upload(f) for f in files]


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
def validate_history(value: Any) -> Any:
    from ..history import history_errors

    if value is not None:
        problems = history_errors(value)
        if problems:
            raise serializers.ValidationError(problems[0])
    return value


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
        validators=[validate_history],
        help_text='What of the transcript each request sends: "window", "summarize", "all", '
        "the dotted path of a history processor, or a dict of history options with "
        "\"strategy\"; null: the agent's or the project's policy.",
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
        if not value.strip():
            raise serializers.ValidationError("must not be empty")
        return value

    def validate_params(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be an object")
        check_json(value)
        _check_params(value)
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """A provider or model sent is configured and allowed (with the chat's, or the
        default, other half), and ``params.max_tokens`` fits the model's maximum output."""
        chat = self.instance
        provider = attrs.get("provider") or (chat.provider if chat else settings.DEFAULT_PROVIDER)
        model_id = attrs.get("model_id") or (chat.model_id if chat else settings.DEFAULT_MODEL)
        # what the client chooses; a chat left on the project's defaults is the project's
        if "provider" in attrs or "model_id" in attrs:
            if provider not in configured_provider_names():
                field = "provider" if "provider" in attrs else "model_id"
                raise serializers.ValidationError(
                    {field: [f"provider {provider[:64]!r} is not configured"]}
                )
            if not model_allowed(provider, model_id):
                raise serializers.ValidationError(
                    {"model_id": [f"model {model_id[:64]!r} of {provider!r} is not allowed"]}
                )
        params = attrs.get("params")
        max_tokens = (params or {}).get("max_tokens")
        if params is not None and isinstance(max_tokens, int):
            info = LLMModel.objects.filter(provider=provider, model_id=model_id).first()
            ceiling = info.max_output_tokens if info is not None else None
            if ceiling and max_tokens > ceiling:
                raise serializers.ValidationError(
                    {"params": [f"max_tokens must be at most {ceiling} for {model_id}"]}
                )
        return attrs

    def validate_context(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be an object")
        check_json(value)
        reserved = sorted(set(value) & set(Context.RESERVED_KEYS))
        if reserved:
            raise serializers.ValidationError(f"reserved keys: {', '.join(reserved)}")
        return value

    def validate_tools(self, value: list[str]) -> list[str]:
        from ..tools import registered_tools

        if len(value) > MAX_TOOLS:
            raise serializers.ValidationError(f"at most {MAX_TOOLS} tools")
        known = registered_tools()
        unknown = [name for name in value if name not in known]
        if unknown:
            raise serializers.ValidationError(
                f"unknown tools: {', '.join(repr(n[:64]) for n in unknown[:5])}"
            )
        return list(dict.fromkeys(value))


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
