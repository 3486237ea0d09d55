"""The typed state of a run session (:class:`~django_llmchat.loop.session.RunSession`): where
it is in the run's life (:class:`Phase`), how the run ended (:class:`End`) and what that
end decided (:class:`Outcome`: the terminal status, the error, the terminal event).

The session decides its outcome in one place (``RunSession._end``); these types only
name its inputs and its result."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..events import RunFinished

__all__ = ["BLOCKED", "RETRYING", "End", "Outcome", "Phase"]

RETRYING = "retrying"
"""The terminal status of a run a task gives back to the queue (a retryable error)."""
BLOCKED = "blocked"
"""The terminal status of a prompt a before-guardrail blocked (nothing stored)."""


class Phase(enum.Enum):
    """Where a session is in its run's life."""

    NEW = "new"
    """Nothing stored yet."""
    ADMITTED = "admitted"
    """The prompt is stored with its run (or was blocked): the gate has spoken."""
    BEGUN = "begun"
    """The session is being iterated: the run's turn, then its loop."""
    ENDED = "ended"
    """The run's end is decided (:attr:`RunSession.outcome`)."""


class End(enum.Enum):
    """How a session's run ended: what its terminal status is decided from."""

    BLOCKED = "blocked"
    """A before-guardrail blocked the prompt: ``blocked``."""
    LOOP_DONE = "loop_done"
    """The loop ran to its end: the status it stored."""
    LOOP_FAILED = "loop_failed"
    """The loop raised: ``failed``, or ``retrying`` when it gave the run back to the
    queue, or what it stored before."""
    CLOSED = "closed"
    """The consumer left mid-run: what the loop stored, else ``cancelled``."""
    UNSTARTED = "unstarted"
    """Admitted, closed before its iteration began: ``cancelled``."""
    BEFORE_TURN = "before_turn"
    """Another ended the run before its turn came (cancelled while queued, a paused run
    ahead of it): the status it stored."""
    CANNOT_START = "cannot_start"
    """A claimed run that cannot go on here (its agent or tools gone): ``failed``."""
    LOST = "lost"
    """Another process took the run over: it tells the run's end, not this session."""


@dataclass(frozen=True)
class Outcome:
    """What a session's end decided."""

    end: End
    status: str | None
    """The terminal status (``None`` for a lost run: another process tells it)."""
    error: BaseException | None = None
    """The error that ended the run (a failed or retrying run), if any."""
    event: RunFinished | None = None
    """The terminal event, when one was made (yielded, or published after an early
    close)."""
