"""The chunks of the AI SDK's UI message stream (v1), one class per chunk ``type``, as the
``ai`` package's ``uiMessageChunkSchema`` declares them. :meth:`Chunk.to_dict` is the
JSON a ``data:`` frame carries: ``type`` first, then the fields in their declared order
under the protocol's camelCase names; an optional field left ``None`` is left out."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from typing import Any, ClassVar

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


@dataclass(frozen=True)
class Chunk:
    """A UI message chunk. A subclass names its ``type`` and declares its fields;
    ``optional`` names those left out when ``None``."""

    type: ClassVar[str]
    optional: ClassVar[frozenset[str]] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in self.optional:
                continue
            out[_camel(f.name)] = value
        return out


# -- the message and its steps
@dataclass(frozen=True)
class StartChunk(Chunk):
    type = "start"
    optional = frozenset({"message_metadata"})
    message_id: str
    message_metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class StartStepChunk(Chunk):
    type = "start-step"


@dataclass(frozen=True)
class FinishStepChunk(Chunk):
    type = "finish-step"


@dataclass(frozen=True)
class MessageMetadataChunk(Chunk):
    type = "message-metadata"
    message_metadata: dict[str, Any]


@dataclass(frozen=True)
class FinishChunk(Chunk):
    type = "finish"
    finish_reason: str
    message_metadata: dict[str, Any]


@dataclass(frozen=True)
class ErrorChunk(Chunk):
    type = "error"
    error_text: str


@dataclass(frozen=True)
class AbortChunk(Chunk):
    type = "abort"
    reason: str


# -- text and reasoning parts: start, deltas, end
@dataclass(frozen=True)
class TextStartChunk(Chunk):
    type = "text-start"
    id: str


@dataclass(frozen=True)
class TextDeltaChunk(Chunk):
    type = "text-delta"
    id: str
    delta: str


@dataclass(frozen=True)
class TextEndChunk(Chunk):
    type = "text-end"
    id: str


@dataclass(frozen=True)
class ReasoningStartChunk(Chunk):
    type = "reasoning-start"
    id: str


@dataclass(frozen=True)
class ReasoningDeltaChunk(Chunk):
    type = "reasoning-delta"
    id: str
    delta: str


@dataclass(frozen=True)
class ReasoningEndChunk(Chunk):
    type = "reasoning-end"
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
@dataclass(frozen=True)
class ToolInputStartChunk(Chunk):
    type = "tool-input-start"
    tool_call_id: str
    tool_name: str


@dataclass(frozen=True)
class ToolInputDeltaChunk(Chunk):
    type = "tool-input-delta"
    tool_call_id: str
    input_text_delta: str


@dataclass(frozen=True)
class ToolInputAvailableChunk(Chunk):
    type = "tool-input-available"
    tool_call_id: str
    tool_name: str
    input: Any


@dataclass(frozen=True)
class ToolApprovalRequestChunk(Chunk):
    type = "tool-approval-request"
    approval_id: str
    tool_call_id: str


@dataclass(frozen=True)
class ToolOutputAvailableChunk(Chunk):
    type = "tool-output-available"
    tool_call_id: str
    output: Any


@dataclass(frozen=True)
class ToolOutputErrorChunk(Chunk):
    type = "tool-output-error"
    tool_call_id: str
    error_text: str


@dataclass(frozen=True)
class ToolOutputDeniedChunk(Chunk):
    type = "tool-output-denied"
    tool_call_id: str


# -- sources
@dataclass(frozen=True)
class SourceUrlChunk(Chunk):
    type = "source-url"
    optional = frozenset({"title"})
    source_id: str
    url: str
    title: str | None = None


CHUNK_TYPES: dict[str, type[Chunk]] = {
    cls.type: cls for cls in Chunk.__subclasses__()
}  # every chunk the stream sends, by its ``type``
