"""The run being worked on: an :class:`Execution` is this process's claim on one run.

Its attempt number fences every write, so a process that lost the run (its lease ran out
and another process took it over) can store nothing more: no second reply, ever. While
it works, a thread of the process (:class:`_Keeper`) renews the lease every third of
``LLMCHAT["RUN_LEASE"]`` seconds.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from django.db import connections, router, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone

from ..db import dbconn
from ..db._per_process import PerProcess
from ..db.prepared import (
    INT_ARG,
    PreparedInsert,
    PreparedQuery,
    PreparedUpdate,
    mark_saved,
    row_values,
)
from ..errors import ArgumentError, RunLostError
from ..models import Message, Run, Usage, branches
from ..models.message import QUEUED_POSITION
from . import base, pg
from .base import (
    _lease_seconds,
    _lease_until,
    _lock,
    _locks_rows,
    _move_prompt_into_place,
    _release,
    _release_at_last_step,
    _send,
    _waits_for_a_worker,
    logger,
)
from .policy import ROLLED_BACK
from .transitions import ENDINGS, SUCCEED

CANCEL_POLL_SECONDS = 0.25

# the rows a function stores, prepared as their INSERT would prepare them
_INSERT_MESSAGE = PreparedInsert(Message)
_INSERT_USAGE = PreparedInsert(Usage)

# the attempt is a positive 32-bit column: its stand-in must be in range
_FENCED = (INT_ARG, 2_147_483_000)


def _fenced(pk: int, attempt: int):
    return Run._base_manager.filter(pk=pk, attempt=attempt, status__in=SUCCEED.sources)


# the last step stored and the run ended: the transition ``succeed``
_LAST_STEP = PreparedUpdate(
    Run,
    where=_fenced,
    placeholders=_FENCED,
    steps=F("steps") + 1,
    status=SUCCEED.target,
    finished_at=Now(),
    lease_expires_at=None,
)
_POLL = PreparedQuery(
    lambda run_id: Run.objects.filter(pk=run_id).values_list(
        "status", "attempt", "cancel_requested", "interrupt_reason"
    )
)


class CancelRequested(Exception):
    """``chat.interrupt()``/``cancel()`` asked the run to stop (raised by ``poll``)."""

    def __init__(self, reason: str | None):
        self.reason = reason
        super().__init__(reason)


# -- the run being worked on ----------------------------------------------------------------
class Execution:
    """This process's claim on one run: every write of the run goes through it, fenced by
    the attempt number, and its lease is renewed while it lives."""

    def __init__(self, run: Run, *, worker: str):
        self.run = run
        self.pk: int = run.pk
        self.chat_id: int = run.chat_id
        self.attempt: int = run.attempt
        self.worker = worker
        self.lost = False
        # taken over from a process whose lease ran out (it died working on the run)
        self.taken_over = False
        self.outcome: str | None = None  # the status this process wrote last
        self.titled = False  # the last step's call wrote the chat's title (store_last_step)
        # when it ends, send the task of the run queued next (a task draining the queue
        # itself turns it off)
        self.kick_next = True
        # just claimed: the first read of the run is a poll interval away (saves a round
        # trip before the first token; a stop asked for meanwhile is seen at that poll)
        self._last_poll = time.monotonic()
        _keep_alive(self)

    def __repr__(self) -> str:
        return f"<Execution run={self.pk} attempt={self.attempt}>"

    @property
    def done(self) -> bool:
        return self.outcome is not None or self.lost

    def _fenced(self):
        return Run.objects.filter(pk=self.pk, attempt=self.attempt, status=Run.RUNNING)

    def _lost(self) -> RunLostError:
        self.lost = True
        _keeper().discard(self)
        return RunLostError(
            f"run {self.pk} is no longer this process's (attempt {self.attempt}): another "
            "process took it over or it was finished"
        )

    # -- while working
    def poll(self, force: bool = False) -> bool:
        """Raise :class:`CancelRequested` when a stop was asked for and
        :class:`RunLostError` when the run is no longer this process's; reads the run at
        most every ``CANCEL_POLL_SECONDS`` unless ``force``. Returns whether it read."""
        if self.lost:
            raise self._lost()
        now = time.monotonic()
        if not force and now - self._last_poll < CANCEL_POLL_SECONDS:
            return False
        self._last_poll = now
        rows = _POLL.rows(self.pk)
        if not rows:
            raise self._lost()
        status, attempt, cancel, reason = rows[0]
        if status != Run.RUNNING or attempt != self.attempt:
            raise self._lost()
        if cancel:
            raise CancelRequested(reason or None)
        return True

    def renew(self) -> bool:
        """Extend the lease; ``False`` (and the execution marked lost) when the run is no
        longer this process's."""
        if self.done:
            return False
        if not self._fenced().update(lease_expires_at=_lease_until()):
            self.lost = True
            return False
        return True

    def step_stored(
        self, *, final_status: str | None = None, title: tuple[str, str] | None = None
    ) -> None:
        """In the transaction storing a step: count it and renew the lease, or raise
        :class:`RunLostError` (rolling the step back) when the run is not ours any more.
        ``final_status``: ``succeeded``, the run ends with this step (the caller took the
        chat's lock first, with :meth:`lock_chat`). ``title``: ``(title, source)``, with
        the last step, the chat's automatic title, written in the chat's update at the
        run's end when the chat is still untitled (:attr:`titled` says whether it was)."""
        if final_status not in (None, SUCCEED.target):
            raise ArgumentError(
                f"a run ends with its last step {SUCCEED.target}, not {final_status!r}"
            )
        if title is not None and final_status is None:
            raise ArgumentError("a chat's title goes with the run's last step (final_status)")
        if final_status is None:
            changed = self._fenced().update(steps=F("steps") + 1, lease_expires_at=_lease_until())
        else:
            changed = _LAST_STEP.run(self.pk, self.attempt)
            self.run.finished_at = timezone.now()
        if not changed:
            raise self._lost()
        self.run.steps += 1
        if final_status is not None:
            # no lock statement before the step where the database locks itself: the
            # run's end writes the chat's updated_at (as the lock does elsewhere)
            touch = not _locks_rows(router.db_for_write(Run))
            head, self.titled = _release_at_last_step(
                self.chat_id, self.pk, touch=touch, title=title
            )
            self._ended(final_status, head)

    def store_last_step(
        self, message: Message, usages: list[Usage], title: tuple[str, str] | None = None
    ) -> bool:  # pragma: no mutate block
        """Store the run's last provider response and end the run ``succeeded``, in one
        call of ``llmchat_run_store_last_step_v3`` (:mod:`.pg`): ``message`` (the reply,
        unsaved) and ``usages`` (its attempts: a row closing a pending one is written
        over it, others inserted) linked to it. ``False`` where that function is not
        available, or when a row closing a pending one is ``estimated`` (the function
        writes a closed row as the vendor's counts: the caller stores the step with
        :meth:`step_stored`); raises :class:`RunLostError` (nothing stored) when the run is
        not ours any more. ``title``: ``(title, source)``, the chat's automatic title written
        in the same call when the chat is still untitled (:attr:`titled` says whether it
        was)."""
        using = router.db_for_write(Run)
        if not pg.available(using, Message, Usage):
            return False
        if any(row.estimated for row in usages if getattr(row, "closes_pending", False)):
            return False
        items = ",".join(
            '{"closes":true,"row":' + json.dumps(row_values(row)) + "}"
            if getattr(row, "closes_pending", False)
            else '{"closes":false,"row":' + _INSERT_USAGE.row(row, using) + "}"
            for row in usages
        )
        title_text, title_source = title if title is not None else (None, None)
        outcome, message_id, usage_ids, next_run, next_status, next_lease, titled = pg.call(
            using,
            "llmchat_run_store_last_step_v3",
            (self.pk, "bigint"),
            (self.attempt, "integer"),
            (self.chat_id, "bigint"),
            (_INSERT_MESSAGE.row(message, using), "jsonb"),
            ("[" + items + "]", "jsonb"),
            (title_text, "text"),
            (title_source, "text"),
        )
        if outcome == "lost":
            raise self._lost()
        self.titled = bool(titled)
        message.pk = message_id
        mark_saved(message, using)
        for row, pk in zip(usages, usage_ids, strict=True):
            row.pk, row.message = pk, message
            if getattr(row, "closes_pending", False):
                row.estimated = False
            mark_saved(row, using)
        self.run.steps += 1
        self.run.finished_at = timezone.now()
        self._ended(Run.SUCCEEDED, _next_run(self.chat_id, next_run, next_status, next_lease))
        return True

    def fence(self) -> None:
        """In a transaction storing tool results: raise :class:`RunLostError` when the run
        is not ours any more."""
        if not self._fenced().update(lease_expires_at=_lease_until()):
            raise self._lost()

    def lock_chat(self) -> None:
        """First in the transaction storing the run's last step, whose first write after
        it is the reply: the chat's row lock (SQLite: none, that write locks the
        database; the run's end touches the chat)."""
        if _locks_rows(router.db_for_write(Run)):
            _lock(self.chat_id)

    # -- ending
    def finish(
        self,
        status: str,
        *,
        error_type: str = "",
        error: str = "",
        interrupt_reason: str = "",
    ) -> bool:
        """End the run with a finished ``status``; ``False`` when it was not ours any
        more. ``interrupt_reason="rollback"`` (a stop asked for by a new prompt under the
        ``rollback`` policy): what the run stored is deleted as it ends
        (:func:`django_llmchat.models.branches.roll_back`)."""
        if status not in Run.FINISHED:
            raise ArgumentError(f"{status!r} is not a finished run status")
        return self._transition(
            status,
            error_type=error_type[:64],
            error=error[:4000],
            interrupt_reason=(interrupt_reason or "")[:255],
            finished_at=timezone.now(),
        )

    def pause(self) -> bool:
        """The run waits for tool-call decisions; ``decide`` queues it again."""
        return self._transition(Run.AWAITING_APPROVAL)

    def requeue(self, error_type: str = "", error: str = "") -> bool:
        """Give the run back to the queue (a retry later): any process may take it."""
        return self._transition(Run.QUEUED, error_type=error_type[:64], error=error[:4000])

    def _transition(self, status: str, **updates: Any) -> bool:
        if self.done:
            return False
        # stopped by a new prompt under the rollback policy: what the run stored goes
        # with its end, in its transaction (the statements)
        rolled_back = status in Run.FINISHED and updates.get("interrupt_reason") == ROLLED_BACK
        using = router.db_for_write(Run)  # pragma: no mutate
        if pg.available(using) and not rolled_back:  # pragma: no mutate block
            changed, head = self._end_call(status, updates, using)
        else:
            with transaction.atomic():
                _lock(self.chat_id)
                step = ENDINGS[status]
                changed = Run.objects.filter(
                    pk=self.pk, attempt=self.attempt, status__in=step.sources
                ).update(status=step.target, lease_expires_at=None, **updates)
                if changed:
                    if rolled_back:
                        branches.roll_back(self.chat_id, self.pk, self.run.prompt_id)
                    if status in Run.FINISHED and self.run.prompt_id is not None:
                        _move_prompt_into_place(self.chat_id, self.run.prompt_id)
                    head = _release(self.chat_id, self.pk)
        if not changed:
            self._lost()
            return False
        self._ended(status, head)
        for name, value in updates.items():
            setattr(self.run, name, value)
        return True

    def _end_call(
        self, status: str, updates: dict, using: str
    ) -> tuple[bool, Run | None]:  # pragma: no mutate block
        """:meth:`_transition` as one call of ``llmchat_run_end_v1`` (:mod:`.pg`): whether
        the run was still ours, and the chat's next run."""
        outcome, next_run, next_status, next_lease = pg.call(
            using,
            "llmchat_run_end_v1",
            (self.pk, "bigint"),
            (self.attempt, "integer"),
            (self.chat_id, "bigint"),
            (status, "text"),
            (updates.get("error_type"), "text"),
            (updates.get("error"), "text"),
            (updates.get("interrupt_reason"), "text"),
            (updates.get("finished_at"), "timestamptz"),
            (base.clock_position(), "bigint"),
            (QUEUED_POSITION, "bigint"),
        )
        return outcome == "ended", _next_run(self.chat_id, next_run, next_status, next_lease)

    def _ended(self, status: str, head: Run | None) -> None:
        self.outcome = status
        self.run.status = status
        self.run.lease_expires_at = None
        _keeper().discard(self)
        if self.kick_next and status != Run.QUEUED and _waits_for_a_worker(head):
            transaction.on_commit(lambda: _send(head))


