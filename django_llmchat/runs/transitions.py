"""The run's state machine as one table: every change of a run's ``status``, named, with
the statuses it leaves from and the one it goes to.

Both faces of a transition are held against this table (``tests/runs/test_transitions.py``):
the statements of this package (SQLite and any database without the run functions) write
a status only as ``filter(status__in=T.sources).update(status=T.target)`` of a transition
``T`` listed here (or insert a new run with ``T.target``), and each PL/pgSQL function of
``django_llmchat/sql/`` declares in its header the transitions it makes
(``-- transition: claim queued -> running``), which must match this table and the
function's own ``UPDATE``\\ s. ``docs/runs.md`` renders it ("Run states").

``function`` names the PostgreSQL function that makes the transition in one call (empty:
statements on every database); a function may make it from some of its sources only
(``llmchat_run_interrupt_v1`` stops a queued run; one awaiting approval is stopped by the
statements, which answer its waiting calls first).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models.run import AbstractRun as _Run

QUEUED, RUNNING, AWAITING_APPROVAL = _Run.QUEUED, _Run.RUNNING, _Run.AWAITING_APPROVAL
SUCCEEDED, FAILED, CANCELLED, INTERRUPTED = (
    _Run.SUCCEEDED,
    _Run.FAILED,
    _Run.CANCELLED,
    _Run.INTERRUPTED,
)


@dataclass(frozen=True)
class Transition:
    """One change of a run's status: from any of ``sources`` (``()``: a new run, inserted)
    to ``target``."""

    name: str
    sources: tuple[str, ...]
    target: str
    doc: str
    function: str = ""

    def __str__(self) -> str:
        return f"{self.name}: {' | '.join(self.sources) or '(none)'} -> {self.target}"

    @property
    def pairs(self) -> set[tuple[str | None, str]]:
        """Each (from, to) this transition allows (from ``None``: a new run)."""
        return {(source, self.target) for source in self.sources or (None,)}


_ENQUEUE = "llmchat_run_enqueue_v5"
_CLAIM = "llmchat_run_claim_v4"
_END = "llmchat_run_end_v1"
_INTERRUPT = "llmchat_run_interrupt_v1"

ADMIT = Transition("admit", (), QUEUED, "a new run, behind another or for a worker", _ENQUEUE)
START = Transition(
    "start", (), RUNNING, "a new run, nothing ahead: its caller runs it now", _ENQUEUE
)
CLAIM = Transition("claim", (QUEUED,), RUNNING, "the chat's next run taken by a process", _CLAIM)
TAKE_OVER = Transition(
    "take_over", (RUNNING,), RUNNING, "its process died (lease run out): attempt + 1", _CLAIM
)
GIVE_UP = Transition("give_up", (RUNNING,), FAILED, "its process died `RUN_MAX_ATTEMPTS` times")
SUCCEED = Transition(
    "succeed",
    (RUNNING,),
    SUCCEEDED,
    "its final reply stored",
    "llmchat_run_store_last_step_v3, llmchat_run_end_v1",
)
FAIL = Transition("fail", (RUNNING,), FAILED, "it ended on an error", _END)
CANCEL = Transition("cancel", (RUNNING,), CANCELLED, "it stopped on a cancel", _END)
INTERRUPT = Transition("interrupt", (RUNNING,), INTERRUPTED, "it stopped on an interrupt", _END)
PAUSE = Transition("pause", (RUNNING,), AWAITING_APPROVAL, "a tool call waits for a decision", _END)
REQUEUE = Transition("requeue", (RUNNING,), QUEUED, "a retry later (a provider error)", _END)
RESUME = Transition("resume", (AWAITING_APPROVAL,), QUEUED, "the last decision it waited for")
WITHDRAW = Transition("withdraw", (QUEUED,), CANCELLED, "its waiting caller gave up on it")
STOP_CANCELLED = Transition(
    "stop_cancelled",
    (QUEUED, AWAITING_APPROVAL),
    CANCELLED,
    "a cancel (or a new prompt) while it was not running",
    _INTERRUPT,
)
STOP_INTERRUPTED = Transition(
    "stop_interrupted",
    (QUEUED, AWAITING_APPROVAL),
    INTERRUPTED,
    "an interrupt while it was not running",
    _INTERRUPT,
)

TABLE: tuple[Transition, ...] = (
    ADMIT,
    START,
    CLAIM,
    TAKE_OVER,
    GIVE_UP,
    SUCCEED,
    FAIL,
    CANCEL,
    INTERRUPT,
    PAUSE,
    REQUEUE,
    RESUME,
    WITHDRAW,
    STOP_CANCELLED,
    STOP_INTERRUPTED,
)
BY_NAME = {t.name: t for t in TABLE}

# how a running run's process ends it (Execution.finish, pause, requeue), by status
ENDINGS = {t.target: t for t in (SUCCEED, FAIL, CANCEL, INTERRUPT, PAUSE, REQUEUE)}
# how a run not running is stopped (runs.interrupt), by the status it ends with
STOPS = {t.target: t for t in (STOP_CANCELLED, STOP_INTERRUPTED)}


def markdown() -> str:
    """The table as Markdown (what ``docs/runs.md`` shows; a test compares them)."""
    lines = ["| transition | from | to | when | on PostgreSQL |", "|---|---|---|---|---|"]
    for t in TABLE:
        sources = ", ".join(f"`{s}`" for s in t.sources) or "(new run)"
        function = ", ".join(f"`{f}`" for f in t.function.split(", ") if f) or "statements"
        lines.append(f"| `{t.name}` | {sources} | `{t.target}` | {t.doc} | {function} |")
    return "\n".join(lines)
