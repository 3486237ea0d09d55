"""History: what of a chat's stored transcript each request sends.

A policy is applied before every step of a run (in-process and in workers):

* ``"all"`` sends every stored message;
* ``"window"`` (the default) drops the oldest turns until the request fits the model's
  ``context_window`` minus its output and a margin;
* ``"summarize"`` stores a summary of the oldest turns as its own message (a compaction)
  and sends it instead of them, until the window fills again;
* a history processor, ``processor(messages, window)``, returns the messages to send:
  named in ``LLMCHAT["HISTORY_PROCESSORS"]`` (``{"name": "dotted.path"}``), or by its
  dotted path in settings, an agent or Python code.

API users name processors and token estimators by their registered names only
(:func:`django_llmchat.inputs.check_history`): the dotted paths a chat row holds were
written by Python code (``chat.with_history()``) or the admin, so they are honoured.

Whatever the policy, a tool call is never sent without its result (nor a result without
its call), system messages and the messages marked with ``cache_until_here()`` (pinned)
are always sent, and the stored transcript is never changed: compaction adds a row, it
deletes none.

Here are the policies applied (:class:`History`) and the summaries' requests; the
policies' options and the functions they name are in :mod:`django_llmchat.loop.history_policy`,
the token estimates in :mod:`django_llmchat.runs.estimates`, all importable from here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from django.core.signals import setting_changed

from ..errors import ProviderError
from ..events import ContextCompacted
from ..providers.types import ProviderMessage, ProviderRequest
from ..runs.estimates import _request_overhead, estimate_tokens
from .history_policy import (
    STRATEGIES,
    SUMMARY_PROMPT,
    HistoryOptions,
    Window,
    history_errors,
    history_options,
    history_problems,
    history_processor,
    registered_estimators,
    registered_processors,
    token_estimator,
)

logger = logging.getLogger("django_llmchat.loop.history")

__all__ = [
    "STRATEGIES",
    "SUMMARY_PROMPT",
    "HistoryOptions",
    "Window",
    "estimate_tokens",
    "history_errors",
    "history_options",
    "history_problems",
    "history_processor",
    "registered_estimators",
    "registered_processors",
    "token_estimator",
]

SUMMARY_HEADER = "Summary of the earlier conversation:\n\n"
"""What a summary is sent under (its stored content is the summary alone)."""


# the share of our estimate a vendor's count may be, at most and at least: a report
# outside it (a proxy that reports nothing useful) does not move the estimate further
_SCALE_LIMITS = (0.8, 4.0)


# -- the model's limits -----------------------------------------------------------------
_warned: set[tuple[str, str]] = set()
_scales: dict[Any, float] = {}  # per chat: the vendor's count over our estimate, last seen


def _forget_scales(sender: Any = None, **kwargs: Any) -> None:
    _scales.clear()


setting_changed.connect(_forget_scales, dispatch_uid="llmchat-history-scales")


# -- shaping a request ------------------------------------------------------------------
def _pinned(unit: list[ProviderMessage]) -> bool:
    """A unit that always goes: a system message, or one holding a cache-marked message
    (a marked reply goes with its results)."""
    return any(m.role == "system" or m.cache_boundary for m in unit)


def _turns(messages: list[ProviderMessage]) -> list[list[ProviderMessage]]:
    """Messages in turns: each user prompt starts one (tool results never do)."""
    turns: list[list[ProviderMessage]] = []
    for m in messages:
        if m.role == "user" or not turns:
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns


def _units(turn: list[ProviderMessage]) -> list[list[ProviderMessage]]:
    """A turn in units that cannot be split: the prompt, then each reply with its results."""
    units: list[list[ProviderMessage]] = []
    for m in turn:
        if m.role == "tool" and units:
            units[-1].append(m)
        else:
            units.append([m])
    return units


def paired(messages: list[ProviderMessage]) -> list[ProviderMessage]:
    """``messages`` without tool results whose call is absent and without replies whose
    calls lack a result (so a processor's choice never splits a call from its result)."""

    def key(ref: int | None, call_id: str | None) -> Any:
        return ("ref", ref) if ref is not None else ("id", call_id)

    results = {key(m.tool_call_ref, m.tool_call_id) for m in messages if m.role == "tool"}
    kept = [
        m
        for m in messages
        if not m.tool_calls or all(key(c.ref, c.call_id) in results for c in m.tool_calls)
    ]
    calls = {key(c.ref, c.call_id) for m in kept for c in m.tool_calls}
    return [m for m in kept if m.role != "tool" or key(m.tool_call_ref, m.tool_call_id) in calls]


class History:
    """One run's view of its chat's transcript: the stored messages (the runner appends
    what each step stores), the summary in effect, and the estimate of their tokens,
    corrected by what the vendor reports."""

    def __init__(
        self,
        chat: Any,
        agent: Any,
        messages: list[ProviderMessage],
        summary: tuple | None,
        tokens: dict[Any, dict[int, int]] | None = None,
        *,
        limits: Callable[[str, str], tuple[int | None, int | None]] | None = None,
        last_step: Callable[[Any], tuple[int, int] | None] | None = None,
    ):
        """``limits(provider, model_id)`` gives a model's ``(context_window,
        max_output_tokens)``; ``last_step(chat_id)`` the chat's last reported step as
        ``(message id, input tokens)``."""
        self.chat = chat
        self.options = history_options(chat, agent)
        self.messages = messages
        self.summary = summary  # (pk, covered up to this message's pk, content)
        self._estimate = self.options.estimate()
        # estimates of stored messages by pk, kept with the built history for later runs;
        # of the others (instructions, a summary's header) by id(), for this run
        shared = {} if tokens is None else tokens
        self._tokens: dict[int, int] = shared.setdefault(self.options.estimator, {})
        self._local: dict[int, int] = {}
        self._fitted: dict[int, int] = {}  # the estimate of the request sent, by id()
        self.scale: float | None = None  # vendor count / our estimate, once known
        self.compactions = 0
        self._limits = limits or (lambda provider, model_id: (None, None))
        self._last_step = last_step

    # -- counting -------------------------------------------------------------------------
    def tokens(self, message: ProviderMessage) -> int:
        ref = message.ref
        if ref is None:
            found = self._local.get(id(message))
            if found is None:
                found = self._local[id(message)] = int(self._estimate(message))
            return found
        found = self._tokens.get(ref)
        if found is None:
            found = self._tokens[ref] = int(self._estimate(message))
        return found

    def raw_count(self, messages: list[ProviderMessage]) -> int:
        """Our estimate of ``messages``, unscaled (one pass; estimates are remembered)."""
        known = self._tokens
        total = 0
        for m in messages:
            ref = m.ref
            found = known.get(ref) if ref is not None else None
            total += found if found is not None else self.tokens(m)
        return total

    def count(self, messages: list[ProviderMessage]) -> int:
        """Estimated tokens of ``messages``, scaled by the vendor's last report."""
        return int(self.raw_count(messages) * (self.scale or 1.0))

    def estimate(self, message: ProviderMessage) -> int:
        """Estimated tokens of one message outside the history (a reply cut short, what a
        stopped attempt is billed for), scaled as :meth:`count`; not remembered."""
        return int(int(self._estimate(message)) * (self.scale or 1.0))

    def observed(self, request: ProviderRequest, tokens: Any) -> None:
        """A step's reported input tokens: later estimates are scaled to match them."""
        reported = sum(
            getattr(tokens, name) or 0
            for name in ("input_tokens", "cache_read_tokens", "cache_write_tokens")
        )
        raw = self._fitted.get(id(request))
        if raw is None:
            raw = self.raw_count(request.messages)
        estimated = raw + _request_overhead(request)
        if reported > 0 and estimated > 0:
            low, high = _SCALE_LIMITS
            self.scale = min(high, max(low, reported / estimated))
            if len(_scales) > 10_000:
                _scales.clear()
            _scales[self.chat.pk] = self.scale

    def _calibrate(self, request: ProviderRequest, budget: int) -> None:
        """Before the run's first step near the limit: the scale this process last saw for
        the chat, else one from the chat's last reported step (one query; what that step
        sent is taken to be what the policy sends now of the messages before its reply)."""
        found = _scales.get(self.chat.pk)
        if found is not None:
            self.scale = found
            return
        self.scale = 1.0
        last = self._last_step(self.chat.pk) if self._last_step is not None else None
        if last is None:
            return
        message_id, reported = last
        index = {m.ref: i for i, m in enumerate(self.messages) if m.ref is not None}
        if message_id not in index or reported <= 0:
            return
        before = index[message_id]
        sent = [m for m in request.messages if m.ref is None or index.get(m.ref, before) < before]
        sent = self.trim(sent, budget)
        estimated = self.raw_count(sent) + _request_overhead(request)
        if estimated > 0:
            low, high = _SCALE_LIMITS
            self.scale = min(high, max(low, reported / estimated))

    def window(self, request: ProviderRequest) -> Window:
        chat = self.chat
        context_window, max_output = self._limits(chat.provider, chat.model_id)
        asked = request.params.get("max_tokens") or request.params.get("max_output_tokens")
        if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
            max_output = asked
        budget = None
        if context_window:
            output = max_output or min(4096, context_window // 4)
            output = min(output, context_window // 2)
            margin = self.options.margin
            if margin is None:
                margin = max(context_window // 20, 8)
            budget = max(0, context_window - output - margin - _request_overhead(request))
        return Window(context_window, max_output, budget, self.count)

    # -- the summary ----------------------------------------------------------------------
    def with_summary(self, messages: list[ProviderMessage]) -> list[ProviderMessage]:
        """``messages`` (stored order) with the summary in place of what it covers."""
        if self.summary is None:
            return messages
        pk, until, content = self.summary
        boundary = next((i for i, m in enumerate(messages) if m.ref == until), None)
        if boundary is None:
            return messages
        kept = [m for unit in _units(messages[: boundary + 1]) if _pinned(unit) for m in unit]
        if len(kept) == boundary + 1:  # everything it covers is pinned
            return messages
        note = ProviderMessage(role="system", content=SUMMARY_HEADER + content, ref=pk)
        return [*kept, note, *messages[boundary + 1 :]]

    # -- fitting a request ----------------------------------------------------------------
    def fit(
        self,
        build: Callable[[list[ProviderMessage]], ProviderRequest],
        *,
        overflow: ProviderRequest | None = None,
        compact: Callable | None = None,
    ) -> Iterator[Any]:
        """Generator: the request for the next step (its return value), after the policy;
        a compaction yields its :class:`ContextCompacted` event. ``overflow``: the request
        the vendor refused as too long (the budget shrinks below it); ``compact(covered,
        boundary, previous)`` stores a summary and returns its row (or ``None``)."""
        request, over = self._shape(build, overflow)
        if over is None:
            return request
        before, budget = over
        if self.options.strategy == "summarize" and compact is not None:
            done = yield from self._compact(request, budget, compact, before)
            if done:
                request = build(self.with_summary(self.messages))
                if self.count(request.messages) <= budget:
                    return request
        request.messages = self.trim(request.messages, budget)
        return request

    def fit_now(
        self, build: Callable[[list[ProviderMessage]], ProviderRequest]
    ) -> ProviderRequest | None:
        """The request :meth:`fit` gives when it needs no compaction (no summary to
        store), else ``None``: a run's first request, built before the run is admitted."""
        request, over = self._shape(build, None)
        if over is None:
            return request
        if self.options.strategy == "summarize":
            return None
        request.messages = self.trim(request.messages, over[1])
        return request

    def _shape(
        self,
        build: Callable[[list[ProviderMessage]], ProviderRequest],
        overflow: ProviderRequest | None,
    ) -> tuple[ProviderRequest, tuple[int, int] | None]:
        """The request after the policy's cheap part, and ``(its estimate, the budget)``
        when it is over the budget (``None`` when it is done)."""
        options = self.options
        request = build(self.with_summary(self.messages))
        if options.strategy == "all" and overflow is None:
            return request, None
        window = self.window(request)
        processor = options.processor
        if processor is not None and overflow is None:
            request.messages = paired(list(processor(list(request.messages), window)))
            return request, None
        budget = window.budget
        if overflow is not None:
            # the vendor counted more than its window holds: ask for a quarter less
            tighter = int(self.count(overflow.messages) * 0.75)
            budget = min(budget, tighter) if budget is not None else tighter
        elif budget is None:
            key = (self.chat.provider, self.chat.model_id)
            if key not in _warned:
                _warned.add(key)
                logger.warning(
                    "the context window of %s on %s is unknown (no LLMModel row with "
                    "context_window): the whole history is sent; run manage.py "
                    "llmchat_sync_models or add the row",
                    self.chat.model_id,
                    self.chat.provider,
                )
            return request, None
        raw = self.raw_count(request.messages)
        if self.scale is None and overflow is None and raw > budget // 2:
            self._calibrate(request, budget)
        before = int(raw * (self.scale or 1.0))
        if before <= budget:
            self._fitted = {id(request): raw}
            return request, None
        return request, (before, budget)

    def trim(self, messages: list[ProviderMessage], budget: int) -> list[ProviderMessage]:
        """The window: the oldest turns dropped until ``messages`` fit ``budget``; the
        system messages, the cache-marked messages (with their results) and the last
        turn's prompt always stay."""
        count = self.count
        turns = _turns(messages)
        total = count(messages)
        dropped = 0
        while total > budget and dropped < len(turns) - 1:
            for unit in _units(turns[dropped]):
                if not _pinned(unit):
                    total -= count(unit)
            dropped += 1
        kept_turns = turns[dropped:]
        if total > budget and kept_turns:
            # the last turn alone is too long (a long tool loop): drop its oldest replies
            # with their results, keeping its prompt and its latest reply
            units = _units(kept_turns[-1])
            first, rest = units[:1], units[1:]
            while total > budget and len(rest) > 1:
                unit = rest.pop(0)
                if _pinned(unit):
                    first.append(unit)
                else:
                    total -= count(unit)
            kept_turns[-1] = [m for unit in first + rest for m in unit]
        out = [
            m for turn in turns[:dropped] for unit in _units(turn) if _pinned(unit) for m in unit
        ]
        for turn in kept_turns:
            out.extend(turn)
        return out

    def _compact(self, request: ProviderRequest, budget: int, compact: Callable, before: int):
        """Store a summary of the oldest turns, keeping the latest ones verbatim (up to
        ``keep`` of the budget). Returns whether a summary was stored."""
        turns = _turns(request.messages)
        keep = int(budget * self.options.keep)
        tail = 0
        used = 0
        for turn in reversed(turns):
            cost = self.count([m for unit in _units(turn) if not _pinned(unit) for m in unit])
            if tail and used + cost > keep:
                break
            used += cost
            tail += 1
        covered = [
            m
            for turn in turns[: len(turns) - tail]
            for unit in _units(turn)
            if not _pinned(unit)
            for m in unit
            if m.ref is not None
        ]
        if not covered:
            return False
        order = {m.ref: i for i, m in enumerate(self.messages) if m.ref is not None}
        boundary = max(covered, key=lambda m: order.get(m.ref, -1))
        previous = self.summary[2] if self.summary is not None else None
        row = compact(covered, boundary.ref, previous, budget)
        if row is None:
            return False
        self.summary = (row.pk, boundary.ref, row.content)
        self.compactions += 1
        after = self.count(self.with_summary(self.messages))
        yield ContextCompacted(
            message_id=row.pk,
            summary_until=boundary.ref,
            messages=len(covered),
            tokens_before=before,
            tokens_after=after,
        )
        return True


def transcript_text(messages: list[ProviderMessage], previous: str | None, limit: int) -> str:
    """The messages a summary covers as plain text for the summary model (the newest
    ``limit`` tokens of it at most, about four characters a token)."""
    lines = []
    if previous:
        lines.append(f"[summary of what came before]\n{previous}")
    for m in messages:
        if m.role == "tool":
            lines.append(f"[result of {m.tool_name or 'a tool'}] {m.content}")
            continue
        if m.content:
            lines.append(f"{m.role}: {m.content}")
        for call in m.tool_calls:
            lines.append(
                f"[{m.role} called {call.name}({json.dumps(call.arguments, default=str)})]"
            )
        if m.attachments:
            names = ", ".join(a.filename or a.mime_type for a in m.attachments)
            lines.append(f"[{m.role} attached {names}]")
    text = "\n\n".join(lines)
    chars = max(limit, 256) * 4
    return text if len(text) <= chars else text[-chars:]


def summary_request(
    options: HistoryOptions,
    model_id: str,
    covered: list[ProviderMessage],
    previous: str | None,
    budget: int,
) -> ProviderRequest:
    """The one request that writes a summary."""
    return ProviderRequest(
        model_id=model_id,
        messages=[
            ProviderMessage(role="system", content=options.summary_prompt),
            ProviderMessage(role="user", content=transcript_text(covered, previous, budget)),
        ],
        params={"max_tokens": options.summary_max_tokens},
    )


def check_summary_response(provider: str, content: str) -> str:
    if not content.strip():
        raise ProviderError(f"{provider} wrote an empty summary", provider=provider)
    return content.strip()
