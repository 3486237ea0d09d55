"""Taking a chat's next run (:func:`claim`), waiting for a run's turn, and recovering
runs nobody works on.

The next run is the chat's oldest unfinished one. A queued run is started; a running run
whose lease ran out (its process died) is taken over and resumed from its last stored
step, the attempts its process left pending marked ``lost``; a run taken on
``RUN_MAX_ATTEMPTS`` times ends failed instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import router, transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from .. import signals
from ..conf import settings
from ..db.prepared import INT_ARG, PreparedInsert, PreparedQuery, mark_saved
from ..errors import ChatBusyError, RunLostError
from ..models import Message, Run, Usage
from ..models.message import QUEUED_POSITION
from ..tools import ToolResult
from . import base, pg
from .base import (
    _CHAT_RUNNING,
    _HEAD_FIELDS,
    BUSY,
    NOTHING,
    PAUSED,
    _head,
    _lease_seconds,
    _lease_until,
    _lock,
    _mark_lost,
    _move_prompt_into_place,
    _release,
    _send,
    logger,
    worker_name,
)
from .decisions import answer_calls, cancel_queued
from .execution import Execution
from .transitions import CLAIM, GIVE_UP, TAKE_OVER

_INSERT_USAGE = PreparedInsert(Usage)
# the path as a claim finds it: its message count, its highest id
_PATH = PreparedQuery(
    lambda chat_id: (
        Message.objects.filter(chat_id=chat_id, on_path=True, position__lt=QUEUED_POSITION)
        .values("chat_id")
        .annotate(count=Count("id"), top=Max("id"))
        .values_list("count", "top")
    ),
    (INT_ARG,),
)

WAIT_POLL_SECONDS = 0.05
WORKER_LOST_RESULT = ToolResult.error(
    "interrupted",
    "The process running this call stopped before its result was stored; it was not run "
    "again (it may or may not have taken effect).",
)


@dataclass
class Claim:
    """What :func:`claim` found: an :class:`Execution` to work on, or why there is none
    (``NOTHING`` to do, another process is ``BUSY`` with the chat, its run is ``PAUSED``
    for a decision). ``retry_in``: seconds until a busy holder's lease runs out."""

    execution: Execution | None = None
    state: str = ""
    retry_in: float | None = None


