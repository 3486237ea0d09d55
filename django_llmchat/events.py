"""Typed stream events, their ``to_dict()`` shapes and their Server-Sent Events encoding.

Every event derives from :class:`StreamEvent`, carries a ``role`` (``"assistant"`` unless
the event says otherwise) and renders itself with ``to_dict()``. ``to_sse()`` frames an
event as ``event: <snake_case class name>`` / ``data: <JSON>`` / ``id:``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
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
    """Base class of every event. Subclasses implement ``to_dict()``."""

    role: str = "assistant"
    type: ClassVar[str] = "stream_event"

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.type = _snake(cls.__name__)
        _REGISTRY[cls.type] = cls

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StreamEvent:
        data = {k: v for k, v in data.items() if k != "role"}
        return cls(**data)

    def to_sse(self, id: str | int | None = None) -> str:
        return to_sse(self, id)


@dataclass(eq=True)
class TextDelta(StreamEvent):
    """A piece of the reply's text, as it arrives."""

    content: str
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content}


@dataclass(eq=True)
class TextDone(StreamEvent):
    """The response's whole text: once per response, equal to the joined deltas."""

    content: str
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content}


@dataclass(eq=True)
class ToolCallDelta(StreamEvent):
    """A fragment of a tool call's JSON arguments. ``name`` may come only in the first."""

    item_id: str | None = None
    name: str | None = None
    arguments_delta: str = ""
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "item_id": self.item_id}
        if self.name is not None:
            out["name"] = self.name
        out["arguments_delta"] = self.arguments_delta
        return out


@dataclass(eq=True)
class ToolCallDone(StreamEvent):
    """A complete tool call; ``arguments`` is the JSON text of the arguments."""

    item_id: str | None = None
    call_id: str = ""
    name: str = ""
    arguments: str = "{}"
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "item_id": self.item_id,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
        }


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

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content}


@dataclass(eq=True)
class ReasoningDone(StreamEvent):
    """One reasoning block is complete; ``part`` is what its deltas added up to."""

    part: ReasoningPart = field(default_factory=ReasoningPart)
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "part": self.part.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReasoningDone:
        return cls(ReasoningPart(**data.get("part", {})), role=data.get("role", "assistant"))


@dataclass(eq=True)
class WebSearchStatus(StreamEvent):
    """Progress of a server-side web search (``in_progress``, ``searching``, ``completed``,
    ``open_page``)."""

    status: str
    query: str | None = None
    url: str | None = None
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "status": self.status}
        if self.query is not None:
            out["query"] = self.query
        if self.url is not None:
            out["url"] = self.url
        return out


@dataclass(eq=True)
class WebSearchDone(StreamEvent):
    """A server-side web search finished; ``sources`` are ``{"title", "url"}`` dicts."""

    query: str | None = None
    sources: list[dict[str, Any]] = field(default_factory=list)
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "query": self.query, "sources": list(self.sources)}


@dataclass(eq=True)
class GuardrailTripwire(StreamEvent):
    """A guardrail blocked the run. ``phase`` is ``"before"`` or ``"after"``."""

    guardrail_id: str = ""
    reason: str | None = None
    phase: str = "before"
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "guardrail_id": self.guardrail_id,
            "reason": self.reason,
            "phase": self.phase,
        }


@dataclass(eq=True)
class GuardrailModification(StreamEvent):
    """A guardrail transformed messages; ``message_indices`` are the ones it changed."""

    guardrail_id: str = ""
    phase: str = "before"
    message_indices: list[int] = field(default_factory=list)
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "guardrail_id": self.guardrail_id,
            "phase": self.phase,
            "message_indices": list(self.message_indices),
        }


@dataclass(eq=True)
class SkillActivation(StreamEvent):
    """The model activated a skill."""

    name: str
    role: str = "system"

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "name": self.name}


@dataclass(eq=True)
class Interrupt(StreamEvent):
    """The loop stopped early: ``reason`` is ``"max_steps"``, ``"cancelled"``, a caller's
    text, or ``None``."""

    reason: str | None = None
    role: str = "system"

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "interrupt": True, "reason": self.reason}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Interrupt:
        return cls(reason=data.get("reason"), role=data.get("role", "system"))


@dataclass(eq=True)
class TokenUsageDone(StreamEvent):
    """Token usage of the response that just ended."""

    token_usage: Tokens = field(default_factory=Tokens)
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "token_usage": self.token_usage.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenUsageDone:
        return cls(
            token_usage=Tokens.from_dict(data.get("token_usage")),
            role=data.get("role", "assistant"),
        )


