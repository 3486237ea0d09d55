"""Small typed values shared by messages, usage rows, events and providers.

They live apart from the ORM: model rows convert to and from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import Any, Self

TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "thinking_tokens",
)


def _add(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return a + b


@dataclass(frozen=True, slots=True)
class Tokens:
    """Token counts of one response, one message, or a running total.

    ``None`` means "not reported", which is not the same as zero.
    """

    input_tokens: int | None = None
    """Prompt tokens, excluding cache reads and cache writes."""
    output_tokens: int | None = None
    """Generated tokens, including reasoning tokens."""
    cache_read_tokens: int | None = None
    """Prompt tokens served from the provider's cache."""
    cache_write_tokens: int | None = None
    """Prompt tokens written to the provider's cache."""
    thinking_tokens: int | None = None
    """Reasoning tokens (already counted inside ``output_tokens``)."""

    @property
    def total_tokens(self) -> int | None:
        """Sum of input, output, cache read and cache write tokens (``None`` if none known)."""
        parts = [
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
        ]
        known = [p for p in parts if p is not None]
        return sum(known) if known else None

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, name) is None for name in TOKEN_FIELDS)

    def __add__(self, other: Tokens) -> Tokens:
        if not isinstance(other, Tokens):
            return NotImplemented
        return Tokens(*(_add(getattr(self, n), getattr(other, n)) for n in TOKEN_FIELDS))

    def __radd__(self, other: Any) -> Tokens:
        if other == 0 or other is None:  # lets sum() start from 0
            return self
        return NotImplemented

    def to_dict(self) -> dict[str, int]:
        """The reported counts only (``None`` omitted)."""
        return {n: getattr(self, n) for n in TOKEN_FIELDS if getattr(self, n) is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Tokens:
        data = data or {}
        return cls(**{n: data.get(n) for n in TOKEN_FIELDS})

    @classmethod
    def from_object(cls, obj: Any) -> Tokens:
        """Read the five token attributes of a model row (Message or Usage)."""
        return cls(*(getattr(obj, n) for n in TOKEN_FIELDS))


COST_FIELDS = ("input", "output", "cache_read", "cache_write", "thinking", "total")


@dataclass(frozen=True, slots=True)
class Cost:
    """A price in US dollars, per part. ``None`` means the price is unknown (never 0)."""

    input: Decimal | None = None
    output: Decimal | None = None
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None
    thinking: Decimal | None = None
    """Part of ``output`` spent on reasoning (informational; already inside ``output``)."""
    total: Decimal | None = None

    @property
    def is_known(self) -> bool:
        return self.total is not None

    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(*(_add(getattr(self, n), getattr(other, n)) for n in COST_FIELDS))

    def __radd__(self, other: Any) -> Cost:
        if other == 0 or other is None:
            return self
        return NotImplemented

    def to_dict(self) -> dict[str, str]:
        """Known parts as strings (Decimal-safe JSON)."""
        return {n: str(getattr(self, n)) for n in COST_FIELDS if getattr(self, n) is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Cost:
        data = data or {}
        return cls(
            **{n: (Decimal(str(data[n])) if data.get(n) is not None else None) for n in COST_FIELDS}
        )


def usd_text(value: Decimal | str | None) -> str | None:
    """A USD amount as a plain decimal string without trailing zeros, as events and the
    API write it (``"0.0004"``); ``None`` stays ``None`` (unknown)."""
    if value is None:
        return None
    return format(Decimal(value).normalize(), "f")


@dataclass(frozen=True, slots=True)
class Thinking:
    """The model's reasoning output."""

    text: str = ""
    signature: str | None = None
    """Opaque token the provider wants back with the text on the next turn."""

    def to_dict(self) -> dict[str, str]:
        out = {"text": self.text}
        if self.signature:
            out["signature"] = self.signature
        return out


class _Record:
    """``to_dict()`` leaves out what is empty (``None``, ``[]``, ``{}``); ``from_dict()``
    ignores unknown keys."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]
        return {k: v for k, v in out.items() if v is not None and v != [] and v != {}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True, slots=True)
class Citation(_Record):
    """A source the model cited, normalized across providers."""

    url: str | None = None
    title: str | None = None
    cited_text: str | None = None
    start_index: int | None = None
    end_index: int | None = None
    source: str | None = None
    """Document or file identifier when the citation is not a URL."""
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ServerToolCall(_Record):
    """A tool the provider ran itself (web search, code execution) during a response."""

    name: str
    id: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    status: str | None = None
