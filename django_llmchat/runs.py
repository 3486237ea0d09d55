"""The life of a run, and the one module that writes it.

A :class:`~django_llmchat.models.Run` answers one prompt (or continues the saved history)::

    queued ──claim──> running ──> succeeded | failed | cancelled | interrupted
                         │  └──> awaiting_approval ──decision──> queued
                         └──> queued (a retry later; a worker died: taken over)

Every transition is one transaction that first takes the chat's row lock (an ``UPDATE`` of
the chat row: a row lock on PostgreSQL, the write lock on SQLite), then changes run rows
with conditional ``UPDATE``\\ s (compare-and-set on ``status`` and ``attempt``) and keeps the
chat's cached ``status`` and ``active_run``. So transitions of one chat happen one at a
time, and of two processes racing for one transition exactly one wins.

A claimed run is worked on through an :class:`Execution`: its attempt number fences every
write, so a process that lost the run (its lease ran out and another process took it over)
can store nothing more: no second reply, ever. While it works, a thread of the process
renews the lease every third of ``LLMCHAT["RUN_LEASE"]`` seconds.

Prompts asked while a run works are queued runs, answered in order (oldest first); their
messages read after everything else until their own run starts.

**The gate.** Every run is created here, by :func:`enqueue` (a prompt, a continuation, a
regenerate) or queued again by :func:`decide` (the last tool-call decision), and each of
them admits it in the same transaction: after the chat's lock it takes the user's lock (a
PostgreSQL advisory lock; SQLite's write lock is already held; a row lock on the user
elsewhere), checks every spending limit (:func:`django_llmchat.limits.admit`) and only then
writes. Racing requests of one user are so admitted one at a time, whatever path they came
by, and ``concurrent_runs`` is exact.

Every provider attempt has a Usage row written before the call (``pending``, with its
estimated input tokens and cost); a run taken over from a process that died marks the
attempts that process left ``lost``, so what it spent stays counted.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import Any

from celery import current_app
from django.conf import settings as django_settings
from django.db import connections, router, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from . import branches, limits, signals, streams
from .conf import settings
from .errors import (
    ArgumentError,
    BudgetExceededError,
    ChatBusyError,
    RunInProgress,
    RunLostError,
)
from .events import RunFinished
from .models import Chat, Message, Run, ToolCall, Usage
from .models.message import QUEUED_POSITION, clock_position
from .prepared import INT_ARG, Arg, PreparedInsert, PreparedQuery, PreparedUpdate, mark_saved
from .tools import ToolResult
from .transcript import save_tool_results

logger = logging.getLogger("django_llmchat.runs")

__all__ = [
    "BUSY",
    "NOTHING",
    "PAUSED",
    "NothingToRegenerate",
    "RunInProgress",
    "CancelRequested",
    "Claim",
    "Execution",
    "cancel_queued",
    "claim",
    "decide",
    "enqueue",
    "interrupt",
    "on_admit",
    "recover",
    "stale_runs",
    "switch_to",
    "worker_name",
]

NOTHING, BUSY, PAUSED = "nothing", "busy", "paused"
WAIT_POLL_SECONDS = 0.05
CANCEL_POLL_SECONDS = 0.25

_LOCK_CHAT = PreparedUpdate(Chat, updated_at=Now())
_INSERT_MESSAGE = PreparedInsert(Message)
_INSERT_RUN = PreparedInsert(Run)
_HEAD_FIELDS = (
    "id",
    "chat_id",
    "prompt_id",
    "status",
    "attempt",
    "steps",
    "worker",
    "task_id",
    "cancel_requested",
    "interrupt_reason",
    "error",
    "error_type",
    "lease_expires_at",
    "started_at",
    "created_at",
    "finished_at",
)
_HEAD = PreparedQuery(
    lambda chat_id: (
        Run.objects.filter(chat_id=chat_id, status__in=Run.UNFINISHED)
        .order_by("id")
        .values_list(*_HEAD_FIELDS)[:1]
    )
)
_CHAT_RUNNING = PreparedUpdate(Chat, status=Run.RUNNING, active_run=Arg(int))
_CHAT_STATUS = PreparedUpdate(Chat, status=Arg(str))
_CHAT_RELEASED = PreparedUpdate(
    Chat,
    where=lambda pk, run_id: Chat._base_manager.filter(pk=pk, active_run_id=run_id),
    placeholders=(INT_ARG, INT_ARG + 1),
    status=Arg(str),
    active_run=None,
)
# the attempt is a positive 32-bit column: its stand-in must be in range
_FENCED = (INT_ARG, 2_147_483_000)


def _fenced(pk: int, attempt: int):
    return Run._base_manager.filter(pk=pk, attempt=attempt, status=Run.RUNNING)


_LAST_STEP = PreparedUpdate(
    Run,
    where=_fenced,
    placeholders=_FENCED,
    steps=F("steps") + 1,
    status=Arg(str),
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


def worker_name() -> str:
    """``host:pid`` of this process, with the Celery worker's name when there is one."""
    try:
        from celery import current_task

        hostname = getattr(getattr(current_task, "request", None), "hostname", None)
    except Exception:  # pragma: no cover - celery is a dependency
        hostname = None
    return f"{hostname or socket.gethostname()}:{os.getpid()}"[:255]


