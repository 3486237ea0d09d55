"""The chunks of the AI SDK's UI message stream (v1), one class per chunk ``type``, as the
``ai`` package's ``uiMessageChunkSchema`` declares them. :meth:`Chunk.to_dict` is the
JSON a ``data:`` frame carries: ``type`` first, then the fields in their declared order
under the protocol's camelCase names; an optional field left ``None`` is left out."""

from __future__ import annotations

from collections.abc import Iterator
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

    def __init_subclass__(
        cls, *, type: str | None = None, optional: tuple[str, ...] = (), **kwargs: Any
    ):
        # without a ``type``: a base declaring fields that chunks of several types share
        super().__init_subclass__(**kwargs)
        if type is not None:
            cls.type = type
        cls.optional = frozenset(optional)
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
class _PartChunk(Chunk):
    id: str


class _PartDeltaChunk(_PartChunk):
    delta: str


@dataclass(frozen=True)
class PartKind:
    """The chunks of one kind of streamed part, and the prefix of its ids."""

    prefix: str
    start: type[Chunk]
    delta: type[Chunk]
    end: type[Chunk]


def _part_kind(prefix: str) -> PartKind:
    """The chunk classes of a kind of part: ``{prefix}-start`` and ``{prefix}-end`` with the
    part's ``id``, ``{prefix}-delta`` with a ``delta`` as well."""
    name = prefix.title()

    def chunk_class(base: type[Chunk], step: str) -> type[Chunk]:
        return type(f"{name}{step.title()}Chunk", (base,), {}, type=f"{prefix}-{step}")

    return PartKind(
        prefix,
        chunk_class(_PartChunk, "start"),
        chunk_class(_PartDeltaChunk, "delta"),
        chunk_class(_PartChunk, "end"),
    )


TEXT = _part_kind("text")
REASONING = _part_kind("reasoning")
TextStartChunk, TextDeltaChunk, TextEndChunk = TEXT.start, TEXT.delta, TEXT.end
ReasoningStartChunk, ReasoningDeltaChunk, ReasoningEndChunk = (
    REASONING.start,
    REASONING.delta,
    REASONING.end,
)


# -- tool calls: every chunk but the approval request starts with the call's id
class _ToolCallChunk(Chunk):
    tool_call_id: str


class ToolInputStartChunk(_ToolCallChunk, type="tool-input-start"):
    tool_name: str


class ToolInputDeltaChunk(_ToolCallChunk, type="tool-input-delta"):
    input_text_delta: str


class ToolInputAvailableChunk(_ToolCallChunk, type="tool-input-available"):
    tool_name: str
    input: Any


class ToolApprovalRequestChunk(Chunk, type="tool-approval-request"):
    approval_id: str
    tool_call_id: str


class ToolOutputAvailableChunk(_ToolCallChunk, type="tool-output-available"):
    output: Any


class ToolOutputErrorChunk(_ToolCallChunk, type="tool-output-error"):
    error_text: str


class ToolOutputDeniedChunk(_ToolCallChunk, type="tool-output-denied"):
    """No field but the call's id."""


# -- sources
class SourceUrlChunk(Chunk, type="source-url", optional=("title",)):
    source_id: str
    url: str
    title: str | None = None


# every chunk the stream sends, by its ``type``
def _typed(cls: type[Chunk]) -> Iterator[type[Chunk]]:
    for sub in cls.__subclasses__():
        if "type" in vars(sub):
            yield sub
        yield from _typed(sub)


CHUNK_TYPES: dict[str, type[Chunk]] = {cls.type: cls for cls in _typed(Chunk)}
