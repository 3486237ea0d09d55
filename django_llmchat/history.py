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
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from .conf import settings
from .errors import ArgumentError, ProviderError
from .events import ContextCompacted
from .providers.types import ProviderMessage, ProviderRequest

logger = logging.getLogger("django_llmchat.history")

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

STRATEGIES = ("all", "window", "summarize")

SUMMARY_PROMPT = (
    "You compact a conversation so that it can go on without its earlier messages. Write a "
    "concise summary of the conversation below: the user's goals and preferences, facts "
    "and decisions established, names, numbers and identifiers that may matter later, "
    "results of tool calls, and open questions. Write it as notes for whoever continues "
    "the conversation; do not address the user."
)
"""The instructions the summary model gets (``LLMCHAT["HISTORY"]["summary_prompt"]``)."""

SUMMARY_HEADER = "Summary of the earlier conversation:\n\n"
"""What a summary is sent under (its stored content is the summary alone)."""

OPTION_KEYS = {
    "strategy": "a strategy",
    "margin": "tokens kept free beside the output (default: 5% of the window)",
    "keep": "the share of the request budget kept verbatim at a compaction (0 to 1)",
    "summary_model": "the model writing summaries (default: the chat's)",
    "summary_provider": "its provider (default: the chat's)",
    "summary_prompt": "the summary model's instructions",
    "summary_max_tokens": "the longest summary, in tokens",
    "estimator": "a token estimator, callable(ProviderMessage) -> tokens",
}

# the share of our estimate a vendor's count may be, at most and at least: a report
# outside it (a proxy that reports nothing useful) does not move the estimate further
_SCALE_LIMITS = (0.8, 4.0)
_LIMITS_TTL = 60.0


@dataclass(frozen=True)
class HistoryOptions:
    """A history policy with its options, resolved from the chat, its agent and
    ``LLMCHAT["HISTORY"]``."""

    strategy: str = "window"
    margin: int | None = None
    keep: float = 0.5
    summary_model: str | None = None
    summary_provider: str | None = None
    summary_prompt: str = SUMMARY_PROMPT
    summary_max_tokens: int = 1024
    estimator: str | None = None

    @property
    def processor(self) -> Callable | None:
        """The history processor the strategy names (``None`` for the built-in ones)."""
        return history_processor(self.strategy)

    def estimate(self) -> Callable[[ProviderMessage], int]:
        return token_estimator(self.estimator)


@dataclass(frozen=True)
class Window:
    """What one request may hold: ``context_window`` and ``max_output`` of the model (from
    the registry, ``None`` when unknown) and the ``budget`` left for the input (the window
    minus the output and the margin); ``count(messages)`` estimates their tokens the way
    the policy does."""

    context_window: int | None
    max_output: int | None
    budget: int | None
    count: Callable[[list[ProviderMessage]], int] = field(repr=False, compare=False)


def _as_dict(value: Any) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        return {"strategy": value}
    if isinstance(value, dict):
        return dict(value)
    raise ArgumentError(f"a history policy is a string or a dict, got {type(value).__name__}")


def registered_processors() -> dict[str, Any]:
    """``LLMCHAT["HISTORY_PROCESSORS"]``: history processors by name (dotted paths or
    functions)."""
    found = settings.HISTORY_PROCESSORS
    return found if isinstance(found, dict) else {}


def registered_estimators() -> dict[str, Any]:
    """``LLMCHAT["TOKEN_ESTIMATORS"]``: token estimators by name (dotted paths or
    functions)."""
    found = settings.TOKEN_ESTIMATORS
    return found if isinstance(found, dict) else {}


def _load(target: Any, what: str) -> Callable:
    try:
        found = import_string(target) if isinstance(target, str) else target
    except ImportError as exc:
        raise ArgumentError(f"{what} {target!r} cannot be imported: {exc}") from None
    if not callable(found):
        raise ArgumentError(f"{what} {target!r} is not callable")
    return found


def history_processor(strategy: str) -> Callable | None:
    """The function a strategy names: ``None`` for a built-in strategy, else the processor
    registered under that name in ``LLMCHAT["HISTORY_PROCESSORS"]``, else the one at that
    dotted path."""
    if strategy in STRATEGIES:
        return None
    target = registered_processors().get(strategy)
    return _load(strategy if target is None else target, "history processor")


def token_estimator(name: str | None) -> Callable[[ProviderMessage], int]:
    """The token estimator ``name`` names: :func:`estimate_tokens` for ``None``, else the
    one registered under that name in ``LLMCHAT["TOKEN_ESTIMATORS"]``, else the one at
    that dotted path."""
    if not name:
        return estimate_tokens
    target = registered_estimators().get(name)
    return _load(name if target is None else target, "token estimator")


def _name_problem(
    key: str, value: Any, builtin: tuple[str, ...], registered: dict, setting: str
) -> str | None:
    """Why ``value`` names no function for ``key``: neither a built-in, nor a name in
    ``registered`` (``LLMCHAT[setting]``), nor the dotted path of a function (which is
    imported to check it); ``None`` when it is one of them."""
    names = f"a name in LLMCHAT[{setting!r}]"
    choices = f"one of {', '.join(builtin)}, {names}" if builtin else names
    if not isinstance(value, str) or not value:
        return f"{key} must be {choices} or a dotted path, got {value!r}"
    if value in builtin or value in registered:
        return None
    if "." not in value:
        return f"{key} {value!r} is not {choices} nor a dotted path"
    try:
        found = import_string(value)
    except ImportError as exc:
        return f"{key} {value!r} cannot be imported: {exc}"
    return None if callable(found) else f"{key} {value!r} is not callable"


