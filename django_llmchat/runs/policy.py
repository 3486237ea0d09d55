"""Double texting: what a new prompt does while a run of its chat is queued or working.

* ``enqueue`` (the default): the prompt's run is queued behind, answered in order;
* ``reject``: the prompt is refused (:class:`~django_llmchat.errors.DoubleTextingRejected`,
  nothing stored);
* ``interrupt``: the chat's unfinished runs stop (a stop as ``chat.cancel()`` makes it:
  a running one at its next poll, its streamed text stored as its reply), then the new
  run is answered;
* ``rollback``: as ``interrupt``, and the stopped runs' replies and steps are deleted (their
  prompts and usage rows stay).

The rule is applied by the gate (:func:`django_llmchat.runs.enqueue`) under the chat's
lock, in the transaction that admits the run: of racing prompts under ``reject`` exactly
one is admitted. The policy of one admission is the one given to it
(``double_texting=``), else the one of :func:`double_texting` around it, else the chat's
(``Chat.double_texting``), else ``LLMCHAT["DOUBLE_TEXTING"]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ..errors import ArgumentError

ENQUEUE, REJECT, INTERRUPT, ROLLBACK = "enqueue", "reject", "interrupt", "rollback"
POLICIES = (ENQUEUE, REJECT, INTERRUPT, ROLLBACK)

# the stop reasons (``Run.interrupt_reason``) of runs a new prompt stopped
INTERRUPTED_BY_PROMPT = "double_texting"
ROLLED_BACK = "rollback"

_GIVEN: ContextVar[str | None] = ContextVar("llmchat_double_texting", default=None)


def policy_error(value: Any) -> str | None:
    """Why ``value`` is not a double-texting policy (``None``: it is one)."""
    if not isinstance(value, str):
        return f"must be one of {', '.join(POLICIES)}; got {type(value).__name__}"
    if value not in POLICIES:
        return f"must be one of {', '.join(POLICIES)}; got {value!r}"
    return None


def checked(value: Any, field: str = "double_texting") -> str | None:
    """``value`` as a policy (``None``/``""``: not given); :class:`ArgumentError` naming
    ``field`` otherwise."""
    if value is None or value == "":
        return None
    problem = policy_error(value)
    if problem is not None:
        raise ArgumentError(f"{field} {problem}")
    return value


@contextmanager
def double_texting(policy: str | None) -> Iterator[None]:
    """While in this block, prompts admitted in this context follow ``policy`` (``None``:
    the chat's). Used by the REST and ``ui/chat`` views around their admission."""
    token = _GIVEN.set(checked(policy))
    try:
        yield
    finally:
        _GIVEN.reset(token)


def resolve(chat: Any, given: str | None = None) -> str:
    """The policy of one admission to ``chat``."""
    from ..conf import settings

    return (
        checked(given)
        or _GIVEN.get()
        or checked(getattr(chat, "double_texting", "") or None, "Chat.double_texting")
        or settings.DOUBLE_TEXTING
    )


def stop_status(reason: str | None) -> str:
    """The status a run stopped with ``reason`` ends with: ``cancelled`` for a cancel and
    for a stop by a new prompt (its waiting tool calls get error results), else
    ``interrupted`` (``complete()`` resumes it): ``Run.CANCELLED`` and ``Run.INTERRUPTED``,
    named by value (the models import this module)."""
    if reason in ("cancelled", INTERRUPTED_BY_PROMPT, ROLLED_BACK):
        return "cancelled"
    return "interrupted"
