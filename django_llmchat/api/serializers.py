"""Serializers: strict input (unknown fields are errors), complete output. Chats, runs,
usage totals and the model registry are here; the transcript's messages in
:mod:`.message_serializers`, the fields all are made of in :mod:`.fields` (both
importable from here too)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .. import inputs
from ..catalog.registry import SYNCED_FIELDS
from ..errors import InputError
from ..models import Chat, LLMModel, Run
from .chat_filters import StrictBooleanField, TagField
from .errors import invalid
from .fields import (
    CostSerializer,
    DoubleTextingField,
    HistoryPolicyField,
    JSONObjectField,
    ProviderField,
    StrictCharField,
    StrictFieldsMixin,
    TokensSerializer,
    ToolNameField,
    checked,
    cost_dict,
    tokens_dict,
)
from .message_serializers import (
    AttachmentSerializer,
    BranchSwitchSerializer,
    MessageContentSerializer,
    MessageCreateSerializer,
    MessageSerializer,
    ToolCallSerializer,
    attachment_url,
    load_messages,
)

__all__ = [
    "AttachmentSerializer",
    "BranchSwitchSerializer",
    "ChatSerializer",
    "CostSerializer",
    "LLMModelSerializer",
    "MessageAcceptedSerializer",
    "MessageContentSerializer",
    "MessageCreateSerializer",
    "MessageSerializer",
    "ProviderField",
    "RunSerializer",
    "StrictCharField",
    "TokensSerializer",
    "ToolCallSerializer",
    "ToolNameField",
    "UsageSerializer",
    "attachment_url",
    "cost_dict",
    "load_messages",
    "tokens_dict",
]


# -- runs ---------------------------------------------------------------------------------
class RunSerializer(serializers.ModelSerializer):
    """A run: the answer to one prompt (or one continuation), how it went and what it cost.
    ``error`` is safe to show a user; the provider's own words stay in the logs."""

    url = serializers.SerializerMethodField()
    chat = serializers.IntegerField(source="chat_id", read_only=True)
    prompt = serializers.IntegerField(source="prompt_id", read_only=True, allow_null=True)
    tokens = serializers.SerializerMethodField()
    cost = serializers.SerializerMethodField()
    estimated = serializers.BooleanField(
        read_only=True,
        help_text="Whether `tokens` and `cost` are partly our estimate: an attempt stopped "
        "(or lost) before the vendor reported its counts is billed for its estimated input "
        "and the output counted from what streamed.",
    )
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
            "estimated",
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
    title_source = serializers.CharField(
        read_only=True,
        help_text='Who wrote the title: "user" (set through the API, the admin or Python; '
        'never replaced), "model" or "prompt" (LLMCHAT["TITLES"]), "" while untitled.',
    )
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
        max_length=inputs.MAX_TOOLS,
        help_text="Names of registered tools.",
    )
    context = JSONObjectField(
        required=False, help_text="Context keys the chat's tools and agent can read."
    )
    history = HistoryPolicyField(
        required=False,
        allow_null=True,
        help_text='What of the transcript each request sends: "window", "summarize", "all", '
        'a history processor\'s name (LLMCHAT["HISTORY_PROCESSORS"]), or an object of '
        'history options with "strategy" (an "estimator" is a name of '
        'LLMCHAT["TOKEN_ESTIMATORS"]); names, never dotted paths. null: the agent\'s or '
        "the project's policy.",
    )
    double_texting = DoubleTextingField(
        required=False,
        allow_blank=True,
        help_text="What a new message does while a run of the chat is queued or working: "
        "`enqueue`, `reject`, `interrupt` or `rollback`; empty: "
        '`LLMCHAT["DOUBLE_TEXTING"]`. A message\'s own `double_texting` overrides it.',
    )
    archived = StrictBooleanField(
        required=False, help_text="Archived chats are left out of the list unless asked for."
    )
    pinned = StrictBooleanField(required=False, help_text="Pinned chats are listed first.")
    tags = serializers.ListField(
        child=TagField(),
        required=False,
        max_length=inputs.MAX_TAGS,
        help_text="The chat's tags, sorted (a PATCH replaces them all; repeats are dropped).",
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
    forked_from = serializers.IntegerField(
        source="forked_from_id",
        read_only=True,
        allow_null=True,
        help_text="The chat this one was forked from (`POST chats/{id}/fork/`), while it exists.",
    )
    forked_from_message = serializers.IntegerField(
        source="forked_from_message_id",
        read_only=True,
        allow_null=True,
        help_text="The source chat's message the fork's transcript ends with.",
    )

    class Meta:
        model = Chat
        fields = (
            "id",
            "url",
            "title",
            "title_source",
            "model_id",
            "provider",
            "agent",
            "params",
            "tools",
            "context",
            "schema",
            "history",
            "double_texting",
            "archived",
            "pinned",
            "tags",
            "status",
            "last_run",
            "forked_from",
            "forked_from_message",
            "message_count",
            "total_tokens",
            "total_cost",
            "messages_url",
            "events_url",
            "created_at",
            "updated_at",
        )
        read_only_fields = (
            "agent",
            "schema",
            "status",
            "title_source",
            "created_at",
            "updated_at",
        )

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

    def validate_tags(self, value: list[str]) -> list[str]:
        return checked(inputs.check_tags, value)

    def create(self, validated_data: dict[str, Any]) -> Chat:
        tags = validated_data.pop("tags", None)
        chat = super().create(validated_data)
        return chat.set_tags(tags) if tags else chat

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
    estimated = serializers.IntegerField(help_text="Of them, billed by our estimate.")
    tokens = TokensSerializer()
    cost = CostSerializer()


class PathUsageSerializer(serializers.Serializer):
    tokens = TokensSerializer()
    cost = CostSerializer()


class UsageSerializer(serializers.Serializer):
    """Token and cost totals of a chat, and per model."""

    chat = serializers.IntegerField()
    tokens = TokensSerializer()
    cost = CostSerializer()
    estimated = serializers.IntegerField(
        help_text="How many of the attempts are billed by our estimate (stopped or lost "
        "before the vendor reported their counts: the request's estimated input tokens and "
        "the output counted from what streamed); 0 when every count is the vendor's."
    )
    attempts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Provider attempts by status."
    )
    by_model = ChatUsageModelSerializer(many=True)
    path = PathUsageSerializer(
        help_text="The active path's messages alone (their attempts, and the supplied "
        "costs of hand-built ones): what the branch shown cost. The totals above are "
        "everything paid, every branch and failed attempt included."
    )


class LLMModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = LLMModel
        # what the registry syncs, but its sources (``metadata``) are kept out
        fields = ("id", "provider", "model_id", *(f for f in SYNCED_FIELDS if f != "metadata"))
        read_only_fields = fields
