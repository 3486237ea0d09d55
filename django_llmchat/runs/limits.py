"""Spending limits per user: USD per day and per month, tokens per day, runs per hour and
concurrent runs, read from the Usage and Run rows (the one query: ``limits_spend``).

The limits of a user are ``LLMCHAT["LIMITS"]["default"]``, overridden by what
``LLMCHAT["LIMITS_FOR"](user)`` returns (a group's or a tenant's limits), overridden by the
user's :class:`~django_llmchat.models.Limit` row (edited in the admin). Limits are off
while ``LLMCHAT["LIMITS"]`` is ``None`` (the default).

One check is ONE query: the user's limit row, the sums of the usage rows of the day and
the month, the reservations of the user's unfinished runs (and, when a run is about to be
queued, the runs of the last hour and those queued or running, and the size of the chat's
last answered request) come back in a single statement over indexed columns.

A run reserves its expected cost when it is admitted (:func:`reservation`: its first
request's estimated input and an output of the request's ``max_tokens``, else
``LLMCHAT["LIMITS"]["reserve_output_tokens"]``, priced by :mod:`django_llmchat.catalog.pricing`);
:mod:`django_llmchat.runs` stores it on the run (``Run.reserved_cost``). The USD limits
count what the usage rows cost plus the reservations of the user's unfinished runs
(queued, running, awaiting approval): a run ending releases its reservation in the
transaction that ends it, its status leaving the unfinished ones. A run is admitted, and
a provider call made, only while that sum, the new run's reservation included, stays under
the budget.

* :func:`admit` is called by :mod:`django_llmchat.runs` whenever a run is about to be
  queued or queued again (``chat.ask()``, ``chat.stream()``, ``chat.ask_later()``, the
  REST API, ``ui/chat``, a regenerate, a tool-call decision), inside the transaction that
  creates the run and under the user's lock, so racing requests are admitted one at a
  time: over a hard limit it raises :class:`~django_llmchat.errors.BudgetExceededError`
  and nothing is stored.
* :func:`check` is called by the loop before every provider call: over a hard limit the
  run ends ``interrupted`` with reason ``budget`` after its last stored step.
* Past ``soft`` (a fraction of each limit, e.g. ``0.8``) the
  :data:`~django_llmchat.signals.budget_warning` signal is sent and the run streams a
  ``budget_warning`` event (once per run and limit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth import get_user_model
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from ..catalog.pricing import price
from ..conf import settings
from ..errors import BudgetExceededError
from ..models.limit import LIMIT_FIELDS
from ..providers.types import AttachmentData, ProviderMessage
from ..values import Tokens
from .estimates import estimate_tokens
from .limits_spend import _QUERIES as _QUERIES
from .limits_spend import _closed_days, _money, spend, spend_annotations
from .limits_spend import _datetime as _datetime
from .limits_spend import _query as _query
from .limits_spend import _windows as _windows

__all__ = [
    "LIMIT_NAMES",
    "MONEY_LIMITS",
    "Verdict",
    "SoftLimitReached",
    "admit",
    "check",
    "prompt_tokens",
    "reservation",
    "forget",
    "limits_for",
    "output_reservation",
    "spend",
    "spend_annotations",
]

LIMIT_NAMES = LIMIT_FIELDS
MONEY_LIMITS = frozenset({"usd_per_day", "usd_per_month"})
# the limits checked before every provider call; the others only when a run is queued
SPEND_LIMITS = ("usd_per_day", "usd_per_month", "tokens_per_day")
DEFAULT_RESERVE_OUTPUT_TOKENS = 4096
"""The output tokens a run reserves when its request sets no ``max_tokens``
(``LLMCHAT["LIMITS"]["reserve_output_tokens"]`` replaces it)."""

_MESSAGES = {
    "usd_per_day": "The daily spending limit is reached.",
    "usd_per_month": "The monthly spending limit is reached.",
    "tokens_per_day": "The daily token limit is reached.",
    "runs_per_hour": "Too many runs were started in the last hour.",
    "concurrent_runs": "Too many runs are queued or running at once.",
}
_MESSAGES_RESERVED = {
    "usd_per_day": "The daily spending limit leaves too little for this run's expected cost.",
    "usd_per_month": "The monthly spending limit leaves too little for this run's expected cost.",
}


@dataclass(frozen=True)
class SoftLimitReached:
    """A limit past its soft fraction (still under the limit)."""

    limit: str
    used: Any
    allowed: Any
    resets_at: datetime | None


@dataclass
class Verdict:
    """What a check found: the user's limits, what they used (for the USD limits: spent
    plus the reservations of their unfinished runs), the soft warnings, and the USD the
    run being admitted reserves (``reservation``; zero for a check)."""

    user_id: int | None
    limits: dict[str, Any] = field(default_factory=dict)
    used: dict[str, Any] = field(default_factory=dict)
    resets_at: dict[str, datetime | None] = field(default_factory=dict)
    warnings: list[SoftLimitReached] = field(default_factory=list)
    reservation: Decimal = Decimal(0)


def enabled() -> bool:
    return settings.LIMITS is not None


def _number(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in MONEY_LIMITS or name == "soft":
        return Decimal(str(value))
    return int(value)


def _clean(values: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in (values or {}).items():
        if name in LIMIT_NAMES or name == "soft":
            out[name] = _number(name, value)
    return out


def limits_for(user, row: dict[str, Any] | None = None) -> dict[str, Any]:
    """The limits that apply to ``user``: the default, the ``LIMITS_FOR`` callable's,
    then the user's Limit row (``row``: its values, already read). ``{}``: no limit."""
    config = settings.LIMITS or {}
    merged = _clean(config.get("default"))
    resolver = settings.LIMITS_FOR
    if resolver:
        if isinstance(resolver, str):
            resolver = import_string(resolver)
        merged.update(_clean(resolver(user)))
    if row:
        if row.get("unlimited"):
            return {}
        merged.update(_clean({k: v for k, v in row.items() if v is not None}))
    return merged


