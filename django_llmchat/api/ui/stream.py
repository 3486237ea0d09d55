"""The library's stream events as the AI SDK's UI message chunks (:mod:`.chunks`).

:class:`UIMessageStream` only encodes: a run streamed in the response, a run followed from
the chat's event stream and a replayed one feed it their events, so all say the same
thing. Each event type has its handler; text and reasoning parts share one
implementation (:class:`_Part`: start, delta, end)."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import suppress
from decimal import Decimal, InvalidOperation
from typing import Any

from ...events import (
    FinishReasonDone,
    ReasoningDelta,
    ReasoningDone,
    RunFinished,
    RunStarted,
    StepFinished,
    StreamEvent,
    TextDelta,
    TextDone,
    ToolApprovalRequest,
    ToolCallDelta,
    ToolCallDone,
    ToolResultDone,
    WebSearchDone,
)
from ...models import Run
from .chunks import (
    REASONING,
    TEXT,
    AbortChunk,
    Chunk,
    ErrorChunk,
    FinishChunk,
    FinishStepChunk,
    MessageMetadataChunk,
    PartKind,
    SourceUrlChunk,
    StartChunk,
    StartStepChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolInputDeltaChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
)

__all__ = ["UIMessageStream"]

# the AI SDK's finish reasons, from the library's normalized ones
_FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content-filter",
    "tool_calls": "tool-calls",
    "error": "error",
}


class _Part:
    """The open text (or reasoning) part of the step: its id while open, and whether the
    step streamed this kind (a ``...Done`` then repeats what was streamed).

    ``whole_step``: the ``Done`` event of this kind carries the step's whole text (a text
    sent whole stands for the step's); else each one is a block of its own (reasoning)."""

    def __init__(self, kind: PartKind, *, whole_step: bool):
        self.kind = kind
        self.whole_step = whole_step
        self.id: str | None = None
        self.streamed = False

    def start(self, part_id: str) -> list[Chunk]:
        self.id = part_id
        return [self.kind.start(id=part_id)]

    def delta(self, text: str) -> list[Chunk]:
        self.streamed = True
        return [self.kind.delta(id=self.id, delta=text)]

    def end(self) -> list[Chunk]:
        if self.id is None:
            return []
        out = [self.kind.end(id=self.id)]
        self.id = None
        return out


def call_key(call_id: str, item_id: str | None) -> str:
    """What names a call in the stream before its ``toolCallId`` is made: its item id (the
    Responses API streams a call by it), else its call id (``""`` without either)."""
    return item_id or call_id or ""


class ToolCallIds:
    """The ``toolCallId`` of each call of one run, in the calls' order: the call's key
    (:func:`call_key`) while no earlier call of the chat had it, else ``<key>-<n>`` for
    the chat's n-th call with it (``call-<n>`` without any id). One rule for the stream
    and the reload (``GET ui/chat/{id}/messages``), so a vendor numbering its calls from
    ``call_0`` in every step still gives each call its own id in the chat.

    ``prior(key)``: how many calls of the chat before this run had that call id (asked
    once per key, when first needed); ``stored``: the keys of the run's calls already
    stored before this stream (a run continuing after an approval)."""

    def __init__(self, prior: Callable[[str], int], stored: list[str] | None = None):
        self.prior = prior
        self.stored: dict[str, int] = {}
        for key in stored or ():
            self.stored[key] = self.stored.get(key, 0) + 1
        self.counts: dict[str, int] = {}
        self._saved: dict[str, int] = {}

    def next(self, key: str) -> str:
        """The ``toolCallId`` of the run's next call named ``key``."""
        if key not in self.counts:
            self.counts[key] = self.prior(key) + self.stored.get(key, 0)
        n = self.counts[key] = self.counts[key] + 1
        return key if key and n == 1 else f"{key or 'call'}-{n}"

    def checkpoint(self) -> None:
        """The run's calls so far are stored (its step ended)."""
        self._saved = dict(self.counts)

    def restore(self) -> None:
        """The run starts again from its last stored step (a retry, a takeover): the calls
        of the step it did not store are not the run's."""
        self.counts = dict(self._saved)


