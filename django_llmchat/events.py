"""Typed stream events, their ``to_dict()`` shapes and their Server-Sent Events encoding.

Every event derives from :class:`StreamEvent`, carries a ``role`` (``"assistant"`` unless
the event says otherwise) and renders itself with ``to_dict()``. ``to_sse()`` frames an
event as ``event: <snake_case class name>`` / ``data: <JSON>`` / ``id:``.
"""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from .values import Tokens

__all__ = [
    "StreamEvent",
    "TextDelta",
    "TextDone",
    "ToolCallDelta",
    "ToolCallDone",
    "ReasoningPart",
    "ReasoningDelta",
    "ReasoningDone",
    "WebSearchStatus",
    "WebSearchDone",
    "GuardrailTripwire",
    "GuardrailModification",
    "SkillActivation",
    "Interrupt",
    "TokenUsageDone",
    "FinishReasonDone",
    "ToolApprovalRequest",
    "ToolResultDone",
    "StepFinished",
    "RunStarted",
    "RunFinished",
    "ContextCompacted",
    "BudgetWarning",
    "event_type",
    "event_from_dict",
    "to_sse",
]

_REGISTRY: dict[str, type[StreamEvent]] = {}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class StreamEvent:
    """Base class of every event: a dataclass whose ``to_dict()`` and ``from_dict()``
    follow its fields."""

    role: str = "assistant"
    type: ClassVar[str] = "stream_event"

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.type = _snake(cls.__name__)
        _REGISTRY[cls.type] = cls

    omit_none: ClassVar[tuple[str, ...]] = ()
    """Fields left out of ``to_dict()`` when ``None``."""
    constants: ClassVar[dict[str, Any]] = {}
    """Keys ``to_dict()`` always carries, after ``role`` (``Interrupt``: ``interrupt``)."""

    def to_dict(self) -> dict[str, Any]:
        """``role``, the constants, then every field in the order declared: nested values
        as their own ``to_dict()``, lists copied, ``omit_none`` fields left out when
        ``None``."""
        out: dict[str, Any] = {"role": self.role, **self.constants}
        for f in fields(self):  # type: ignore[arg-type]
            if f.name == "role":
                continue
            value = getattr(self, f.name)
            if value is None:
                if f.name in self.omit_none:
                    continue
            elif hasattr(value, "to_dict"):
                value = value.to_dict()
            elif isinstance(value, list):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StreamEvent:
        """The inverse of ``to_dict()``: unknown keys (the constants) are ignored, nested
        values rebuilt, a ``None`` where the field has a default factory gets it."""
        kwargs: dict[str, Any] = {}
        for f in fields(cls):  # type: ignore[arg-type]
            if f.name not in data:
                continue
            value = data[f.name]
            if value is None and f.default_factory is not MISSING:
                continue
            decode = _DECODERS.get(f.name)
            kwargs[f.name] = decode(value) if decode is not None and value is not None else value
        return cls(**kwargs)

    def to_sse(self, id: str | int | None = None) -> str:
        return to_sse(self, id)


@dataclass(eq=True)
class TextDelta(StreamEvent):
    """A piece of the reply's text, as it arrives."""

    content: str
    role: str = "assistant"


@dataclass(eq=True)
class TextDone(StreamEvent):
    """The response's whole text: once per response, equal to the joined deltas."""

    content: str
    role: str = "assistant"


@dataclass(eq=True)
class ToolCallDelta(StreamEvent):
    """A fragment of a tool call's JSON arguments. ``name`` may come only in the first."""

    item_id: str | None = None
    name: str | None = None
    arguments_delta: str = ""
    role: str = "assistant"
    omit_none: ClassVar[tuple[str, ...]] = ("name",)


@dataclass(eq=True)
class ToolCallDone(StreamEvent):
    """A complete tool call; ``arguments`` is the JSON text of the arguments."""

    item_id: str | None = None
    call_id: str = ""
    name: str = ""
    arguments: str = "{}"
    role: str = "assistant"


@dataclass(eq=True)
class ReasoningPart:
    """One block of reasoning. ``format`` names the provider dialect able to replay it;
    a part with no format is shown but never sent back."""

    type: str = "text"
    text: str = ""
    format: str | None = None
    signature: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "text": self.text}
        if self.format is not None:
            out["format"] = self.format
        if self.signature is not None:
            out["signature"] = self.signature
        return out


@dataclass(eq=True)
class ReasoningDelta(StreamEvent):
    """A piece of reasoning text."""

    content: str
    role: str = "assistant"


