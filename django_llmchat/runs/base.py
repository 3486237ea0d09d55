"""What every transition of a run shares: the chat's lock, the chat's next run (its
head), the chat's cached status, the place of a queued prompt, telling followers and
sending the task that answers a queued run.

Every transition is one transaction that first takes the chat's row lock (:func:`_lock`):
so transitions of one chat happen one at a time, and later statements see every
transition committed before.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import UTC, timedelta
from typing import Any

from celery import current_app
from django.conf import settings as django_settings
from django.db import connections, router, transaction
from django.db.models import Case, F, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce, Now
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from .. import streams
from ..conf import settings
from ..db.prepared import (
    INT_ARG,
    Arg,
    PreparedQuery,
    PreparedUpdate,
    mark_saved,
    new_instance,
    returns_updated_rows,
)
from ..events import RunFinished
from ..models import Chat, Message, Run, Usage, branches
from ..models.message import QUEUED_POSITION, clock_position

logger = logging.getLogger("django_llmchat.runs")

NOTHING, BUSY, PAUSED = "nothing", "busy", "paused"

_LOCK_CHAT = PreparedUpdate(Chat, updated_at=Now())
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


def _chat_released(**also: Any) -> PreparedUpdate:
    """The chat's cached status written and its active run let go of, when it is the
    run's (the run's id the second argument)."""
    return PreparedUpdate(
        Chat,
        where=lambda pk, run_id: Chat._base_manager.filter(pk=pk, active_run_id=run_id),
        placeholders=(INT_ARG, INT_ARG + 1),
        status=Arg(str),
        active_run=None,
        **also,
    )


_CHAT_STATUS = PreparedUpdate(Chat, status=Arg(str))
_CHAT_RELEASED = _chat_released()
# the same with the chat's updated_at, as the lock writes it: for a transaction that took
# no lock statement first (SQLite's last step of a run, :func:`_locks_rows`)
_CHAT_STATUS_TOUCHED = PreparedUpdate(Chat, status=Arg(str), updated_at=Now())
_CHAT_RELEASED_TOUCHED = _chat_released(updated_at=Now())
# an automatic title, written only on a chat still untitled whose title is not the user's
_CHAT_TITLED = PreparedUpdate(
    Chat,
    where=lambda pk: Chat._base_manager.filter(pk=pk, title="").exclude(title_source="user"),
    title=Arg(str),
    title_source=Arg(str),
)


def worker_name() -> str:
    """``host:pid`` of this process, with the Celery worker's name when there is one."""
    from celery import current_task

    hostname = getattr(getattr(current_task, "request", None), "hostname", None)
    if hostname:
        return f"{hostname}:{os.getpid()}"[:255]
    pid = os.getpid()
    known = _THIS_HOST.get(pid)
    if known is None:  # the host's name is asked once per process (a fork asks again)
        _THIS_HOST.clear()
        known = _THIS_HOST[pid] = f"{socket.gethostname()}:{pid}"[:255]
    return known


_THIS_HOST: dict[int, str] = {}


def _lease_seconds() -> float:
    return float(settings.RUN_LEASE)


def _lease_until():
    return timezone.now() + timedelta(seconds=_lease_seconds())


def _lock(chat_id: int) -> bool:
    """Take the chat's row lock for this transaction (first statement of every
    transition, so later statements see every transition committed before it)."""
    return bool(_LOCK_CHAT.run(chat_id))


def _locks_rows(using: str) -> bool:
    """Whether database ``using`` locks rows (PostgreSQL): a transition takes the chat's
    lock first. SQLite locks the whole database at a transaction's first write: a
    transition whose first statement writes (the run's last step: its reply) needs no
    lock statement of its own before it."""
    return connections[using].vendor != "sqlite"


def hold_if_idle(chat_id: int) -> bool:
    """In the caller's transaction: take the chat's lock and say whether it has no run
    queued, running or awaiting approval. While the transaction lasts no run can be
    admitted to it (admission takes the same lock first): delete it now, safely."""
    _lock(chat_id)
    return not Run.objects.filter(chat_id=chat_id).unfinished().exists()


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
    run = new_instance(Run, **values)
    mark_saved(run, router.db_for_read(Run))
    return run