def prior_calls(chat_id: int, run_id: int, key: str) -> int:
    """How many calls of the chat with call id ``key`` came before run ``run_id``: those
    of earlier runs and those stored without a run (:class:`ToolCallIds`' ``prior``)."""
    from django.db.models import Q

    from ...models import ToolCall

    earlier = Q(message__run__isnull=True) | Q(message__run_id__lt=run_id)
    return ToolCall.objects.filter(earlier, chat_id=chat_id, call_id=key).count()


class UIMessageStream:
    """Turns one run's stream events into UI message chunks (dicts), keeping what the
    protocol needs: open text and reasoning parts, steps, the ids of tool calls.

    ``message_id`` is the UI message the chunks fill (``run-<run id>`` unless given: the
    client's assistant message when a run continues after approvals); ``tool_ids`` maps
    stored call ids to the ``toolCallId`` a client already knows, ``known_calls`` lists
    ``(call id, tool name, toolCallId)`` of those calls in their order (for call ids a
    vendor repeated) and ``run_calls`` the ``(call id, key)`` of the calls the run stored
    before this stream (:func:`~.messages.stored_calls`).
    ``finish_metadata(event)`` gives more of the ``finish`` chunk's metadata, read when the
    run ends (the reply's alternatives: :func:`~.paths.reply_branch`).

    Every stored call gets its own ``toolCallId`` in the chat (a vendor may repeat an id,
    in a step or across steps, or give none): :class:`ToolCallIds`, which the reload
    follows too. Its ``approvalId`` is the call id, or ``<call id>#<n>`` for the run's
    n-th call with that id (n > 1), which
    :func:`~django_llmchat.api.ui.chats.decide_all` maps back to exactly that call.
    Results and approval requests name only a call id: they go to the run's calls with
    it in their order (by tool name first)."""

    def __init__(
        self,
        *,
        chat_id: int | None = None,
        message_id: str | None = None,
        tool_ids: dict[str, str] | None = None,
        known_calls: list[tuple[str, str, str]] | None = None,
        run_calls: list[tuple[str, str]] | None = None,
        finish_metadata: Callable[[RunFinished], dict[str, Any]] | None = None,
    ):
        self.chat_id = chat_id
        self.finish_metadata = finish_metadata
        self.message_id = message_id
        self.started = False
        self.ended = False
        self.errored = False
        self.in_step = False
        self.step_stored = False  # the open step was stored; tool results still join it
        self.text = _Part(TEXT, whole_step=True)
        self.reasoning = _Part(REASONING, whole_step=False)
        self.counter = 0
        self.items: dict[str, str] = {}  # a call's item id -> its toolCallId
        self.inputs: set[str] = set()  # toolCallIds whose tool-input-start was sent
        self.tool_ids: dict[str, str] = dict(tool_ids or {})  # call id -> toolCallId
        # call id -> [(tool name, toolCallId, approvalId)] of calls still to be answered
        self.waiting: dict[str, list[tuple[str, str, str]]] = {}
        for call_id, name, known in known_calls or ():
            self.waiting.setdefault(call_id, []).append((name, known, call_id))
        self.call_counts: dict[str, int] = {}  # call id -> the run's calls with it
        for call_id, _ in run_calls or ():
            self.call_counts[call_id] = self.call_counts.get(call_id, 0) + 1
        self._saved_counts = dict(self.call_counts)
        self.ids = ToolCallIds(self._prior, [key for _, key in run_calls or ()])
        self.finish_reason: str | None = None
        self.run_id: str | None = None
        self.tokens: dict[str, int] = {}
        self.cost: str | None = None
        self.estimated = False  # some step's tokens and cost are our estimate

    # -- the public face
    def feed(self, event: StreamEvent) -> list[dict]:
        """The chunks for one event (often none)."""
        if self.ended:
            return []
        handler = _HANDLERS.get(type(event))
        return [item.to_dict() for item in handler(self, event)] if handler else []

    def error(self, text: str) -> list[dict]:
        """An ``error`` chunk (once)."""
        return [item.to_dict() for item in self._error(text)]

    # -- the message, its steps and parts
    def _next(self, kind: str) -> str:
        self.counter += 1
        return f"{kind}-{self.counter}"

    def _start(self, run_id: str | None = None) -> list[Chunk]:
        if self.started:
            return []
        self.started = True
        if self.message_id is None:
            self.message_id = f"run-{run_id}" if run_id else self._next("message")
        metadata: dict[str, Any] = {}
        if self.chat_id is not None:
            metadata["chatId"] = self.chat_id
        if run_id:
            metadata["runId"] = run_id
        return [StartChunk(message_id=self.message_id, message_metadata=metadata or None)]

    def _close_parts(self) -> list[Chunk]:
        return self.text.end() + self.reasoning.end()

    def _content(self, *, tool_output: bool = False) -> list[Chunk]:
        """Before a content chunk: the message has started and a step is open (a stored
        step stays open for its tool results only)."""
        out = self._start()
        if self.in_step and self.step_stored and not tool_output:
            out += self._close_parts()
            out.append(FinishStepChunk())
            self.in_step = False
        if not self.in_step:
            out.append(StartStepChunk())
            self.in_step, self.step_stored = True, False
            self.text.streamed = self.reasoning.streamed = False
        return out

    def _delta(self, part: _Part, other: _Part, text: str) -> list[Chunk]:
        """A piece of a text or reasoning part: the other kind's open part ends."""
        if not text:
            return []
        out = self._content() + other.end()
        if part.id is None:
            out += part.start(self._next(part.kind.prefix))
        return out + part.delta(text)

    def _done(self, part: _Part, text: str) -> list[Chunk]:
        """The end of a text or reasoning part; sent whole when nothing of it streamed."""
        if part.id is not None:
            return part.end()
        if part.streamed or not text:
            return []
        out = self._content()
        out += part.start(self._next(part.kind.prefix)) + part.delta(text) + part.end()
        part.streamed = part.whole_step
        return out

    def _error(self, text: str) -> list[Chunk]:
        if self.errored or self.ended:
            return []
        self.errored = True
        return [*self._start(), *self._close_parts(), ErrorChunk(error_text=text)]

    # -- handlers, one per event type
    def _on_run_started(self, event: RunStarted) -> list[Chunk]:
        if self.started and event.run_id == self.run_id:
            self._restart()  # a run taken over restarts from its last stored step
        self.run_id = event.run_id or self.run_id
        return self._start(event.run_id) + self._close_parts()

    def _on_text_delta(self, event: TextDelta) -> list[Chunk]:
        return self._delta(self.text, self.reasoning, event.content)

    def _on_text_done(self, event: TextDone) -> list[Chunk]:
        return self._done(self.text, event.content)

    def _on_reasoning_delta(self, event: ReasoningDelta) -> list[Chunk]:
        return self._delta(self.reasoning, self.text, event.content)

    def _on_reasoning_done(self, event: ReasoningDone) -> list[Chunk]:
        return self._done(self.reasoning, event.part.text if event.part is not None else "")

    def _on_tool_call_delta(self, event: ToolCallDelta) -> list[Chunk]:
        out = self._content() + self._close_parts()
        key = event.item_id or ""
        tool_call_id = self.items.get(key)
        if tool_call_id is None:  # the call's id from its first chunk on
            tool_call_id = self.items[key] = self.ids.next(key)
        out += self._input_start(tool_call_id, event.name or "")
        if event.arguments_delta:
            out.append(
                ToolInputDeltaChunk(
                    tool_call_id=tool_call_id, input_text_delta=event.arguments_delta
                )
            )
        return out

    def _on_tool_call_done(self, event: ToolCallDone) -> list[Chunk]:
        out = self._content() + self._close_parts()
        streamed = self.items.pop(event.item_id or "", None)  # its deltas' toolCallId
        tool_call_id, approval_id = self._new_call(event.call_id, event.item_id, streamed)
        self.tool_ids[event.call_id] = tool_call_id
        self.waiting.setdefault(event.call_id, []).append((event.name, tool_call_id, approval_id))
        out += self._input_start(tool_call_id, event.name)
        try:
            arguments = json.loads(event.arguments or "{}")
        except ValueError:
            arguments = event.arguments
        return out + [
            ToolInputAvailableChunk(
                tool_call_id=tool_call_id, tool_name=event.name, input=arguments
            )
        ]

    def _on_tool_approval_request(self, event: ToolApprovalRequest) -> list[Chunk]:
        out = self._content(tool_output=True)
        tool_call_id, approval_id = self._answered(event.call_id, event.name)
        return out + [ToolApprovalRequestChunk(approval_id=approval_id, tool_call_id=tool_call_id)]

    def _on_tool_result_done(self, event: ToolResultDone) -> list[Chunk]:
        out = self._content(tool_output=True)
        tool_call_id, _ = self._answered(event.call_id, event.name)
        if event.error_type == "denied":
            return out + [ToolOutputDeniedChunk(tool_call_id=tool_call_id)]
        if event.error_type:
            return out + [
                ToolOutputErrorChunk(
                    tool_call_id=tool_call_id, error_text=_error_text(event.result)
                )
            ]
        return out + [
            ToolOutputAvailableChunk(tool_call_id=tool_call_id, output=_output(event.result))
        ]

    def _on_web_search_done(self, event: WebSearchDone) -> list[Chunk]:
        out = self._content()
        for source in event.sources:
            url = source.get("url")
            if url:
                title = str(source["title"]) if source.get("title") else None
                out.append(SourceUrlChunk(source_id=self._next("source"), url=url, title=title))
        return out

    def _on_finish_reason_done(self, event: FinishReasonDone) -> list[Chunk]:
        self.finish_reason = event.finish_reason
        return []

    def _on_step_finished(self, event: StepFinished) -> list[Chunk]:
        out = self._start() + self._close_parts()
        if not self.in_step:
            out.append(StartStepChunk())
            self.in_step = True
        self.step_stored = True
        self.ids.checkpoint()  # the step's calls are stored
        self._saved_counts = dict(self.call_counts)
        self.finish_reason = event.finish_reason
        for name, value in event.token_usage.to_dict().items():
            self.tokens[name] = self.tokens.get(name, 0) + value
        self.cost = _usd_sum(self.cost, event.cost)
        self.estimated = self.estimated or bool(event.estimated)
        metadata: dict[str, Any] = {
            "storedMessageId": event.message_id,
            "tokens": dict(self.tokens),
        }
        if event.model_id:  # the model that answered: the chat's, or a fallback
            metadata["modelId"] = event.model_id
        if event.provider:
            metadata["provider"] = event.provider
        if self.cost is not None:
            metadata["cost"] = self.cost
        if self.estimated:
            metadata["estimated"] = True
        return out + [MessageMetadataChunk(message_metadata=metadata)]

    def _on_run_finished(self, event: RunFinished) -> list[Chunk]:
        if event.status == "retrying":  # the same run starts again: its RunStarted follows
            self._restart()
            return self._close_parts()
        out = self._start(event.run_id)
        if event.status == "blocked":
            out += self._error("A guardrail blocked the message.")
        elif event.error:
            out += self._error(event.error)
        out += self._close_parts()
        if self.in_step:
            out.append(FinishStepChunk())
            self.in_step = False
        if event.status in (Run.CANCELLED, Run.INTERRUPTED):
            # stopped: what was streamed is what was stored, and the message ends here
            out.append(AbortChunk(reason=event.status))
        metadata: dict[str, Any] = {"status": event.status}
        if event.run_id:
            metadata["runId"] = event.run_id
        if event.message_id is not None:
            metadata["storedMessageId"] = event.message_id
        if event.token_usage is not None:
            metadata["tokens"] = event.token_usage.to_dict()
        if event.cost is not None:
            metadata["cost"] = event.cost
        if event.estimated:
            metadata["estimated"] = True
        if self.finish_metadata is not None and event.run_id:
            metadata.update(self.finish_metadata(event))
        out.append(
            FinishChunk(finish_reason=self._finish_reason(event.status), message_metadata=metadata)
        )
        self.ended = True
        return out

    # -- tool calls' ids
    def _input_start(self, tool_call_id: str, name: str) -> list[Chunk]:
        """``tool-input-start`` once per call."""
        if tool_call_id in self.inputs:
            return []
        self.inputs.add(tool_call_id)
        return [ToolInputStartChunk(tool_call_id=tool_call_id, tool_name=name)]

    def _answered(self, call_id: str, name: str) -> tuple[str, str]:
        """``(toolCallId, approvalId)`` of the next call with this id waiting for its
        result or approval request (of this tool first)."""
        queue = self.waiting.get(call_id)
        if queue:
            index = next((i for i, item in enumerate(queue) if item[0] == name), 0)
            _, tool_call_id, approval_id = queue.pop(index)
            return tool_call_id, approval_id
        return self.tool_ids.get(call_id, call_id), call_id

    def _new_call(self, call_id: str, item_id: str | None, streamed: str | None) -> tuple[str, str]:
        """``(toolCallId, approvalId)`` of a call the run just made (``streamed``: the id
        its deltas had, kept for it)."""
        n = self.call_counts[call_id] = self.call_counts.get(call_id, 0) + 1
        approval_id = call_id if n == 1 and call_id else f"{call_id}#{n}"
        return streamed or self.ids.next(call_key(call_id, item_id)), approval_id

    def _prior(self, key: str) -> int:
        """How many calls of the chat before this run had the call id ``key``."""
        if self.chat_id is None or not (self.run_id or "").isdigit():
            return 0
        return prior_calls(self.chat_id, int(self.run_id or 0), key)

    def _restart(self) -> None:
        """The run starts again from its last stored step: what its unstored step began
        is dropped (its calls, their ids)."""
        self.ids.restore()
        self.call_counts = dict(self._saved_counts)
        self.items.clear()

    def _finish_reason(self, status: str) -> str:
        if status == Run.AWAITING_APPROVAL:
            return "tool-calls"
        if status == Run.FAILED:
            return "error"
        if status == "blocked":
            return "content-filter"
        if status != Run.SUCCEEDED:
            return "other"
        return _FINISH_REASONS.get(self.finish_reason or "stop", "other")