def _lease_seconds() -> float:
    return float(settings.RUN_LEASE)


def _lease_until():
    return timezone.now() + timedelta(seconds=_lease_seconds())


def _lock(chat_id: int) -> bool:
    """Take the chat's row lock for this transaction (first statement of every
    transition, so later statements see every transition committed before it)."""
    return bool(_LOCK_CHAT.run(chat_id))


def hold_if_idle(chat_id: int) -> bool:
    """In the caller's transaction: take the chat's lock and say whether it has no run
    queued, running or awaiting approval. While the transaction lasts no run can be
    admitted to it (admission takes the same lock first): delete it now, safely."""
    _lock(chat_id)
    return not Run.objects.filter(chat_id=chat_id).unfinished().exists()


# the advisory lock space of users' admissions: "llmc"
_USER_LOCK_SPACE = 0x6C6C6D63


def _lock_user(user_id: int) -> None:
    """Take the user's admission lock for this transaction, after the chat's: a
    PostgreSQL advisory lock (released at commit or rollback); on SQLite the chat's lock
    already holds the database's write lock; elsewhere a row lock on the user."""
    connection = connections[router.db_for_write(Run)]
    if connection.vendor == "sqlite":
        return
    if connection.vendor == "postgresql":
        key = ((int(user_id) + 2**31) % 2**32) - 2**31  # any id into the int4 key
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_USER_LOCK_SPACE, key])
        return
    from django.contrib.auth import get_user_model

    list(get_user_model()._default_manager.select_for_update().filter(pk=user_id).values("pk"))


def _admit(chat: Chat) -> limits.Verdict | None:
    """The gate, in the caller's transaction after the chat's lock: the user's lock, then
    every limit. Over a hard limit :class:`BudgetExceededError` (the caller rolls back
    and sends the signal)."""
    if not limits.enabled() or chat.user_id is None:
        return None
    _lock_user(chat.user_id)
    return limits.admit(chat, signal=False)


def _mark_lost(run_id: int) -> int:
    """The attempts of ``run_id`` still pending were made by a process that died: they
    end ``lost``, their estimated tokens and cost kept (and counted by the limits)."""
    return Usage.objects.filter(run_id=run_id, status=Usage.PENDING).update(
        status=Usage.LOST,
        error="The process making this attempt stopped before the attempt ended.",
    )


def _head(chat_id: int) -> Run | None:
    """The oldest unfinished run of the chat: the one to work on next."""
    rows = _HEAD.rows(chat_id)
    if not rows:
        return None
    values = dict(zip(_HEAD_FIELDS, rows[0], strict=True))
    for name in ("lease_expires_at", "started_at", "created_at", "finished_at"):
        values[name] = _aware(values[name])
    values["cancel_requested"] = bool(values["cancel_requested"])
    run = Run(**values)
    mark_saved(run, router.db_for_read(Run))
    return run


