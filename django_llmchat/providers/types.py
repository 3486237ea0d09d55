"""Provider-neutral request and response values.

The runner turns the transcript into a :class:`ProviderRequest`; a provider module turns
that into its wire format, and turns the answer (whole or streamed) into a
:class:`ProviderResponse` plus stream events. Nothing here knows about the ORM or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..values import Citation, ServerToolCall, Thinking, Tokens

# Normalized finish reasons (FinishReasonDone, seed 001) and how they are stored on
# Message.finish_reason (seed 000): "length" becomes "max_tokens"; the rest of the
# event vocabulary that has no message equivalent is stored as the raw wire value.
EVENT_FINISH_REASONS = (
    "stop",
    "length",
    "tool_calls",
    "content_filter",
    "context_window",
    "malformed_output",
    "error",
    "other",
)


def message_finish_reason(finish_reason: str | None, raw_finish_reason: str | None) -> str:
    """Map an event finish reason to the value stored on ``Message.finish_reason``."""
    if finish_reason in ("stop", "tool_calls", "content_filter"):
        return finish_reason
    if finish_reason == "length":
        return "max_tokens"
    return raw_finish_reason or finish_reason or ""


@dataclass(slots=True)
class AttachmentData:
    """A file sent with a message: bytes in memory plus its type."""

    mime_type: str
    data: bytes
    filename: str = ""


@dataclass(slots=True)
class ToolCallData:
    """A tool call requested by the model (or replayed from the transcript)."""

    call_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    thought_signature: str | None = None
    """Gemini's opaque signature; must be sent back unchanged with this call."""
    item_id: str | None = None
    """The provider's item id when it differs from the call id (OpenAI Responses ``fc_...``)."""
    ref: int | None = None
    """The stored ToolCall's primary key (vendors may repeat or omit ``call_id``)."""


@dataclass(slots=True)
class ProviderMessage:
    """One transcript entry as the provider needs it."""

    role: str  # system | user | assistant | tool
    content: str = ""
    attachments: list[AttachmentData] = field(default_factory=list)
    tool_calls: list[ToolCallData] = field(default_factory=list)
    tool_call_id: str | None = None
    """For role ``tool``: the call this result answers."""
    tool_name: str | None = None
    """For role ``tool``: the name of the tool that produced it (Gemini needs it)."""
    tool_call_ref: int | None = None
    """For role ``tool``: the stored ToolCall it answers (``ToolCallData.ref``)."""
    is_error: bool = False
    """For role ``tool``: the result is an error report."""
    thinking: Thinking | None = None
    reasoning_items: list[dict[str, Any]] = field(default_factory=list)
    """Provider-native reasoning blocks to replay verbatim (e.g. redacted thinking,
    encrypted Responses reasoning items), taken from ``Message.raw``."""
    cache_boundary: bool = False
    model_id: str | None = None
    provider: str | None = None
    """Which provider produced this (assistant) message: native extras replay only there."""
    ref: int | None = None
    """The stored Message's primary key (``None`` for messages not stored, such as an
    agent's instructions)."""


@dataclass(slots=True)
class ToolSpec:
    """A function the model may call."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


def vendor_id(value: Any) -> str | None:
    """A response id as the vendor sent it (a non-empty string), else ``None``."""
    return value if isinstance(value, str) and value else None


@dataclass(slots=True)
class ProviderRequest:
    """Everything one provider call needs."""

    model_id: str
    messages: list[ProviderMessage]
    tools: list[ToolSpec] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    """``temperature``, ``max_tokens``, ``thinking`` (``{"budget_tokens": N}`` or
    ``{"effort": "low"}``) and vendor options under the vendor's own key."""
    schema: dict[str, Any] | None = None
    """JSON Schema for structured output."""
    schema_name: str = "response"
    chat: Any = field(default=None, repr=False, compare=False)
    """The chat the request is for, handed to hooks such as ``LLMCHAT["REDACT"]``
    (``None`` for a request outside a chat)."""
    trace_context: Any = field(default=None, repr=False, compare=False)
    """The OpenTelemetry context the HTTP requests of the call are sent and read in (its
    current attempt's ``chat`` span), ``None`` when telemetry is off."""


@dataclass(slots=True)
class ProviderResponse:
    """One provider response, normalized."""

    content: str = ""
    tool_calls: list[ToolCallData] = field(default_factory=list)
    thinking: Thinking | None = None
    reasoning_items: list[dict[str, Any]] = field(default_factory=list)
    citations: list[Citation] = field(default_factory=list)
    server_tool_calls: list[ServerToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    """Event vocabulary (seed 001)."""
    raw_finish_reason: str | None = None
    tokens: Tokens = field(default_factory=Tokens)
    model_id: str | None = None
    raw: dict[str, Any] | None = None
    """The provider's response body (non-streaming) or a summary of the stream."""
    response_id: str | None = None
    """The vendor's id of the response (``chatcmpl-...``, ``resp_...``, ``msg_...``,
    Gemini's ``responseId``), when it sends one."""

    @property
    def message_finish_reason(self) -> str:
        """The finish reason as stored on ``Message.finish_reason`` (seed 000)."""
        return message_finish_reason(self.finish_reason, self.raw_finish_reason)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a provider module can do; the docs' feature matrix is generated from these."""

    streaming: bool = True
    tools: bool = True
    parallel_tool_calls: bool = True
    vision: bool = False
    pdf: bool = False
    thinking: bool = False
    structured_output: bool = False
    prompt_caching: str = "automatic"  # "explicit" | "automatic" | "none"
    citations: bool = False
    server_tools: bool = False


EVERY_FEATURE = Capabilities(
    vision=True,
    pdf=True,
    thinking=True,
    structured_output=True,
    prompt_caching="automatic",
    citations=True,
    server_tools=True,
)
"""Every feature, prompt caching automatic: what the vendors' own APIs offer (Gemini,
OpenAI Responses; Anthropic's caching is explicit)."""