_HANDLERS: dict[type, Callable[[UIMessageStream, Any], list[Chunk]]] = {
    RunStarted: UIMessageStream._on_run_started,
    TextDelta: UIMessageStream._on_text_delta,
    TextDone: UIMessageStream._on_text_done,
    ReasoningDelta: UIMessageStream._on_reasoning_delta,
    ReasoningDone: UIMessageStream._on_reasoning_done,
    ToolCallDelta: UIMessageStream._on_tool_call_delta,
    ToolCallDone: UIMessageStream._on_tool_call_done,
    ToolApprovalRequest: UIMessageStream._on_tool_approval_request,
    ToolResultDone: UIMessageStream._on_tool_result_done,
    WebSearchDone: UIMessageStream._on_web_search_done,
    FinishReasonDone: UIMessageStream._on_finish_reason_done,
    StepFinished: UIMessageStream._on_step_finished,
    RunFinished: UIMessageStream._on_run_finished,
}  # any other event (usage, guardrails, interrupts, ...) has no chunk


def _usd_sum(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a if b is None else b
    try:
        return str(Decimal(a) + Decimal(b))
    except InvalidOperation:
        return None


def _output(text: str) -> Any:
    """A tool's result as the client gets it: JSON objects and arrays decoded, any other
    text as it is."""
    if text[:1] in ("{", "["):
        with suppress(ValueError):
            return json.loads(text)
    return text


def _error_text(text: str) -> str:
    try:
        found = json.loads(text)
        return str(found["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return text or "The tool failed."
