"""A conversation read from an import file, before it is stored: its nodes (messages with
their parents, tool calls and the call each result answers), and what every reader does to
it (times, values of an unexpected type, a result for each call that has none)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from django.utils.dateparse import parse_datetime

from ..errors import ArgumentError
from ..models import Message, ToolCall

NO_RESULT = "(no result was recorded for this call)"
"""The content of the result given to a tool call that has none in the imported file."""


class ImportFormatError(ArgumentError):
    """The data is not in a format :mod:`django_llmchat.chats.imports` reads, or holds a value
    it cannot store; the message says where (the conversation, the message) and what."""


@dataclass
class _Node:
    message: Message  # unsaved, without its chat
    parent: int | None = None  # index of its parent node
    calls: list[ToolCall] = field(default_factory=list)  # unsaved
    answers: tuple[int, str] | None = None  # (index of the calling node, call id)
    summary_until: int | None = None
    created_at: dt.datetime | None = None
    files: list[tuple[str, bytes, str | None]] = field(default_factory=list)
    ratings: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Conversation:
    """One chat as read from a file, not stored yet: :func:`import_conversations` stores
    it. ``source`` says where it came from (``chatgpt:<id>``, ``llmchat:<id>``);
    ``notes`` what could not be kept as it was."""

    source: str
    title: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    nodes: list[_Node] = field(default_factory=list)
    leaf: int | None = None
    notes: list[str] = field(default_factory=list)


def _when(value: Any, where: str) -> dt.datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return dt.datetime.fromtimestamp(value, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise ImportFormatError(f"{where}: {value!r} is not a time") from None
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is not None:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    raise ImportFormatError(f"{where}: {value!r} is not a time")


def _shaped(read, where: str, *args: Any) -> Any:
    """``read(*args)``, a value of a type the format does not give (a list for an object,
    a number for a text...) an :class:`ImportFormatError` naming ``where``."""
    try:
        return read(*args)
    except ImportFormatError:
        raise
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise ImportFormatError(
            f"{where}: a value of an unexpected type ({type(exc).__name__}: {exc})"
        ) from None


def _open_call(out: Conversation, index: int | None, name: str) -> tuple[int, str] | None:
    """The call a tool message after node ``index`` answers: a call still without a
    result of the assistant message it follows, or of the one before its other results;
    the one named ``name`` first."""
    answered = {n.answers for n in out.nodes if n.answers is not None}
    while index is not None and out.nodes[index].message.role == "tool":
        index = out.nodes[index].parent
    if index is None or not out.nodes[index].calls:
        return None
    open_calls = [(index, c.call_id) for c in out.nodes[index].calls]
    open_calls = [c for c in open_calls if c not in answered]
    named = [c for c in open_calls if out.nodes[c[0]].calls and _call(out, c).name == name]
    return (named or open_calls or [None])[0]


def _call(out: Conversation, ref: tuple[int, str]) -> ToolCall:
    return next(c for c in out.nodes[ref[0]].calls if c.call_id == ref[1])


def _answer_every_call(out: Conversation) -> None:
    """Give each call without a result one saying so, right after its message (the
    message's other children then follow that result): a chat is never left with a call
    nothing answers."""
    answered = {n.answers for n in out.nodes if n.answers is not None}
    made: set[int] = set()
    for index in range(len(out.nodes)):
        node = out.nodes[index]
        if not node.calls:
            continue
        # the last result of this message's calls (each result follows the one before)
        chain_end = index
        while True:
            nxt = next(
                (
                    j
                    for j, n in enumerate(out.nodes)
                    if n.parent == chain_end and n.answers is not None and n.answers[0] == index
                ),
                None,
            )
            if nxt is None:
                break
            chain_end = nxt
        missing = [c for c in node.calls if (index, c.call_id) not in answered]
        for call in missing:
            out.nodes.append(
                _Node(
                    Message(role="tool", content=NO_RESULT),
                    parent=chain_end,
                    answers=(index, call.call_id),
                    created_at=node.created_at,
                )
            )
            new = len(out.nodes) - 1
            made.add(new)
            for j, other in enumerate(out.nodes[:new]):
                if (
                    other.parent == chain_end
                    and j != new
                    and (other.answers is None or other.answers[0] != index)
                ):
                    other.parent = new
            if out.leaf == chain_end:
                out.leaf = new
            chain_end = new
            out.notes.append(
                f"{out.source}: the call {call.call_id} ({call.name}) had no result; it was "
                "given one saying so"
            )
    if made:
        _order(out, made)


def _order(out: Conversation, made: set[int]) -> None:
    """Put each made-up result right after the message it follows (they were appended at
    the end); the others keep their order."""
    after: dict[int | None, list[int]] = {}
    for i in sorted(made):
        after.setdefault(out.nodes[i].parent, []).append(i)
    order: list[int] = []

    def place(i: int) -> None:
        order.append(i)
        for j in after.get(i, []):
            place(j)

    for i in range(len(out.nodes)):
        if i not in made:
            place(i)
    new_index = {old: new for new, old in enumerate(order)}
    nodes = [out.nodes[i] for i in order]
    for n in nodes:
        n.parent = new_index[n.parent] if n.parent is not None else None
        if n.answers is not None:
            n.answers = (new_index[n.answers[0]], n.answers[1])
        if n.summary_until is not None:
            n.summary_until = new_index[n.summary_until]
    out.nodes = nodes
    out.leaf = new_index[out.leaf] if out.leaf is not None else None