def forget() -> None:
    """Forget the month sums of closed days kept by this process (they are read again at
    the next check): after deleting or editing usage rows of earlier days."""
    _closed_days.clear()


def _forget_on_change(*, setting: str, **kwargs: Any) -> None:
    if setting in ("LLMCHAT", "TIME_ZONE"):
        forget()


setting_changed.connect(_forget_on_change)


def _user(chat):
    if type(chat).user.is_cached(chat):
        return chat.user
    return _LazyUser(chat.user_id)


class _LazyUser:
    """The user a ``LIMITS_FOR`` callable receives: the row is read only if it asks."""

    def __init__(self, pk: int):
        self.pk = self.id = pk
        self._row = None

    def __getattr__(self, name: str) -> Any:
        if self._row is None:
            self._row = get_user_model().objects.get(pk=self.pk)
        return getattr(self._row, name)


def output_reservation(chat) -> int:
    """The output tokens a run of ``chat`` reserves: its ``params["max_tokens"]`` (a
    positive whole number), else ``LLMCHAT["LIMITS"]["reserve_output_tokens"]``
    (:data:`DEFAULT_RESERVE_OUTPUT_TOKENS`)."""
    asked = chat.params.get("max_tokens") if isinstance(chat.params, dict) else None
    if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
        return asked
    return int((settings.LIMITS or {}).get("reserve_output_tokens", DEFAULT_RESERVE_OUTPUT_TOKENS))


def reservation(chat, input_tokens: int) -> Decimal:
    """The USD a run of ``chat`` reserves when it is admitted: ``input_tokens`` (its first
    request's estimate) and :func:`output_reservation` output tokens, priced for the chat's
    model (:func:`django_llmchat.catalog.pricing.price`); zero for a model without a known price."""
    tokens = Tokens(input_tokens=input_tokens, output_tokens=output_reservation(chat))
    cost = price(tokens, chat.model_id, chat.provider).total
    return _money(cost)


def prompt_tokens(text: str, attachments: list[tuple] | None = None) -> int:
    """The estimated tokens of a new prompt (:func:`django_llmchat.runs.estimates.
    estimate_tokens`) with its ``attachments`` (``(name, bytes, type)``)."""
    files = [
        AttachmentData(
            data=data if isinstance(data, bytes) else b"",
            mime_type=(mime[0] if mime else None) or "",
        )
        for _name, data, *mime in attachments or []
    ]
    return estimate_tokens(ProviderMessage(role="user", content=text or "", attachments=files))


def _verdict(chat, *, admission: bool, prompt: int | None = None) -> Verdict | None:
    if not enabled() or chat.user_id is None:
        return None
    found = spend(chat.user_id, runs=admission, chat_id=chat.pk if prompt is not None else None)
    limits = limits_for(_user(chat), found["row"])
    verdict = Verdict(user_id=chat.user_id, limits=limits)
    if not limits:
        return verdict
    if prompt is not None:
        verdict.reservation = reservation(chat, found["last_request"] + prompt)
    windows = found.get("windows") or {}
    resets = {
        "usd_per_day": windows.get("day", (None, None))[1],
        "tokens_per_day": windows.get("day", (None, None))[1],
        "usd_per_month": windows.get("month", (None, None))[1],
    }
    oldest = found.get("oldest_run")
    resets["runs_per_hour"] = oldest + timedelta(hours=1) if oldest is not None else None
    names = LIMIT_NAMES if admission else SPEND_LIMITS
    soft = limits.get("soft")
    for name in names:
        allowed = limits.get(name)
        if allowed is None or name not in found:
            continue
        used, mine = found[name], 0
        if name in MONEY_LIMITS:
            used, mine = used + found["usd_reserved"], verdict.reservation
        verdict.used[name] = used
        verdict.resets_at[name] = resets.get(name)
        if used + mine >= allowed:
            raise BudgetExceededError(
                name,
                used=used,
                allowed=allowed,
                resets_at=resets.get(name),
                message=_MESSAGES[name] if used >= allowed else _MESSAGES_RESERVED[name],
            )
        if soft is not None and name in SPEND_LIMITS and used >= allowed * soft:
            verdict.warnings.append(SoftLimitReached(name, used, allowed, resets.get(name)))
    return verdict