def _aware(value: Any) -> Any:
    """A datetime read without Django's converters (SQLite gives naive UTC text)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and django_settings.USE_TZ and timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value


def _sync_chat(chat_id: int, release: int | None = None) -> Run | None:
    """Write the chat's cached status (its head run's, else ``idle``), in the caller's
    transaction, after the chat's lock was taken; ``release``: the run letting go of the
    chat (``active_run`` cleared when it held it). Returns the head run."""
    head = _head(chat_id)
    status = head.status if head is not None else "idle"
    if release is None or not _CHAT_RELEASED.run(chat_id, release, status=status):
        _CHAT_STATUS.run(chat_id, status=status)
    return head


def _release(chat_id: int, run_id: int) -> Run | None:
    """Run ``run_id`` lets go of the chat (in the caller's transaction, under the lock);
    returns the chat's next run."""
    return _sync_chat(chat_id, release=run_id)


def _move_prompt_into_place(chat_id: int, prompt_id: int | None) -> None:
    """A prompt stored while an earlier run worked reads after that run's messages from
    the moment its own run starts (or ends unanswered)."""
    if prompt_id is None:
        return
    leaf = branches.leaf_row(chat_id)  # the prompt follows the path's last message
    position = clock_position()
    if leaf is not None and position <= leaf[1]:
        position = leaf[1] + 1
    Message.objects.filter(pk=prompt_id, position__gte=QUEUED_POSITION).update(
        position=position, parent_id=leaf[0] if leaf is not None else None
    )


_ON_ADMIT: ContextVar[Callable[[Run], None] | None] = ContextVar("llmchat_on_admit", default=None)


@contextmanager
def on_admit(callback: Callable[[Run], None]) -> Iterator[None]:
    """While in this block, ``callback(run)`` is called inside the transaction that admits
    a run (:func:`enqueue`, after the run row is written) or records a tool-call decision
    (:func:`decide`, with the run waiting for it), under the chat's lock: what it writes
    commits with the run, and an exception it raises rolls everything back."""
    token = _ON_ADMIT.set(callback)
    try:
        yield
    finally:
        _ON_ADMIT.reset(token)


def _admitted(run: Run) -> None:
    callback = _ON_ADMIT.get()
    if callback is not None:
        callback(run)


# -- enqueue and claim ----------------------------------------------------------------------
def enqueue(
    chat: Chat,
    prompt: Message | None = None,
    attachments: list[tuple] | None = None,
    *,
    task_id: str = "",
    start: bool = False,
    wait: bool = False,
    regenerate: bool = False,
) -> tuple[Run, Execution | None]:
    """Admit and store ``prompt`` (unsaved, with its attachments) and a queued run
    answering it, in one transaction (the gate: the chat's lock, the user's lock, every
    limit; over one :class:`BudgetExceededError` and nothing is stored). ``start=True``
    also claims the run when nothing is ahead of it (the caller runs it now).
    ``wait=True``: the caller will wait for the run's turn (the run holds a lease the
    waiting renews, so nobody else takes it); it raises :class:`ChatBusyError` instead
    when the chat's run waits for a tool-call decision. ``regenerate=True`` (no prompt):
    the messages after the active path's last prompt leave the path (kept, as siblings of
    the new reply) and the new run answers again; :class:`ChatBusyError` while a run is
    unfinished. Inside :func:`django_llmchat.branches.branching`, the prompt follows the
    given message instead of the active leaf (a new branch; :class:`ChatBusyError` while
    a run is unfinished).

    The admission's verdict (``None`` with limits off) is ``run.verdict``."""
    if chat.pk is None:
        raise ArgumentError(
            "save the chat before running it (Chat.objects.create(...) or chat.save())"
        )
    if regenerate and prompt is not None:
        raise ArgumentError("a regenerate answers the last prompt again: it takes no prompt")
    worker = worker_name() if (start or wait) else ""
    try:
        with transaction.atomic():
            run, claimed, chat.status = _enqueue(
                chat, prompt, attachments, task_id, start, wait, regenerate, worker
            )
    except BudgetExceededError as exc:
        limits.exceeded(chat, exc)  # after the rollback: a receiver may write
        raise
    return run, (Execution(run, worker=worker) if claimed else None)


def _enqueue(chat, prompt, attachments, task_id, start, wait, regenerate, worker):
    if not _lock(chat.pk):
        raise ArgumentError(f"chat {chat.pk} does not exist")
    head = _head(chat.pk)
    if wait and head is not None and head.status == Run.AWAITING_APPROVAL:
        raise ChatBusyError(
            f"chat {chat.pk} is waiting for a decision on its tool calls: approve or "
            "deny them (or cancel the run) first"
        )
    if regenerate:
        _drop_last_reply(chat, head)
    branch = branches.pending_branch() if prompt is not None else None
    if branch is not None:  # a prompt after a given message: a new branch
        prompt.parent_id = branches.branch_here(chat.pk, branch, in_progress=head is not None)
    verdict = _admit(chat)
    if prompt is not None:
        if branch is None and head is not None:
            prompt.position += QUEUED_POSITION  # its parent is given when it is placed
        elif branch is None:
            prompt.parent_id = branches.leaf_id(chat.pk)  # it follows the active leaf
        if attachments:
            chat._insert(prompt, attachments)
        else:
            _INSERT_MESSAGE.save(prompt)
    run = Run(chat=chat, prompt=prompt, task_id=task_id[:255])
    now = timezone.now()
    claimed = start and head is None
    if claimed:
        run.status, run.attempt, run.started_at = Run.RUNNING, 1, now
        run.worker, run.lease_expires_at = worker, _lease_until()
    elif wait:
        run.worker, run.lease_expires_at = worker, _lease_until()
    _INSERT_RUN.save(run)
    _admitted(run)
    if claimed:
        _CHAT_RUNNING.run(chat.pk, active_run=run.pk)
    elif head is None:
        _CHAT_STATUS.run(chat.pk, status=Run.QUEUED)
    run.verdict = verdict
    return run, claimed, (run.status if head is None else head.status)


def _drop_last_reply(chat: Chat, head: Run | None) -> None:
    """Regenerate, under the chat's lock: the messages after the active path's last
    prompt leave the path (they stay stored, siblings of the new reply; every usage row
    stays). One regenerate of many racing
    wins; the others find its run unfinished."""
    if head is not None:
        raise RunInProgress(
            f"chat {chat.pk} has a run in progress: wait for it to end (or cancel it) "
            "before regenerating"
        )
    last = Run.objects.filter(chat_id=chat.pk).order_by("-id").values_list("pk", flat=True)
    last_id = last.first()
    if last_id is None:
        raise NothingToRegenerate(f"chat {chat.pk} has no reply to regenerate")
    if branches.drop_reply(chat.pk) < 0:
        raise NothingToRegenerate(f"chat {chat.pk} has no prompt to answer again")


def switch_to(chat_id: int, message: Any) -> int:
    """Make the branch through ``message`` (a Message of the chat or its id) the chat's
    active path (:func:`django_llmchat.branches.rewire`), under the chat's lock;
    :class:`RunInProgress` while a run of the chat is unfinished. Returns the new leaf's
    id."""
    with transaction.atomic():
        if not hold_if_idle(chat_id):
            raise branches.busy(chat_id, "switching branches")
        return branches.rewire(chat_id, message)


class NothingToRegenerate(ArgumentError):
    """A regenerate on a chat that has no run yet."""


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
) -> Claim:
    """Take the chat's next run, if it is this caller's to take.

    The next run is the oldest unfinished one. A queued run is started; a running run
    whose lease ran out (its process died) is taken over and resumed from its last stored
    step. ``run_id``: the run the caller is for; when another run is ahead of it, a task
    (``waiting=False``) answers that one first (in order), a caller waiting for its own
    turn (``waiting=True``) renews its run's lease and gets ``BUSY``. A run taken on
    ``RUN_MAX_ATTEMPTS`` times ends failed instead."""
    worker = worker or worker_name()
    for _ in range(100):  # each pass fails one run that cannot be resumed, or returns
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
            updates: dict[str, Any] = {
                "status": Run.RUNNING,
                "attempt": head.attempt + 1,
                "worker": worker,
                "lease_expires_at": _lease_until(),
                "cancel_requested": False if head.status == Run.QUEUED else head.cancel_requested,
            }
            if head.started_at is None:
                updates["started_at"] = now
            if task_id:
                updates["task_id"] = task_id[:255]
            taken = Run.objects.filter(pk=head.pk, status=head.status, attempt=head.attempt).update(
                **updates
            )
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
            _CHAT_RUNNING.run(chat_id, active_run=head.pk)
            for name, value in updates.items():
                setattr(head, name, value)
            return Claim(execution=Execution(head, worker=worker))
    raise RuntimeError(f"could not claim a run of chat {chat_id}")  # pragma: no cover


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
    if head.status == Run.AWAITING_APPROVAL:
        return Claim(state=PAUSED)
    retry_in = None
    if head.lease_expires_at is not None:
        retry_in = max(0.0, (head.lease_expires_at - now).total_seconds())
    return Claim(state=BUSY, retry_in=retry_in)