def claim(
    chat_id: int,
    *,
    run_id: int | None = None,
    task_id: str = "",
    waiting: bool = False,
    worker: str | None = None,
    attempt: Usage | None = None,
    seen: tuple[int | None, int, int | None] | None = None,
) -> Claim:
    """Take the chat's next run, if it is this caller's to take.

    The next run is the oldest unfinished one. A queued run is started; a running run
    whose lease ran out (its process died) is taken over and resumed from its last stored
    step. ``run_id``: the run the caller is for; when another run is ahead of it, a task
    (``waiting=False``) answers that one first (in order), a caller waiting for its own
    turn (``waiting=True``) renews its run's lease and gets ``BUSY``. A run taken on
    ``RUN_MAX_ATTEMPTS`` times ends failed instead.

    ``attempt``: the first attempt of the run the caller expects to start, its pending usage
    row (unsaved), built from the chat's path as the caller read it before the claim,
    ``seen`` = ``(its last message's id, its message count, its highest message id)``. It is
    written in the claim's own transaction when the claim starts a queued run whose prompt
    is that last message and the path is still the one read (its ``pk`` is set then);
    otherwise nothing of it is written and the caller reads the path again."""
    worker = worker or worker_name()
    attempt = _made_ready_on(attempt, seen)
    # the PostgreSQL face: tests/runs/test_pg.py and the suite on PostgreSQL test it, not
    # the mutation campaign (on SQLite)
    using = router.db_for_write(Run)  # pragma: no mutate
    if pg.available(using):  # pragma: no mutate block
        found = _claim_call(chat_id, run_id, task_id, waiting, worker, using, attempt, seen)
        if found is not None:
            return found
    while True:  # each pass fails one run that cannot be resumed, or returns
        with transaction.atomic():
            if not _lock(chat_id):
                return Claim(state=NOTHING)
            head = _head(chat_id)
            if head is None:
                return Claim(state=NOTHING)
            now = timezone.now()
            if run_id is not None and head.pk != run_id:
                if not waiting:
                    run_id = None  # a task answers what is ahead of its run first, in order
                else:
                    return _wait_behind(head, run_id, worker, now)
            if head.status == Run.AWAITING_APPROVAL:
                return Claim(state=PAUSED)
            lease_live = head.lease_expires_at is not None and head.lease_expires_at > now
            if head.status == Run.RUNNING and lease_live:
                return _busy_or_paused(head, now)
            if head.status == Run.QUEUED and lease_live and head.pk != run_id:
                return _busy_or_paused(head, now)  # its caller waits for it in-process
            if head.status == Run.RUNNING and head.attempt >= int(settings.RUN_MAX_ATTEMPTS):
                _give_up(head, now)
                continue
            step = TAKE_OVER if head.status == Run.RUNNING else CLAIM
            updates = _take_updates(head, worker, task_id, now)
            taken = Run.objects.filter(
                pk=head.pk, status__in=step.sources, attempt=head.attempt
            ).update(status=step.target, **updates)
            if not taken:  # cannot happen under the chat's lock; look again
                continue
            if head.status == Run.RUNNING:
                _mark_lost(head.pk)
                signals.send_after_commit(
                    signals.run_recovered,
                    run_id=head.pk,
                    chat_id=chat_id,
                    attempt=head.attempt + 1,
                    previous_worker=head.worker,
                )
                logger.warning(
                    "run %s of chat %s: its worker %r stopped renewing the lease; resuming "
                    "it from its last stored step (attempt %d)",
                    head.pk,
                    chat_id,
                    head.worker,
                    head.attempt + 1,
                )
            else:
                _move_prompt_into_place(chat_id, head.prompt_id)
                _open_first_attempt(chat_id, head, attempt, seen)
            _CHAT_RUNNING.run(chat_id, active_run=head.pk)
            taken_over = head.status == Run.RUNNING
            head.status = step.target
            for name, value in updates.items():
                setattr(head, name, value)
            execution = Execution(head, worker=worker)
            execution.taken_over = taken_over
            return Claim(execution=execution)


def _made_ready_on(attempt: Usage | None, seen: tuple | None) -> Usage | None:
    """``attempt`` when the path it was made ready on (``seen``) ends with its highest
    message (a prompt a run could answer), else ``None``."""
    if attempt is None or seen is None or seen[0] is None or seen[0] != seen[2]:
        return None
    return attempt


def _open_first_attempt(chat_id: int, run: Run, attempt: Usage | None, seen) -> None:
    """The started run's first attempt, its pending usage row, written in the claim's
    transaction when the path read before the claim ends with the run's prompt and is
    still that path (``seen``: its last message, its message count and highest id);
    otherwise nothing is written and the caller reads the path again."""
    if attempt is None:
        return
    _, count, top = seen
    if run.prompt_id is None or run.prompt_id != top:
        return
    found = _PATH.values(chat_id)
    if not found or tuple(found[0]) != (count, top):
        return
    attempt.run_id = run.pk
    _INSERT_USAGE.save(attempt)


def _wait_behind(head: Run, run_id: int, worker: str, now) -> Claim:
    """What a caller waiting for its own run behind ``head`` gets: nothing when its run
    ended, else its run's lease renewed (and the head's task sent again when the head
    lost its process) and ``BUSY``, or ``PAUSED`` behind a run awaiting approval."""
    mine = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if mine is None or mine in Run.FINISHED:
        return Claim(state=NOTHING)
    Run.objects.filter(pk=run_id, status=Run.QUEUED).update(
        lease_expires_at=_lease_until(), worker=worker
    )
    if head.status == Run.RUNNING and not (
        head.lease_expires_at is not None and head.lease_expires_at > now
    ):
        _resume_soon(head)  # the run ahead lost its process: send its task
    return Claim(state=PAUSED if head.status == Run.AWAITING_APPROVAL else BUSY)