@dataclass(eq=True)
class ReasoningDone(StreamEvent):
    """One reasoning block is complete; ``part`` is what its deltas added up to."""

    part: ReasoningPart = field(default_factory=ReasoningPart)
    role: str = "assistant"


@dataclass(eq=True)
class WebSearchStatus(StreamEvent):
    """Progress of a server-side web search (``in_progress``, ``searching``, ``completed``,
    ``open_page``)."""

    status: str
    query: str | None = None
    url: str | None = None
    role: str = "assistant"
    omit_none: ClassVar[tuple[str, ...]] = ("query", "url")


@dataclass(eq=True)
class WebSearchDone(StreamEvent):
    """A server-side web search finished; ``sources`` are ``{"title", "url"}`` dicts."""

    query: str | None = None
    sources: list[dict[str, Any]] = field(default_factory=list)
    role: str = "assistant"


@dataclass(eq=True)
class GuardrailTripwire(StreamEvent):
    """A guardrail blocked the run. ``phase`` is ``"before"`` or ``"after"``."""

    guardrail_id: str = ""
    reason: str | None = None
    phase: str = "before"
    role: str = "assistant"


@dataclass(eq=True)
class GuardrailModification(StreamEvent):
    """A guardrail transformed messages; ``message_indices`` are the ones it changed."""

    guardrail_id: str = ""
    phase: str = "before"
    message_indices: list[int] = field(default_factory=list)
    role: str = "assistant"


@dataclass(eq=True)
class SkillActivation(StreamEvent):
    """The model activated a skill."""

    name: str
    role: str = "system"


@dataclass(eq=True)
class Interrupt(StreamEvent):
    """The loop stopped early: ``reason`` is ``"max_steps"``, ``"cancelled"``, a caller's
    text, or ``None``."""

    reason: str | None = None
    role: str = "system"
    constants: ClassVar[dict[str, Any]] = {"interrupt": True}


@dataclass(eq=True)
class TokenUsageDone(StreamEvent):
    """Token usage of the response that just ended."""

    token_usage: Tokens = field(default_factory=Tokens)
    role: str = "assistant"


@dataclass(eq=True)
class FinishReasonDone(StreamEvent):
    """Why the model stopped, normalized (``stop``, ``length``, ``tool_calls``,
    ``content_filter``, ``context_window``, ``malformed_output``, ``error``, ``other``),
    beside the provider's raw wire value."""

    finish_reason: str = "stop"
    raw_finish_reason: str | None = None
    role: str = "assistant"


@dataclass(eq=True)
class ToolApprovalRequest(StreamEvent):
    """A tool call waits for a decision (``approve`` or ``deny``) before it runs; the run
    pauses after this event (status ``awaiting_approval``)."""

    call_id: str = ""
    name: str = ""
    arguments: str = "{}"
    role: str = "assistant"


@dataclass(eq=True)
class ToolResultDone(StreamEvent):
    """A tool call's result was stored: ``result`` is the tool message's text,
    ``error_type`` names what went wrong (``None`` when the tool succeeded; ``"denied"``
    when the user denied the call), ``message_id`` is the stored tool message."""

    call_id: str = ""
    name: str = ""
    result: str = ""
    error_type: str | None = None
    message_id: int | None = None
    role: str = "tool"


@dataclass(eq=True)
class StepFinished(StreamEvent):
    """A step (one provider response) was stored: ``message_id`` is the stored assistant
    message, ``step`` its number in the run (from 1), ``token_usage`` and ``cost`` (USD,
    a decimal string; ``None`` when the price is unknown) are the step's, retried
    attempts included; ``estimated`` (``True``, else left out) says they are partly our
    estimate: the step was stopped before the vendor reported its counts. ``provider``
    and ``model_id`` name the model that answered (the chat's, or one of its
    ``LLMCHAT["FALLBACKS"]``); left out when unknown."""

    message_id: int | None = None
    step: int = 0
    finish_reason: str = "stop"
    token_usage: Tokens = field(default_factory=Tokens)
    cost: str | None = None
    role: str = "assistant"
    estimated: bool | None = None
    provider: str | None = None
    model_id: str | None = None
    omit_none: ClassVar[tuple[str, ...]] = ("estimated", "provider", "model_id")