def history_problems(value: Any) -> list[tuple[str | None, str]]:
    """What is wrong with a history policy (a strategy, or a dict of options), as
    ``(option, sentence)`` pairs: the option each sentence is about (``None``: the
    policy as a whole); empty when it is valid. A strategy or an estimator may be a
    built-in or registered name, or a dotted path (which is imported to check it)."""
    try:
        data = _as_dict(value)
    except ArgumentError as exc:
        return [(None, str(exc))]
    problems: list[tuple[str | None, str]] = []
    for key in sorted(set(data) - set(OPTION_KEYS)):
        problems.append(
            (str(key), f"unknown option {key!r} (known: {', '.join(sorted(OPTION_KEYS))})")
        )
    strategy = data.get("strategy", "window")
    found = _name_problem(
        "strategy", strategy, STRATEGIES, registered_processors(), "HISTORY_PROCESSORS"
    )
    if found:
        problems.append(("strategy", found))
    for key in ("margin", "summary_max_tokens"):
        item = data.get(key)
        if item is not None and (isinstance(item, bool) or not isinstance(item, int) or item < 0):
            problems.append((key, f"{key} must be a whole number of tokens, got {item!r}"))
    keep = data.get("keep")
    if keep is not None and (
        isinstance(keep, bool) or not isinstance(keep, int | float) or not 0 < keep < 1
    ):
        problems.append(("keep", f"keep must be a number between 0 and 1, got {keep!r}"))
    for key in ("summary_model", "summary_provider", "summary_prompt"):
        item = data.get(key)
        if item is not None and (not isinstance(item, str) or not item):
            problems.append((key, f"{key} must be a non-empty string, got {item!r}"))
    if data.get("estimator") is not None:
        estimator = data["estimator"]
        found = _name_problem(
            "estimator", estimator, (), registered_estimators(), "TOKEN_ESTIMATORS"
        )
        if found:
            problems.append(("estimator", found))
    return problems


def history_errors(value: Any) -> list[str]:
    """What is wrong with a history policy (a strategy name, a dotted path or a dict of
    options), as sentences naming the key; empty when it is valid."""
    return [sentence for _, sentence in history_problems(value)]


def history_options(chat: Any = None, agent: Any = None) -> HistoryOptions:
    """The policy in effect for ``chat``: ``LLMCHAT["HISTORY"]``, updated by the agent's
    ``history``, updated by the chat's (a string replaces the strategy only)."""
    data: dict[str, Any] = {}
    for layer in (
        settings.HISTORY,
        getattr(agent, "history", None),
        getattr(chat, "history", None),
    ):
        if layer:
            data.update(_as_dict(layer))
    problems = history_errors(data)
    if problems:
        where = f"chat {chat.pk}" if getattr(chat, "pk", None) else "LLMCHAT['HISTORY']"
        raise ArgumentError(f"history policy of {where}: {problems[0]}")
    return HistoryOptions(**data)


# -- counting ---------------------------------------------------------------------------
# A tool call's and a tool result's framing on the wire, beside their own text: the longest
# of the dialects' (Chat Completions' call, Anthropic's result), so an estimate never falls
# short of what any of them sends.
_CALL_FRAME = len('{"id":"","type":"function","function":{"name":"","arguments":""}},')
_RESULT_FRAME = len(
    '{"role":"user","content":[{"type":"tool_result","tool_use_id":"",'
    '"content":[{"type":"text","text":""}]}]},'
)
_TOOL_FRAME = len('{"type":"function","function":{"name":"","description":"","parameters":}},')


def _size(text: str) -> int:
    """What ``text`` weighs on the wire: its UTF-8 bytes."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _escaped(text: str) -> int:
    """The size of ``text`` sent inside a JSON string (quotes, backslashes and newlines
    escaped): tool arguments travel as JSON in a string, results are often JSON."""
    return _size(text) + text.count('"') + text.count("\\") + text.count("\n")


def estimate_tokens(message: ProviderMessage) -> int:
    """A quick estimate of a message's tokens: about four bytes a token for its text, tool
    calls (with their ids, names, escaped arguments and the wire's JSON framing) and
    reasoning, a thousand for an image or a document, four for the message itself.
    Replace it with ``LLMCHAT["HISTORY"]["estimator"]``."""
    content = message.content
    if message.role == "tool":
        chars = _escaped(content) + _RESULT_FRAME
        chars += len(message.tool_call_id or "") + len(message.tool_name or "")
    else:
        chars = _size(content)
    for call in message.tool_calls:
        arguments = json.dumps(
            call.arguments, ensure_ascii=False, separators=(",", ":"), default=str
        )
        chars += _CALL_FRAME + len(call.call_id or "") + len(call.name) + _escaped(arguments)
        chars += len(call.thought_signature or "") + len(call.item_id or "")
    if message.thinking is not None:
        chars += _size(message.thinking.text or "") + len(message.thinking.signature or "")
    if message.reasoning_items:
        chars += len(json.dumps(message.reasoning_items, default=str))
    tokens = chars // 4 + 4
    for attachment in message.attachments:
        if attachment.mime_type.startswith("text/"):
            tokens += len(attachment.data) // 4
        else:
            tokens += 1000
    return tokens


def _request_overhead(request: ProviderRequest) -> int:
    """Tokens of what a request sends beside its messages: tool definitions (with their
    framing), a schema."""
    chars = 0
    for spec in request.tools:
        chars += _TOOL_FRAME + len(spec.name) + _size(spec.description)
        chars += len(json.dumps(spec.parameters, separators=(",", ":")))
    if request.schema:
        chars += len(json.dumps(request.schema))
    return chars // 4 + 8


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