def _take_updates(head: Run, worker: str, task_id: str, now) -> dict[str, Any]:
    """Which fields taking ``head`` writes: its next attempt and lease, its stop request
    (cleared on a queued run), its start (the first time) and its task."""
    updates: dict[str, Any] = {
        "attempt": head.attempt + 1,
        "worker": worker,
        "lease_expires_at": _lease_until(),
        "cancel_requested": False if head.status == Run.QUEUED else head.cancel_requested,
    }
    if head.started_at is None:
        updates["started_at"] = now
    if task_id:
        updates["task_id"] = task_id[:255]
    return updates


def _claim_call(
    chat_id, run_id, task_id, waiting, worker, using, attempt=None, seen=None
) -> Claim | None:  # pragma: no mutate block
    """:func:`claim` as one call of ``llmchat_run_claim_v4`` (:mod:`.pg`); ``None`` when
    the function left the case to the statements (a caller waiting behind another run, a
    run to give up), having written nothing."""
    now = timezone.now()
    if attempt is not None and not pg.available(using, Usage):
        attempt = None  # a receiver of Usage's save signals: the caller opens it
    _, count, top = seen if attempt is not None else (None, None, None)
    outcome, taken_over, previous_worker, *values = pg.call(
        using,
        "llmchat_run_claim_v4",
        (chat_id, "bigint"),
        (run_id, "bigint"),
        (waiting, "boolean"),
        (worker, "text"),
        (task_id[:255], "text"),
        (now, "timestamptz"),
        (_lease_until(), "timestamptz"),
        (int(settings.RUN_MAX_ATTEMPTS), "integer"),
        (base.clock_position(), "bigint"),
        (QUEUED_POSITION, "bigint"),
        (None if attempt is None else _INSERT_USAGE.row(attempt, using), "jsonb"),
        (count, "bigint"),
        (top, "bigint"),
    )
    *values, attempt_id = values
    if outcome == "statements":
        return None
    if outcome == NOTHING:
        return Claim(state=NOTHING)
    if outcome == PAUSED:
        return Claim(state=PAUSED)
    row = dict(zip(_HEAD_FIELDS, values, strict=True))
    if outcome == BUSY:
        return _busy_or_paused(
            Run(status=row["status"], lease_expires_at=row["lease_expires_at"]), now
        )
    run = Run(**row)
    mark_saved(run, using)
    if attempt_id is not None:
        attempt.pk, attempt.run_id = attempt_id, run.pk
        mark_saved(attempt, using)
    if taken_over:
        signals.send_after_commit(
            signals.run_recovered,
            run_id=run.pk,
            chat_id=chat_id,
            attempt=run.attempt,
            previous_worker=previous_worker,
        )
        logger.warning(
            "run %s of chat %s: its worker %r stopped renewing the lease; resuming "
            "it from its last stored step (attempt %d)",
            run.pk,
            chat_id,
            previous_worker,
            run.attempt,
        )
    execution = Execution(run, worker=worker)
    execution.taken_over = bool(taken_over)
    return Claim(execution=execution)


_resumes_sent: dict[int, float] = {}


def _resume_soon(run: Run) -> None:
    """Send the task of a run whose process died (at most once a lease period a run)."""
    now = time.monotonic()
    if now - _resumes_sent.get(run.pk, -1e9) < _lease_seconds():
        return
    if len(_resumes_sent) > 10_000:
        _resumes_sent.clear()
    _resumes_sent[run.pk] = now
    transaction.on_commit(lambda: _send(run))