def _aware(value: Any) -> Any:
    """A datetime read without Django's converters (SQLite gives naive UTC text)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and django_settings.USE_TZ and timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value


def _sync_chat(chat_id: int, release: int | None = None, *, touch: bool = False) -> Run | None:
    """Write the chat's cached status (its head run's, else ``idle``), in the caller's
    transaction, after the chat's lock was taken; ``release``: the run letting go of the
    chat (``active_run`` cleared when it held it); ``touch``: its ``updated_at`` too (no
    lock statement wrote it). Returns the head run."""
    head = _head(chat_id)
    status = head.status if head is not None else "idle"
    released, other = (
        (_CHAT_RELEASED_TOUCHED, _CHAT_STATUS_TOUCHED) if touch else (_CHAT_RELEASED, _CHAT_STATUS)
    )
    if release is None or not released.run(chat_id, release, status=status):
        other.run(chat_id, status=status)
    return head


def _release(chat_id: int, run_id: int, *, touch: bool = False) -> Run | None:
    """Run ``run_id`` lets go of the chat (in the caller's transaction, under the lock, or
    with ``touch`` where the transaction took none: :func:`_locks_rows`); returns the
    chat's next run."""
    return _sync_chat(chat_id, release=run_id, touch=touch)


# the chat's status at a run's end: its next run's, else idle
_NEXT_STATUS = Coalesce(
    Subquery(
        Run._base_manager.filter(chat_id=OuterRef("pk"), status__in=Run.UNFINISHED)
        .order_by("id")
        .values("status")[:1]
    ),
    Value("idle"),
)
_TITLE_ARG, _TITLE_SOURCE_ARG = "\x00llmchat-title", "\x00llmchat-title-source"
_UNTITLED = Q(title="") & ~Q(title_source="user")  # an automatic title may be written
_TITLE_VALUES = {
    "title": Case(When(_UNTITLED, then=Value(_TITLE_ARG)), default=F("title")),
    "title_source": Case(When(_UNTITLED, then=Value(_TITLE_SOURCE_ARG)), default=F("title_source")),
}
# The chat's one UPDATE at a run's last step, by (touch, titled): its status
# (_NEXT_STATUS), its active run let go of when it is the run's (the second argument),
# updated_at with ``touch``, with ``titled`` its automatic title where it is still untitled
# and not the user's; the status, title and title source it leaves read back. Built at
# import, compiled once per database.
_RELEASED_AT_LAST_STEP = {
    (touch, titled): PreparedUpdate(
        Chat,
        where=lambda pk, run_id, *title: Chat._base_manager.filter(pk=pk),
        placeholders=(INT_ARG, INT_ARG + 1, *((_TITLE_ARG, _TITLE_SOURCE_ARG) if titled else ())),
        returning=("status", "title", "title_source"),
        status=_NEXT_STATUS,
        active_run=Case(When(active_run=INT_ARG + 1, then=Value(None)), default=F("active_run")),
        **({"updated_at": Now()} if touch else {}),
        **(_TITLE_VALUES if titled else {}),
    )
    for touch in (False, True)
    for titled in (False, True)
}


def _release_at_last_step(
    chat_id: int, run_id: int, *, touch: bool, title: tuple[str, str] | None
) -> tuple[Run | None, bool]:
    """:func:`_release` for the transaction storing a run's last step, with the chat's
    automatic ``title`` (``(text, source)``, or ``None``): written when the chat is still
    untitled and its title is not the user's. Where the database returns an ``UPDATE``'s
    row, one statement (and the next run read only when there is one); else the next run
    read, the release and the title's conditional ``UPDATE``. Returns the chat's next run
    and whether the title was written."""
    if not returns_updated_rows(connections[router.db_for_write(Chat)]):
        head = _release(chat_id, run_id, touch=touch)
        return head, title is not None and bool(
            _CHAT_TITLED.run(chat_id, title=title[0][:255], title_source=title[1])
        )
    if title is not None:
        title = (title[0][:255], title[1])
    update = _RELEASED_AT_LAST_STEP[touch, title is not None]
    row = update.returned(chat_id, run_id, *(title or ()))
    if row is None:  # the chat is gone (its runs with it)
        return None, False
    status, written, source = row
    head = None if status == "idle" else _head(chat_id)
    # an untitled chat takes this title: it now has it (the chat titled so meanwhile by
    # another process, the same text from the same source, reads the same)
    return head, title is not None and (written, source) == title


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


def tell_followers(chat_id: int, run_id: int, status: str, error_type: str = "") -> None:
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