@dataclass(eq=True)
class RunStarted(StreamEvent):
    """A run of the loop began (published by the task that runs it). ``message_id`` is the
    user message being answered, when there is one. A second ``RunStarted`` before the
    ``RunFinished`` of a run means its worker died and the run started over: drop the
    partial text."""

    run_id: str = ""
    message_id: int | None = None
    role: str = "system"
    omit_none: ClassVar[tuple[str, ...]] = ("message_id",)


@dataclass(eq=True)
class RunFinished(StreamEvent):
    """A run ended: ``status`` is the run's (``"succeeded"``, ``"failed"``,
    ``"cancelled"``, ``"interrupted"``, ``"awaiting_approval"``), ``"retrying"`` (a
    retryable provider error: the same run starts again later, with a new ``RunStarted``)
    or ``"blocked"`` (a before-guardrail refused the prompt: nothing was stored);
    ``error`` is the error text (no secrets), ``None`` when there was none, and
    ``error_type`` its kind (``provider_error``, ``rate_limited``, ``auth``,
    ``context_length``, ``budget``...; see ``errors.safe_error``).
    ``message_id`` is the last message the run stored, ``token_usage`` and ``cost`` (USD,
    a decimal string) the run's totals over every attempt so far; each is left out when
    unknown. ``estimated`` (``True``, else left out): the totals are partly our estimate
    (an attempt stopped before the vendor reported its counts)."""

    run_id: str = ""
    status: str = "succeeded"
    error: str | None = None
    message_id: int | None = None
    token_usage: Tokens | None = None
    cost: str | None = None
    role: str = "system"
    error_type: str | None = None
    estimated: bool | None = None
    omit_none: ClassVar[tuple[str, ...]] = (
        "error",
        "message_id",
        "token_usage",
        "cost",
        "error_type",
        "estimated",
    )


@dataclass(eq=True)
class ContextCompacted(StreamEvent):
    """The history was compacted before a step: ``message_id`` is the stored summary,
    which requests send instead of the messages up to ``summary_until`` (``messages`` of
    them); ``tokens_before`` and ``tokens_after`` are the request's estimated input
    tokens without and with it."""

    message_id: int | None = None
    summary_until: int | None = None
    messages: int = 0
    tokens_before: int | None = None
    tokens_after: int | None = None
    role: str = "system"


@dataclass(eq=True)
class BudgetWarning(StreamEvent):
    """The user's use passed the soft fraction of a spending limit (the run goes on):
    ``limit`` names it (``usd_per_day``, ``usd_per_month``, ``tokens_per_day``), ``used``
    and ``allowed`` are amounts as text, ``resets_at`` an ISO 8601 time."""

    limit: str = ""
    used: str = ""
    allowed: str = ""
    resets_at: str | None = None
    role: str = "system"


# how ``from_dict`` rebuilds a nested value, by field name
_DECODERS: dict[str, Any] = {
    "token_usage": Tokens.from_dict,
    "part": lambda data: ReasoningPart(**data),
}


def event_type(event: StreamEvent) -> str:
    """The snake_case name used as the SSE ``event:`` field (``TextDelta`` -> ``text_delta``)."""
    return event.type


def event_from_dict(type_name: str, data: dict[str, Any]) -> StreamEvent:
    """Rebuild an event from its ``event_type`` and ``to_dict()`` (the inverse of ``to_sse``)."""
    try:
        cls = _REGISTRY[type_name]
    except KeyError:
        raise ValueError(f"unknown event type {type_name!r}") from None
    return cls.from_dict(data)


def to_sse(event: StreamEvent, id: str | int | None = None) -> str:
    """Encode one event as a Server-Sent Events frame."""
    data = json.dumps(event.to_dict(), separators=(",", ":"), ensure_ascii=False)
    frame = f"event: {event.type}\ndata: {data}\n"
    if id is not None:
        frame += f"id: {id}\n"
    return frame + "\n"


__all__ = [
    "StreamEvent",
    "TextDelta",
    "TextDone",
    "ToolCallDelta",
    "ToolCallDone",
    "ReasoningPart",
    "ReasoningDelta",
    "ReasoningDone",
    "WebSearchStatus",
    "WebSearchDone",
    "GuardrailTripwire",
    "GuardrailModification",
    "SkillActivation",
    "Interrupt",
    "TokenUsageDone",
    "FinishReasonDone",
    "ToolApprovalRequest",
    "ToolResultDone",
    "StepFinished",
    "RunStarted",
    "RunFinished",
    "ContextCompacted",
    "BudgetWarning",
    "event_type",
    "event_from_dict",
    "to_sse",
]
