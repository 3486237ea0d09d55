"""Streamed answers of Chat Completions: ``data:`` chunks (ending with ``[DONE]`` or not)
into stream events and the whole response, tool-call fragments joined by index (see
:mod:`.openai_chat` for the requests).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .. import events as ev
from . import openai_chat_wire as wire
from ._json import loads
from .base import StreamParser
from .types import ProviderRequest, vendor_id

if TYPE_CHECKING:
    from .openai_chat import ChatCompletionsProvider

__all__ = ["ChatCompletionsStreamParser"]


class _Call:
    __slots__ = ("call_id", "name", "arguments", "done")

    def __init__(self, call_id: str | None, name: str):
        self.call_id = call_id
        """As the server sent it (``""`` included); ``None`` while it sent none."""
        self.name = name
        self.arguments: list[str] = []
        self.done = False

    def complete_json(self) -> bool:
        """Whether the arguments so far are a whole JSON value (the call is finished)."""
        text = "".join(self.arguments).strip()
        if not text:
            return False
        try:
            json.loads(text)
        except ValueError:
            return False
        return True


class ChatCompletionsStreamParser(StreamParser):
    """``data: {chunk}`` ... ``data: [DONE]``.

    Tool-call fragments are joined by ``index``, never by id: ids may repeat or be empty,
    and are kept exactly as sent. A fragment at an index already in use starts a new call
    when it carries a different (non-empty) id, or an id and a name while the call there
    already has whole arguments (servers that send every whole call at index 0). Each call
    is complete at the chunk with a ``finish_reason`` (or the end). Usage may come on that
    chunk or on a last chunk with ``choices: []``; TokenUsageDone and FinishReasonDone are
    emitted once, at ``[DONE]``.
    """

    def __init__(self, provider: ChatCompletionsProvider, request: ProviderRequest):
        super().__init__(provider, request)
        self.calls: list[_Call] = []
        """Every call, in the order the server started them."""
        self.open: dict[Any, _Call] = {}
        """The latest call at each ``index``."""
        self.reasoning: list[str] = []
        self.raw_finish: str | None = None
        self.refusal = False
        self.usage: dict[str, Any] | None = None
        # Only vendors declaring citations put search results on their chunks.
        self.cites = provider.capabilities.citations

    def feed(self, event: str | None, data: str) -> list[ev.StreamEvent]:
        if data.startswith("[") and data.strip() == "[DONE]":
            return self._close()
        chunk = loads(data)
        if not isinstance(chunk, dict):
            return []
        if chunk.get("error"):
            raise self.provider.error_from_payload(chunk, body=data)
        out: list[ev.StreamEvent] = []
        self._note(chunk)
        choices = chunk.get("choices")
        if not choices:
            return out
        choice = choices[0]
        delta = choice.get("delta")
        if delta:
            self._delta(delta, out)
        raw = choice.get("finish_reason")
        if raw and self.raw_finish is None:
            self.raw_finish = raw
            self._end_turn(out)
        return out

    def _note(self, chunk: dict[str, Any]) -> None:
        """What any chunk may carry about the whole answer: usage, model, id, citations."""
        usage = chunk.get("usage")
        if usage:
            self.usage = usage
        builder = self.builder
        if builder.model_id is None:
            builder.model_id = chunk.get("model")
        if builder.response_id is None:
            builder.response_id = vendor_id(chunk.get("id"))
        if self.cites and (chunk.get("search_results") or chunk.get("citations")):
            builder.citations = wire.citations_of(chunk)  # each chunk repeats the full list

    def _delta(self, delta: dict[str, Any], out: list[ev.StreamEvent]) -> None:
        """A choice's delta: reasoning, text, a refusal, tool call fragments, annotations."""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and isinstance(reasoning, str):
            self.reasoning.append(reasoning)
            out.append(ev.ReasoningDelta(reasoning))
        content = delta.get("content")
        if content:
            if not isinstance(content, str):
                content, thought = wire.split_content(content)
                if thought:
                    self.reasoning.append(thought)
                    out.append(ev.ReasoningDelta(thought))
            if content:
                if self.reasoning:
                    out.append(self._end_reasoning())
                out.append(ev.TextDelta(content))
        refusal = delta.get("refusal")
        if refusal:
            self.refusal = True
            out.append(ev.TextDelta(refusal))
        calls = delta.get("tool_calls")
        if calls:
            if self.reasoning:
                out.append(self._end_reasoning())
            self._fragments(calls, out)
        notes = delta.get("annotations")
        if notes:
            self.builder.citations.extend(wire.citations_of({}, {"annotations": notes}))

    def _fragments(self, fragments: list[dict[str, Any]], out: list[ev.StreamEvent]) -> None:
        for frag in fragments:
            if not isinstance(frag, dict):
                continue
            fn = frag.get("function") or {}
            call_id = wire.wire_call_id(frag.get("id"))
            name = fn.get("name") or ""
            key = frag.get("index")
            if key is None:
                # No index: a fragment with an id or a name starts a call, the rest continue
                # the last one.
                key = ("no-index",)
                if call_id is not None or name:
                    self.open.pop(key, None)
            call = self.open.get(key)
            if call is not None and self._starts_new_call(call, call_id, name):
                if not call.done:
                    out.append(self._call_done(call))
                call = None
            arguments = wire.arguments_text(fn.get("arguments"))
            if call is None:
                call = self.open[key] = _Call(call_id, name)
                self.calls.append(call)
                if arguments:
                    call.arguments.append(arguments)
                out.append(
                    ev.ToolCallDelta(item_id=call_id, name=call.name, arguments_delta=arguments)
                )
                continue
            if (call_id and not call.call_id) or call.call_id is None:
                call.call_id = call_id
            if name and not call.name:
                call.name = name
            if arguments:
                call.arguments.append(arguments)
                out.append(ev.ToolCallDelta(item_id=call.call_id, arguments_delta=arguments))

    @staticmethod
    def _starts_new_call(call: _Call, call_id: str | None, name: str) -> bool:
        if call_id and call.call_id and call_id != call.call_id:
            return True
        # A repeated (or empty) id: a call's opening fragment (id and name) after whole
        # arguments is the next call.
        return call_id is not None and bool(name and call.name) and call.complete_json()

    def _call_done(self, call: _Call) -> ev.ToolCallDone:
        call.done = True
        if call.call_id is None:  # the server sent no id at all: make one up
            call.call_id = wire.new_call_id()
        return ev.ToolCallDone(
            item_id=call.call_id,
            call_id=call.call_id,
            name=call.name,
            arguments="".join(call.arguments) or "{}",
        )

    def _end_reasoning(self) -> ev.ReasoningDone:
        text = "".join(self.reasoning)
        self.reasoning = []
        return ev.ReasoningDone(ev.ReasoningPart(type="text", text=text, format=None))

    def _end_turn(self, out: list[ev.StreamEvent]) -> None:
        if self.reasoning:
            out.append(self._end_reasoning())
        for call in self.calls:
            if not call.done:
                out.append(self._call_done(call))

    def _close(self) -> list[ev.StreamEvent]:
        if self.done:
            return []
        out: list[ev.StreamEvent] = []
        self._end_turn(out)
        out.append(ev.TokenUsageDone(wire.usage_tokens(self.usage)))
        raw = self.raw_finish
        reason = wire.finish_reason(raw, tool_calls=bool(self.calls), refusal=self.refusal)
        out.append(ev.FinishReasonDone(finish_reason=reason, raw_finish_reason=raw))
        self.done = True
        return out

    def end_of_stream(self) -> list[ev.StreamEvent]:
        # Servers that never send [DONE] are complete once they gave a finish_reason.
        if not self.provider.requires_done_sentinel and self.raw_finish is not None:
            return self._close()
        return []