def _busy_or_paused(head: Run, now) -> Claim:
    # only for a head whose lease is live (a head awaiting approval is PAUSED before)
    return Claim(state=BUSY, retry_in=max(0.0, (head.lease_expires_at - now).total_seconds()))


def _give_up(run: Run, now) -> None:
    attempts = run.attempt
    error = (
        f"The run stopped {attempts} times before it could finish (its worker was lost each "
        "time); it was not tried again."
    )
    _mark_lost(run.pk)
    # the calls its workers left may have run: answered, never run by a later run
    answer_calls(run.chat_id, run, WORKER_LOST_RESULT)
    base.tell_followers(run.chat_id, run.pk, Run.FAILED, "worker_lost")
    signals.send_after_commit(
        signals.run_failed,
        run_id=run.pk,
        chat_id=run.chat_id,
        error_type="worker_lost",
        error=error,
    )
    Run.objects.filter(pk=run.pk, status__in=GIVE_UP.sources, attempt=run.attempt).update(
        status=GIVE_UP.target,
        error_type="worker_lost",
        error=error,
        finished_at=now,
        lease_expires_at=None,
    )
    _move_prompt_into_place(run.chat_id, run.prompt_id)
    _release(run.chat_id, run.pk)
    logger.error(
        "run %s of chat %s failed: lost its worker %d times", run.pk, run.chat_id, attempts
    )


def wait_for_turn(run: Run, *, poll: float = WAIT_POLL_SECONDS) -> Execution:
    """Block until ``run`` (enqueued with ``wait=True``) is claimed by this caller; raises
    :class:`ChatBusyError` when a run ahead of it waits for a tool-call decision (``run``
    is then cancelled) and :class:`RunLostError` when it was finished meanwhile."""
    worker = run.worker or worker_name()
    while True:
        found = claim(run.chat_id, run_id=run.pk, waiting=True, worker=worker)
        if found.execution is not None:  # claim(run_id=..., waiting=True) takes only ``run``
            return found.execution
        if found.state == NOTHING:
            raise RunLostError(f"run {run.pk} was finished before its turn came")
        if found.state == PAUSED:
            cancel_queued(run.chat_id, run.pk, error_type="chat_busy")
            raise ChatBusyError(
                f"chat {run.chat_id} is waiting for a decision on its tool calls: approve or "
                "deny them (or cancel the run) first"
            )
        time.sleep(poll)


# -- recovery ---------------------------------------------------------------------------------
def stale_runs(now=None) -> list[Run]:
    """Runs nobody works on although they should be: running or waited for with a lease
    that ran out (the process died), or queued longer than
    ``LLMCHAT["RECOVER_QUEUED_AFTER"]`` seconds with no run of the chat working (its task
    was lost). The oldest unfinished run of each such chat, one per chat."""
    now = now or timezone.now()
    queued_before = now - timedelta(seconds=float(settings.RECOVER_QUEUED_AFTER))
    candidates = Run.objects.filter(
        Q(status__in=(Run.RUNNING, Run.QUEUED), lease_expires_at__lt=now)
        | Q(
            status=Run.QUEUED,
            lease_expires_at__isnull=True,
            created_at__lt=queued_before,
            chat__active_run__isnull=True,
        )
    ).order_by("id")
    heads: dict[int, Run] = {}
    for run in candidates:
        if run.chat_id in heads:
            continue
        head = _head(run.chat_id)
        if head is not None and head.pk == run.pk:
            heads[run.chat_id] = run
    return list(heads.values())


def recover(dispatch=None) -> list[Run]:
    """Send a task for every stale run (:func:`stale_runs`); ``dispatch(chat_id, run_id)``
    replaces sending (``manage.py llmchat_recover --inline`` runs them in-process).
    Returns the runs found."""
    found = stale_runs()
    for run in found:
        logger.info("recovering run %s of chat %s (%s)", run.pk, run.chat_id, run.status)
        (dispatch or base.send)(run.chat_id, run.pk)
    return found