def _send(signal, chat, reached: BudgetExceededError | SoftLimitReached) -> None:
    """Send ``signal`` for ``chat`` with the limit ``reached``: its name, use, allowance
    and reset."""
    signal.send(
        sender=type(chat),
        chat=chat,
        user_id=chat.user_id,
        limit=reached.limit,
        used=reached.used,
        allowed=reached.allowed,
        resets_at=reached.resets_at,
    )


def exceeded(chat, exc: BudgetExceededError) -> None:
    """Send the ``budget_exceeded`` signal for ``exc``."""
    from ..signals import budget_exceeded

    _send(budget_exceeded, chat, exc)


def admit(chat, *, signal: bool = True, prompt: int | None = None) -> Verdict | None:
    """Before a run of ``chat`` is queued: every limit of its user, in one query. Over a
    hard limit: :class:`BudgetExceededError` (and, with ``signal``, the
    ``budget_exceeded`` signal). ``None`` when limits are off or the chat has no user.

    ``prompt`` (the new prompt's estimated tokens, :func:`prompt_tokens`; 0 for a run
    answering the saved history): the run reserves its expected cost
    (``verdict.reservation``: its first request, the chat's last answered request and
    reply plus the prompt, and its output reservation), and is refused when the USD it and
    the user's unfinished runs reserve, with what they spent, reach a USD limit. Without
    it (a run queued again, which keeps its reservation) nothing more is reserved.

    Called alone it only says what admission would decide now; the decision that counts
    is the one :mod:`django_llmchat.runs` makes under the user's lock, in the transaction
    creating the run (it sends the signal once that transaction is rolled back)."""
    try:
        return _verdict(chat, admission=True, prompt=prompt)
    except BudgetExceededError as exc:
        if signal:
            exceeded(chat, exc)
        raise


def check(chat) -> Verdict | None:
    """Before a provider call of ``chat``'s run: the spending limits (USD per day and
    month, tokens per day), in one query. The USD limits count the reservations of the
    user's unfinished runs, the calling run's own (the call's expected cost) included."""
    try:
        return _verdict(chat, admission=False)
    except BudgetExceededError as exc:
        exceeded(chat, exc)
        raise


def warn(chat, warning: SoftLimitReached) -> None:
    """Send the ``budget_warning`` signal for ``warning``."""
    from ..signals import budget_warning

    _send(budget_warning, chat, warning)


def validate_setting(value: Any) -> list[str]:
    """Problems of a ``LLMCHAT["LIMITS"]`` value, as sentences naming the key."""
    problems: list[str] = []
    if value is None:
        return problems
    if not isinstance(value, dict):
        return ['LLMCHAT["LIMITS"] must be a dict such as {"default": {"usd_per_day": "2.00"}}']
    for key in value:
        if key not in ("default", "reserve_output_tokens"):
            problems.append(
                f'LLMCHAT["LIMITS"] has an unknown key {key!r} '
                '(only "default" and "reserve_output_tokens")'
            )
    reserve = value.get("reserve_output_tokens", DEFAULT_RESERVE_OUTPUT_TOKENS)
    if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
        problems.append(
            'LLMCHAT["LIMITS"]["reserve_output_tokens"] must be a whole number of tokens '
            f"from 0, got {reserve!r}"
        )
    default = value.get("default", {})
    if not isinstance(default, dict):
        return [*problems, 'LLMCHAT["LIMITS"]["default"] must be a dict']
    for name, item in default.items():
        where = f'LLMCHAT["LIMITS"]["default"][{name!r}]'
        if name not in (*LIMIT_NAMES, "soft"):
            problems.append(f"{where} is not a limit (known: {', '.join(LIMIT_NAMES)}, soft)")
            continue
        if item is None:
            continue
        try:
            number = _number(name, item)
        except (InvalidOperation, ValueError, TypeError):
            problems.append(f"{where} must be a number, got {item!r}")
            continue
        if isinstance(item, float) and name in MONEY_LIMITS:
            problems.append(f"{where} must be a string or a Decimal (a float loses cents)")
        elif number < 0:
            problems.append(f"{where} must not be negative")
        elif name == "soft" and not (0 < number <= 1):
            problems.append(f"{where} must be a fraction between 0 and 1")
    return problems