def _next_run(
    chat_id: int, pk: int | None, status: str | None, lease
) -> Run | None:  # pragma: no mutate block
    """The chat's next run as a function returned it (what sending its task reads)."""
    if pk is None:
        return None
    return Run(pk=pk, chat_id=chat_id, status=status, lease_expires_at=lease)


# -- lease renewal ----------------------------------------------------------------------------
class _Keeper:
    """One thread per process renewing the leases of the runs it works on.

    The thread outlives its last run by up to two ticks (a third of the lease each): runs
    that follow one another, as a chat's do, share it instead of each starting a thread.
    It holds a database connection only while it has renewed something: when its last
    run ends it closes the connection, and with nothing to renew for a whole tick, ends.
    A pooled connection (:mod:`django_llmchat.db.dbconn`) goes back to the pool after each
    tick's renewals, so the keeper holds none of the pool's connections between ticks."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.live: set[Execution] = set()
        self.mutex = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.tick = 0.0
        self.connected = False  # the thread opened a connection it has not closed yet

    def add(self, execution: Execution) -> None:
        if _private_database():
            return  # no other process can see the database: nothing to prove alive
        tick = _tick()
        with self.mutex:
            self.live.add(execution)
            if self.thread is None or not self.thread.is_alive():
                self.tick = tick
                self.thread = threading.Thread(target=self._run, name="llmchat-leases", daemon=True)
                self.thread.start()
            elif tick < self.tick:
                self.wake.set()  # a tick now: the new run's lease period is shorter

    def discard(self, execution: Execution) -> None:
        with self.mutex:
            self.live.discard(execution)
            if not self.live and self.connected:
                self.wake.set()  # nothing left: the thread closes its connection now

    def _run(self) -> None:
        idle = False
        try:
            while True:
                self.wake.wait(self.tick)
                self.wake.clear()
                with self.mutex:
                    self.tick = _tick()
                    live = list(self.live)
                    if not live and idle:
                        self.thread = None
                        return
                    idle = not live
                    close = idle and self.connected
                    if close:
                        self.connected = False
                if close:
                    connections.close_all()
                for execution in live:
                    with self.mutex:
                        self.connected = True
                    try:
                        if not execution.renew():
                            self.discard(execution)
                    except Exception as exc:  # the next tick tries again
                        logger.warning("could not renew the lease of run %s: %s", execution.pk, exc)
                if live and dbconn.release():
                    with self.mutex:  # a pooled connection goes back until the next tick
                        self.connected = False
        finally:
            with self.mutex:
                self.connected = False
                if self.thread is threading.current_thread():
                    self.thread = None
            connections.close_all()


def _keep_alive(execution: Execution) -> None:
    """Renew ``execution``'s lease from the keeper thread: at once, or, when the run was
    claimed inside a transaction still open (``ATOMIC_REQUESTS``, a caller's ``atomic``
    block), once that transaction commits. Until then no other process can see the run,
    neither to take it over nor to renew it: the keeper's own connection would find no
    row and take the run for lost."""
    using = router.db_for_write(Run)
    if connections[using].in_atomic_block:
        transaction.on_commit(
            lambda: None if execution.done else _keeper().add(execution), using=using
        )
    else:
        _keeper().add(execution)


def _tick() -> float:
    return max(0.2, _lease_seconds() / 3)


_keepers = PerProcess(_Keeper)


def _keeper() -> _Keeper:
    return _keepers.get()


def _private_database() -> bool:
    connection = connections[router.db_for_write(Run)]
    name = str(connection.settings_dict.get("NAME") or "")
    return connection.vendor == "sqlite" and (
        not name or ":memory:" in name or "mode=memory" in name
    )
