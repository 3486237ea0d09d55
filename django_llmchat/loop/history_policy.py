"""History policies: the options of what of a transcript each request sends, where they are
resolved (``LLMCHAT["HISTORY"]``, the agent, the chat), what is wrong with one, and the
history processors and token estimators named by them (built-in names, the ones
registered in ``LLMCHAT["HISTORY_PROCESSORS"]`` and ``LLMCHAT["TOKEN_ESTIMATORS"]``, or
dotted paths). :mod:`django_llmchat.loop.history` applies them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.utils.module_loading import import_string

from ..conf import settings
from ..errors import ArgumentError
from ..providers.types import ProviderMessage
from ..runs.estimates import estimate_tokens

STRATEGIES = ("all", "window", "summarize")

SUMMARY_PROMPT = (
    "You compact a conversation so that it can go on without its earlier messages. Write a "
    "concise summary of the conversation below: the user's goals and preferences, facts "
    "and decisions established, names, numbers and identifiers that may matter later, "
    "results of tool calls, and open questions. Write it as notes for whoever continues "
    "the conversation; do not address the user."
)
"""The instructions the summary model gets (``LLMCHAT["HISTORY"]["summary_prompt"]``)."""

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
