"""The transcript as the API shows it (a message with its tool calls and their results,
citations, attachments, tokens and cost, a page of them loaded in constant queries) and a
new user message as a request sends it."""

from __future__ import annotations

from collections.abc import Mapping

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .. import inputs
from ..db.prepared import known_relations
from ..models import Attachment, LLMModel, Message, ToolCall, Usage
from ..models.branches import siblings
from ..models.usage import USAGE_COST_COLUMNS
from ..values import TOKEN_FIELDS
from .fields import (
    BlankIsNullCharField,
    CompiledRepresentation,
    CostSerializer,
    DoubleTextingField,
    StrictCharField,
    StrictFieldsMixin,
    TokensSerializer,
    ValuesField,
    checked,
    cost_dict,
)

__all__ = [
    "AttachmentSerializer",
    "BranchSwitchSerializer",
    "MessageContentSerializer",
    "MessageCreateSerializer",
    "MessageSerializer",
    "ToolCallSerializer",
    "attachment_url",
    "load_messages",
]


# -- the transcript -----------------------------------------------------------------------
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
    estimated = serializers.BooleanField(
        source="is_estimated",
        help_text="Whether `tokens` and `cost` are partly our estimate: a reply stopped "
        "before the vendor reported its counts is billed for the request's estimated input "
        "and the output counted from what streamed.",
    )
    cache_until_here = serializers.BooleanField(source="cache_boundary")
    summary_until = serializers.IntegerField(
        source="summary_until_id",
        allow_null=True,
        help_text="For a summary (a stored compaction of the history): the id of the last "
        "message it covers; requests send it instead of the messages up to that one.",
    )
    parent = serializers.IntegerField(
        source="parent_id",
        allow_null=True,
        help_text="The id of the message this one follows in the conversation's tree; null "
        "for system messages, a first message, and a prompt still queued behind a run.",
    )
    siblings = serializers.SerializerMethodField(
        help_text="The ids of the messages with the same parent (regenerated replies, "
        "edited prompts), this one included, oldest first: `siblings.index(id) + 1` of "
        "`len(siblings)` is its place among them. A system message has only itself."
    )
    on_path = serializers.BooleanField(
        help_text="Whether the message is on the chat's active path (what the next "
        "request is built from); false for the messages of other branches."
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
            "estimated",
            "cache_until_here",
            "summary_until",
            "parent",
            "siblings",
            "on_path",
            "created_at",
        )
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.IntegerField()))
    def get_siblings(self, m: Message) -> list[int]:
        found = m.__dict__.get("sibling_ids")
        if found is None:  # a message not loaded with load_messages: one query
            found = siblings([m])[m.pk]
        return found

    @extend_schema_field(CostSerializer)
    def get_cost(self, m: Message) -> dict[str, str]:
        """Priced for replies and for messages with token counts; ``{}`` otherwise."""
        if m.role != "assistant" and m.tokens.is_empty:
            return {}
        return cost_dict(m.cost())


def load_messages(messages: list[Message]) -> list[Message]:
    """Load what :class:`MessageSerializer` shows of ``messages`` (fetched with
    ``select_related("parent_tool_call")``) in five queries whatever their number: tool
    calls with their results, attachments, usage rows, siblings, registry rows."""
    ids = [m.pk for m in messages]
    if not ids:
        return messages
    alternatives = siblings(messages)
    for m in messages:
        m.sibling_ids = alternatives[m.pk]
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
    # tokens, cost and whether they are estimated
    priced = ("message_id", "estimated", *TOKEN_FIELDS, *USAGE_COST_COLUMNS.values())
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
        registry = registry_rows(model_ids)
        for m in messages:
            if m.model_id in model_ids:
                m.model_info = registry.get(m.model_id)
    return messages


def registry_rows(model_ids) -> dict[str, LLMModel]:
    """``{model id: its registry row}`` for ``model_ids`` (the first row of a model listed
    for several providers), in one query."""
    registry: dict[str, LLMModel] = {}
    for row in LLMModel.objects.filter(model_id__in=model_ids):
        registry.setdefault(row.model_id, row)
    return registry


# -- a new user message -------------------------------------------------------------------
PARENT_HELP = (
    "Start a new branch: the id of the message of this chat the prompt follows (an "
    "assistant reply or a user message; not a tool result or a system message). The "
    "active path's messages after it leave the path (kept: switch back to them with "
    "`chats/{id}/switch/`) and the reply answers the new path alone. `null`: before the "
    "first message (an edit of the first prompt). Absent: after the active leaf. Refused "
    "(409) while a run of the chat is in progress."
)


class MessageContentSerializer(StrictFieldsMixin, serializers.Serializer):
    """A user message in a JSON body: ``content`` and an optional ``parent`` (files need
    multipart)."""

    content = StrictCharField(trim_whitespace=False, help_text="The prompt (not empty).")
    parent = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=2**63 - 1, help_text=PARENT_HELP
    )
    double_texting = DoubleTextingField(required=False)


class _FormParentField(serializers.IntegerField):
    """``parent`` of a multipart body: a form field is text, so null is ``null`` (as a
    JSON value is written) or empty."""

    def get_value(self, dictionary):
        value = super().get_value(dictionary)
        return None if value == "null" and hasattr(dictionary, "getlist") else value


class _AttachmentsField(serializers.ListField):
    """Files of a multipart body; the schema states ``LLMCHAT["MAX_ATTACHMENTS"]``."""


class MessageCreateSerializer(StrictFieldsMixin, serializers.Serializer):
    """A user message: ``content``, an optional ``parent`` and, in a multipart body,
    ``attachments`` files."""

    content = StrictCharField(trim_whitespace=False, help_text="The prompt (not empty).")
    parent = _FormParentField(
        required=False, allow_null=True, min_value=1, max_value=2**63 - 1, help_text=PARENT_HELP
    )
    double_texting = DoubleTextingField(required=False)
    attachments = _AttachmentsField(
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


class BranchSwitchSerializer(StrictFieldsMixin, serializers.Serializer):
    """The message whose branch becomes the chat's active path."""

    message = serializers.IntegerField(
        min_value=1,
        max_value=2**63 - 1,
        help_text="The id of a message of the chat: its branch becomes the active path.",
    )
