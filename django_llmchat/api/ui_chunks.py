"""The chunks of the AI SDK's UI message stream (v1), one class per chunk ``type``, as the
``ai`` package's ``uiMessageChunkSchema`` declares them. :meth:`Chunk.to_dict` is the
JSON a ``data:`` frame carries: ``type`` first, then the fields in their declared order
under the protocol's camelCase names; an optional field left ``None`` is left out."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from typing import Any, ClassVar, dataclass_transform

__all__ = [
    "AbortChunk",
    "Chunk",
    "ErrorChunk",
    "FinishChunk",
    "FinishStepChunk",
    "MessageMetadataChunk",
    "PartKind",
    "REASONING",
    "SourceUrlChunk",
    "StartChunk",
    "StartStepChunk",
    "TEXT",
    "ToolApprovalRequestChunk",
    "ToolInputAvailableChunk",
    "ToolInputDeltaChunk",
    "ToolInputStartChunk",
    "ToolOutputAvailableChunk",
    "ToolOutputDeniedChunk",
    "ToolOutputErrorChunk",
]


@cache
def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


@dataclass_transform(frozen_default=True)
class Chunk:
    """A UI message chunk (a frozen dataclass). A subclass names its ``type`` (and the
    fields left out when ``None``, ``optional``) as class keywords and declares its
    fields."""

    type: ClassVar[str]
    optional: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, *, type: str, optional: tuple[str, ...] = (), **kwargs: Any):
        super().__init_subclass__(**kwargs)
        cls.type, cls.optional = type, frozenset(optional)
        dataclass(frozen=True)(cls)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in self.optional:
                continue
            out[_camel(f.name)] = value
        return out


# -- the message and its steps
class StartChunk(Chunk, type="start", optional=("message_metadata",)):
    message_id: str
    message_metadata: dict[str, Any] | None = None


class StartStepChunk(Chunk, type="start-step"):
    """No fields."""


class FinishStepChunk(Chunk, type="finish-step"):
    """No fields."""


class MessageMetadataChunk(Chunk, type="message-metadata"):
    message_metadata: dict[str, Any]


class FinishChunk(Chunk, type="finish"):
    finish_reason: str
    message_metadata: dict[str, Any]


class ErrorChunk(Chunk, type="error"):
    error_text: str


class AbortChunk(Chunk, type="abort"):
    reason: str


# -- text and reasoning parts: start, deltas, end
class TextStartChunk(Chunk, type="text-start"):
    id: str


class TextDeltaChunk(Chunk, type="text-delta"):
    id: str
    delta: str


class TextEndChunk(Chunk, type="text-end"):
    id: str


class ReasoningStartChunk(Chunk, type="reasoning-start"):
    id: str


class ReasoningDeltaChunk(Chunk, type="reasoning-delta"):
    id: str
    delta: str


class ReasoningEndChunk(Chunk, type="reasoning-end"):
    id: str


@dataclass(frozen=True)
class PartKind:
    """The chunks of one kind of streamed part, and the prefix of its ids."""

    prefix: str
    start: type[Chunk]
    delta: type[Chunk]
    end: type[Chunk]


TEXT = PartKind("text", TextStartChunk, TextDeltaChunk, TextEndChunk)
REASONING = PartKind("reasoning", ReasoningStartChunk, ReasoningDeltaChunk, ReasoningEndChunk)


# -- tool calls
class ToolInputStartChunk(Chunk, type="tool-input-start"):
    tool_call_id: str
    tool_name: str


class ToolInputDeltaChunk(Chunk, type="tool-input-delta"):
    tool_call_id: str
    input_text_delta: str


class ToolInputAvailableChunk(Chunk, type="tool-input-available"):
    tool_call_id: str
    tool_name: str
    input: Any


class ToolApprovalRequestChunk(Chunk, type="tool-approval-request"):
    approval_id: str
    tool_call_id: str


class ToolOutputAvailableChunk(Chunk, type="tool-output-available"):
    tool_call_id: str
    output: Any


class ToolOutputErrorChunk(Chunk, type="tool-output-error"):
    tool_call_id: str
    error_text: str


class ToolOutputDeniedChunk(Chunk, type="tool-output-denied"):
    tool_call_id: str


# -- sources
class SourceUrlChunk(Chunk, type="source-url", optional=("title",)):
    source_id: str
    url: str
    title: str | None = None


# every chunk the stream sends, by its ``type``
CHUNK_TYPES: dict[str, type[Chunk]] = {cls.type: cls for cls in Chunk.__subclasses__()}