@dataclass(eq=True)
class FinishReasonDone(StreamEvent):
    """Why the model stopped, normalized (``stop``, ``length``, ``tool_calls``,
    ``content_filter``, ``context_window``, ``malformed_output``, ``error``, ``other``),
    beside the provider's raw wire value."""

    finish_reason: str = "stop"
    raw_finish_reason: str | None = None
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "finish_reason": self.finish_reason,
            "raw_finish_reason": self.raw_finish_reason,
        }


@dataclass(eq=True)
class ToolApprovalRequest(StreamEvent):
    """A tool call waits for a decision (``approve`` or ``deny``) before it runs; the run
    pauses after this event (status ``awaiting_approval``)."""

    call_id: str = ""
    name: str = ""
    arguments: str = "{}"
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
        }


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "call_id": self.call_id,
            "name": self.name,
            "result": self.result,
            "error_type": self.error_type,
            "message_id": self.message_id,
        }


@dataclass(eq=True)
class StepFinished(StreamEvent):
    """A step (one provider response) was stored: ``message_id`` is the stored assistant
    message, ``step`` its number in the run (from 1), ``token_usage`` and ``cost`` (USD,
    a decimal string; ``None`` when the price is unknown) are the step's, retried
    attempts included."""

    message_id: int | None = None
    step: int = 0
    finish_reason: str = "stop"
    token_usage: Tokens = field(default_factory=Tokens)
    cost: str | None = None
    role: str = "assistant"

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "message_id": self.message_id,
            "step": self.step,
            "finish_reason": self.finish_reason,
            "token_usage": self.token_usage.to_dict(),
            "cost": self.cost,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepFinished:
        return cls(
            message_id=data.get("message_id"),
            step=data.get("step", 0),
            finish_reason=data.get("finish_reason", "stop"),
            token_usage=Tokens.from_dict(data.get("token_usage")),
            cost=data.get("cost"),
            role=data.get("role", "assistant"),
        )


@dataclass(eq=True)
class RunStarted(StreamEvent):
    """A run of the loop began (published by the task that runs it). ``message_id`` is the
    user message being answered, when there is one. A second ``RunStarted`` before the
    ``RunFinished`` of a run means its worker died and the run started over: drop the
    partial text."""

    run_id: str = ""
    message_id: int | None = None
    role: str = "system"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "run_id": self.run_id}
        if self.message_id is not None:
            out["message_id"] = self.message_id
        return out


@dataclass(eq=True)
class RunFinished(StreamEvent):
    """A run ended: ``status`` is the run's (``"succeeded"``, ``"failed"``,
    ``"cancelled"``, ``"interrupted"``, ``"awaiting_approval"``), ``"retrying"`` (a
    retryable provider error: the same run starts again later, with a new ``RunStarted``)
    or ``"blocked"`` (a before-guardrail refused the prompt of an inline stream: nothing
    was stored);
    ``error`` is the error text (no secrets), ``None`` when there was none, and
    ``error_type`` its kind (``provider_error``, ``rate_limited``, ``auth``,
    ``context_length``, ``budget``...; see ``errors.safe_error``).
    ``message_id`` is the last message the run stored, ``token_usage`` and ``cost`` (USD,
    a decimal string) the run's totals over every attempt so far; each is left out when
    unknown."""

    run_id: str = ""
    status: str = "succeeded"
    error: str | None = None
    message_id: int | None = None
    token_usage: Tokens | None = None
    cost: str | None = None
    role: str = "system"
    error_type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "run_id": self.run_id, "status": self.status}
        if self.error is not None:
            out["error"] = self.error
        if self.message_id is not None:
            out["message_id"] = self.message_id
        if self.token_usage is not None:
            out["token_usage"] = self.token_usage.to_dict()
        if self.cost is not None:
            out["cost"] = self.cost
        if self.error_type is not None:
            out["error_type"] = self.error_type
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunFinished:
        data = {k: v for k, v in data.items() if k != "role"}
        if data.get("token_usage") is not None:
            data["token_usage"] = Tokens.from_dict(data["token_usage"])
        return cls(**data)


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "message_id": self.message_id,
            "summary_until": self.summary_until,
            "messages": self.messages,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
        }


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "limit": self.limit,
            "used": self.used,
            "allowed": self.allowed,
            "resets_at": self.resets_at,
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