def _give_up(run: Run, now) -> None:
    attempts = run.attempt
    error = (
        f"The run stopped {attempts} times before it could finish (its worker was lost each "
        "time); it was not tried again."
    )
    _mark_lost(run.pk)
    _tell_followers(run.chat_id, run.pk, Run.FAILED, "worker_lost")
    signals.send_after_commit(
        signals.run_failed,
        run_id=run.pk,
        chat_id=run.chat_id,
        error_type="worker_lost",
        error=error,
    )
    Run.objects.filter(pk=run.pk, status=Run.RUNNING, attempt=run.attempt).update(
        status=Run.FAILED,
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
        if found.execution is not None:
            if found.execution.pk != run.pk:  # pragma: no cover - claim takes only ``run``
                raise RuntimeError("claimed another run than the one waited for")
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


def cancel_queued(chat_id: int, run_id: int, *, error_type: str = "", reason: str = "") -> bool:
    """End run ``run_id`` ``cancelled`` while it is still queued (its caller gave up on
    it before its turn came); ``False`` when it is not queued any more."""
    with transaction.atomic():
        _lock(chat_id)
        run = Run.objects.filter(pk=run_id, status=Run.QUEUED).first()
        if run is None:
            return False
        Run.objects.filter(pk=run_id, status=Run.QUEUED).update(
            status=Run.CANCELLED,
            error_type=error_type,
            interrupt_reason=reason[:255],
            finished_at=Now(),
            lease_expires_at=None,
        )
        _move_prompt_into_place(chat_id, run.prompt_id)
        following = _sync_chat(chat_id)
        _tell_followers(chat_id, run_id, Run.CANCELLED, error_type)
        if _waits_for_a_worker(following):
            transaction.on_commit(lambda: _send(following))
    return True


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
        self.outcome: str | None = None  # the status this process wrote last
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

    def step_stored(self, *, final_status: str | None = None) -> None:
        """In the transaction storing a step: count it and renew the lease, or raise
        :class:`RunLostError` (rolling the step back) when the run is not ours any more.
        ``final_status``: the run ends with this step (the caller took the chat's lock
        first, with :meth:`lock_chat`)."""
        if final_status is None:
            changed = self._fenced().update(steps=F("steps") + 1, lease_expires_at=_lease_until())
        else:
            changed = _LAST_STEP.run(self.pk, self.attempt, status=final_status)
            self.run.finished_at = timezone.now()
        if not changed:
            raise self._lost()
        self.run.steps += 1
        if final_status is not None:
            self._ended(final_status, _release(self.chat_id, self.pk))

    def fence(self) -> None:
        """In a transaction storing tool results: raise :class:`RunLostError` when the run
        is not ours any more."""
        if not self._fenced().update(lease_expires_at=_lease_until()):
            raise self._lost()

    def lock_chat(self) -> None:
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
        more."""
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
        head = None
        with transaction.atomic():
            _lock(self.chat_id)
            changed = self._fenced().update(status=status, lease_expires_at=None, **updates)
            if changed:
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

    def _ended(self, status: str, head: Run | None) -> None:
        self.outcome = status
        self.run.status = status
        self.run.lease_expires_at = None
        _keeper().discard(self)
        if self.kick_next and status != Run.QUEUED and _waits_for_a_worker(head):
            transaction.on_commit(lambda: _send(head))


def _tell_followers(chat_id: int, run_id: int, status: str, error_type: str = "") -> None:
    """A run ended with no process working on it (cancelled while queued or waiting for a
    decision, given up after its workers died): once the transaction commits, its
    terminal ``run_finished`` goes to the chat's event stream, so every follower learns
    the end (a Redis failure is logged, the run's end is in the database)."""
    if not streams.enabled():
        return
    event = RunFinished(run_id=str(run_id), status=status, error_type=error_type or None)

    def publish() -> None:
        try:
            streams.publish(chat_id, event)
        except Exception as exc:
            logger.warning(
                "could not tell chat %s's followers run %s ended: %s", chat_id, run_id, exc
            )

    transaction.on_commit(publish)


def _waits_for_a_worker(run: Run | None) -> bool:
    """A queued run no caller waits for in-process: its task answers it."""
    return run is not None and run.status == Run.QUEUED and run.lease_expires_at is None


COMPLETE_CHAT = "django_llmchat.tasks.complete_chat"
"""The Celery task answering a chat's queued runs (:mod:`django_llmchat.tasks` registers it
when the app is ready); this module sends it by name, being below it."""


def send(chat_id: int, run_id: int, *, task_id: str | None = None) -> None:
    """Send the task answering run ``run_id`` (to the broker, or run in this process when
    no broker is configured)."""
    task = current_app.tasks[COMPLETE_CHAT]
    task.apply_async((chat_id,), {"run_id": run_id}, task_id=task_id)


def _send(run: Run) -> None:
    send(run.chat_id, run.pk)


# -- lease renewal ----------------------------------------------------------------------------
class _Keeper:
    """One thread per process renewing the leases of the runs it works on.

    The thread outlives its last run by up to two ticks (a third of the lease each): runs
    that follow one another, as a chat's do, share it instead of each starting a thread.
    It holds a database connection only while it has renewed something: when its last
    run ends it closes the connection, and with nothing to renew for a whole tick, ends."""

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


_keeper_instance: _Keeper | None = None
_keeper_mutex = threading.Lock()


def _keeper() -> _Keeper:
    global _keeper_instance
    found = _keeper_instance
    if found is not None and found.pid == os.getpid():
        return found
    with _keeper_mutex:
        if _keeper_instance is None or _keeper_instance.pid != os.getpid():
            _keeper_instance = _Keeper()
        return _keeper_instance


def _private_database() -> bool:
    connection = connections[router.db_for_write(Run)]
    name = str(connection.settings_dict.get("NAME") or "")
    return connection.vendor == "sqlite" and (
        not name or ":memory:" in name or "mode=memory" in name
    )


# -- stopping, deciding -----------------------------------------------------------------------
def interrupt(chat_id: int, reason: str | None = None, *, run_id: int | None = None) -> bool:
    """Stop the chat's current run: a running one stops between chunks or steps (its
    process sees the request within a quarter second); one waiting for a decision or in
    the queue ends now. ``reason == "cancelled"`` ends it ``cancelled``, any other
    reason ``interrupted``. ``run_id``: stop only that run (when it is still the chat's
    current one). Returns whether there was a run to stop (``False`` as well when a stop
    was asked for already: the first request wins)."""
    reason = (reason or "")[:255]
    status = Run.CANCELLED if reason == "cancelled" else Run.INTERRUPTED
    with transaction.atomic():
        if not _lock(chat_id):
            return False
        head = _head(chat_id)
        if head is None or (run_id is not None and head.pk != run_id):
            return False
        if head.status == Run.RUNNING:
            return bool(
                Run.objects.filter(pk=head.pk, status=Run.RUNNING, cancel_requested=False).update(
                    cancel_requested=True, interrupt_reason=reason
                )
            )
        if head.status == Run.AWAITING_APPROVAL:
            _answer_waiting_calls(chat_id, head)
        changed = Run.objects.filter(pk=head.pk, status=head.status).update(
            status=status,
            interrupt_reason=reason,
            finished_at=Now(),
            lease_expires_at=None,
        )
        if changed:
            _move_prompt_into_place(chat_id, head.prompt_id)
            following = _release(chat_id, head.pk)
            _tell_followers(chat_id, head.pk, status)
            if _waits_for_a_worker(following):
                transaction.on_commit(lambda: _send(following))
        return bool(changed)


def _answer_waiting_calls(chat_id: int, run: Run) -> None:
    """A run stopped while it waited for decisions: each waiting call gets an error
    result, so the transcript holds no call without its result."""
    waiting = list(ToolCall.objects.filter(chat_id=chat_id, result__isnull=True).order_by("id"))
    if waiting:
        result = ToolResult.error("cancelled", "The run was stopped before this call was decided.")
        save_tool_results(Chat(pk=chat_id), [(call, result) for call in waiting], run_id=run.pk)


def decide(chat_id: int, call: ToolCall, approval: str) -> Run | None:
    """Record ``approval`` (``"approved"``/``"denied"``) on a call the chat's run waits
    for, once: a second decision on the same call raises :class:`AlreadyDecided`; a run
    that is not waiting raises :class:`ChatBusyError`. Returns the run when this was
    the last decision it waited for (it is queued again: run it, or send its task). The
    run queued again passes the gate as a new run does: over a limit
    :class:`BudgetExceededError`, and the decision is not recorded."""
    if approval not in ("approved", "denied"):
        raise ArgumentError(f"approval must be 'approved' or 'denied', got {approval!r}")
    try:
        with transaction.atomic():
            return _decide(chat_id, call, approval)
    except BudgetExceededError as exc:
        chat = Chat.objects.filter(pk=chat_id).first()
        if chat is not None:
            limits.exceeded(chat, exc)  # after the rollback: a receiver may write
        raise


def _decide(chat_id: int, call: ToolCall, approval: str) -> Run | None:
    _lock(chat_id)
    taken = ToolCall.objects.filter(pk=call.pk, approval="", result__isnull=True).update(
        approval=approval
    )
    if not taken:
        raise AlreadyDecided(f"tool call {call.call_id!r} has already been answered")
    head = _head(chat_id)
    if head is None or head.status != Run.AWAITING_APPROVAL:
        raise ChatBusyError(
            f"chat {chat_id} has no run waiting for a decision (it is running: wait for "
            "it to pause)"
        )
    _admitted(head)
    if ToolCall.objects.filter(chat_id=chat_id, approval="", result__isnull=True).exists():
        return None
    if limits.enabled():
        owner = Chat._base_manager.filter(pk=chat_id).values_list("user_id", flat=True).first()
        _admit(Chat(pk=chat_id, user_id=owner))
    Run.objects.filter(pk=head.pk, status=Run.AWAITING_APPROVAL).update(status=Run.QUEUED)
    _sync_chat(chat_id)
    head.status = Run.QUEUED
    return head


class AlreadyDecided(ArgumentError):
    """The tool call was approved, denied or answered already."""


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
        (dispatch or send)(run.chat_id, run.pk)
    return found
