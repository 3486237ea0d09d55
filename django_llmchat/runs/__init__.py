"""The life of a run, and the one package that writes it.

A :class:`~django_llmchat.models.Run` answers one prompt (or continues the saved history)::

    queued ──claim──> running ──> succeeded | failed | cancelled | interrupted
                         │  └──> awaiting_approval ──decision──> queued
                         └──> queued (a retry later; a worker died: taken over)

Every transition is one transaction that first takes the chat's row lock (an ``UPDATE`` of
the chat row: a row lock on PostgreSQL, the write lock on SQLite), then changes run rows
with conditional ``UPDATE``\\ s (compare-and-set on ``status`` and ``attempt``) and keeps the
chat's cached ``status`` and ``active_run``. So transitions of one chat happen one at a
time, and of two processes racing for one transition exactly one wins.

By concern:

* :mod:`.admission`: the gate; every run is created by :func:`enqueue` (a prompt, a
  continuation, a regenerate), admitted under the chat's and the user's lock against every
  spending limit in the transaction that writes it.
* :mod:`.claims`: :func:`claim` takes the chat's next run (a queued one, or one whose
  process died), :func:`wait_for_turn`, and the recovery of runs nobody works on
  (:func:`stale_runs`, :func:`recover`).
* :mod:`.execution`: :class:`Execution`, a claimed run worked on, every write fenced by its
  attempt number, and the thread renewing its lease.
* :mod:`.decisions`: :func:`interrupt`, :func:`cancel_queued` and :func:`decide` (a
  tool-call decision; the last one queues the run again through the gate).
* :mod:`.policy`: double texting, what a new prompt does while a run of the chat is
  unfinished (``enqueue``, ``reject``, ``interrupt``, ``rollback``), applied by the gate.
* :mod:`.base`: what they share (the chat's lock, its next run, its cached status, the
  place of a queued prompt, telling followers, sending a run's task).

Prompts asked while a run works are queued runs, answered in order (oldest first); their
messages read after everything else until their own run starts.

Every provider attempt has a Usage row written before the call (``pending``, with its
estimated input tokens and cost); a run taken over from a process that died marks the
attempts that process left ``lost``, so what it spent stays counted.
"""

from __future__ import annotations

from ..errors import RunInProgress
from ..models import Run
from . import admission as _admission
from .admission import (
    NothingToRegenerate,
    _admit,
    _drop_last_reply,
    _enqueue,
    _lock_user,
    enqueue,
    keyed,
    on_admit,
    opens_attempt,
    switch_to,
)
from .base import (
    BUSY,
    COMPLETE_CHAT,
    NOTHING,
    PAUSED,
    _aware,
    _head,
    _lease_seconds,
    _lease_until,
    _lock,
    _move_prompt_into_place,
    _sync_chat,
    hold_if_idle,
    logger,
    send,
    tell_followers,
    worker_name,
)
from .claims import (
    WAIT_POLL_SECONDS,
    Claim,
    _busy_or_paused,
    _give_up,
    _resume_soon,
    claim,
    recover,
    stale_runs,
    wait_for_turn,
)
from .decisions import (
    AlreadyDecided,
    _decide,
    cancel_queued,
    decide,
    interrupt,
    stop_for_prompt,
)
from .execution import (
    CANCEL_POLL_SECONDS,
    CancelRequested,
    Execution,
    _fenced,
    _Keeper,
    _keeper,
    _private_database,
    _tick,
)
from .policy import POLICIES, double_texting, stop_status

__all__ = [
    "BUSY",
    "POLICIES",
    "NOTHING",
    "PAUSED",
    "AlreadyDecided",
    "NothingToRegenerate",
    "RunInProgress",
    "CancelRequested",
    "Claim",
    "Execution",
    "cancel_queued",
    "claim",
    "decide",
    "double_texting",
    "enqueue",
    "hold_if_idle",
    "interrupt",
    "keyed",
    "on_admit",
    "opens_attempt",
    "recover",
    "send",
    "stale_runs",
    "stop_for_prompt",
    "stop_status",
    "switch_to",
    "wait_for_turn",
    "worker_name",
]

# read by callers and tests through this package; each is owned (and patched) by its module
_PRIVATE = (
    Run,
    COMPLETE_CHAT,
    WAIT_POLL_SECONDS,
    CANCEL_POLL_SECONDS,
    logger,
    _admit,
    _aware,
    _busy_or_paused,
    _decide,
    _drop_last_reply,
    _enqueue,
    _fenced,
    _give_up,
    _head,
    _Keeper,
    _keeper,
    _lease_seconds,
    _lease_until,
    _lock,
    _lock_user,
    _move_prompt_into_place,
    _private_database,
    _resume_soon,
    _sync_chat,
    tell_followers,
    _tick,
)

# the gate stops the unfinished runs of a double-texted chat through decisions (which reads
# the gate: admission cannot import it without a circle)
_admission.stop_unfinished = stop_for_prompt
