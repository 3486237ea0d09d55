"""Celery tasks: the loop run by workers.

``complete_chat(chat_id, reply_to=None)`` answers the prompts queued with
``Chat.ask_later``. It is safe to run twice (a redelivered or duplicated task makes no
second reply), two tasks never run one chat at the same time (a per-chat lock from
:mod:`django_llmchat.locks`), and a worker killed mid-stream loses nothing but the
interrupted step, which the redelivered task runs again (``acks_late``).

Every event of a run, framed by ``RunStarted`` and ``RunFinished``, is published to the
chat's Redis Stream when ``LLMCHAT["EVENTS_URL"]`` is set (:mod:`django_llmchat.streams`).

With no Celery broker configured, ``complete_chat.delay()`` runs the task in this process
instead: in a background thread (``LLMCHAT["TASKS_EAGER_WITHOUT_BROKER"] = True``, the
default) or in the calling thread (``"inline"``, also used under
``CELERY_TASK_ALWAYS_EAGER``).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from typing import Any

from celery import Task, shared_task
from celery.result import EagerResult
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, close_old_connections, connections
from django.db.models import Case, IntegerField, Value, When
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from . import streams
from .conf import settings
from .errors import ProviderError
from .events import Interrupt, RunFinished, RunStarted, StreamEvent
from .prepared import PreparedQuery

logger = logging.getLogger("django_llmchat.tasks")

__all__ = [
    "QUEUED",
    "complete_chat",
    "in_process_mode",
    "run_chat",
    "wait_for_background_runs",
]

QUEUED = "queued"
"""Key set on a user message's ``raw`` by ``ask_later``: ``True`` while the prompt waits
for its reply, ``False`` once its turn was taken without a reply (cancelled, failed)."""

LOCK_WAIT = 2.0
"""Seconds a task waits for the chat's lock before re-queueing itself."""
LOCK_RETRY_DELAY = 1.0
"""Countdown of that re-queued task (doubling with each retry, up to 30 s)."""

# the run's outcome, named after the chat status the loop leaves behind
_RUN_STATUS = {"idle": "completed", "running": "completed"}

NOTHING, BUSY, DONE = "nothing", "busy", "done"


class RetryLater(Exception):
    """The run hit a retryable error: try again in ``countdown`` seconds."""

    def __init__(self, countdown: float, attempt: int, error: BaseException):
        self.countdown = countdown
        self.attempt = attempt
        self.error = error
        super().__init__(f"retrying in {countdown:.1f}s after: {error}")


@dataclass
class _Turn:
    """One run: the prompt it answers and how much of the transcript it sees."""

    message_id: int | None = None
    queued: bool = False
    limit: int | None = None
    later: list[int] = field(default_factory=list)


# -- planning --------------------------------------------------------------------------
def _models():
    from .models import Chat, Message, ToolCall

    return Chat, Message, ToolCall


@dataclass
class _Row:
    """One message of the transcript, as much as planning needs."""

    pk: int
    role: str
    created_at: Any
    mark: bool | None  # ask_later's mark: True waiting, False taken, None never queued


def _skeleton_query(chat_id: int):
    _, Message, _ = _models()
    return (
        Message.objects.filter(chat_id=chat_id)
        .annotate(
            _mark=Case(
                When(role="user", **{f"raw__{QUEUED}": True}, then=Value(1)),
                When(role="user", raw__has_key=QUEUED, then=Value(0)),
                default=None,
                output_field=IntegerField(),
            )
        )
        .order_by("created_at", "id")
        .values_list("id", "role", "created_at", "_mark")
    )


_SKELETON = PreparedQuery(_skeleton_query)


def _aware(value: Any) -> Any:
    """A ``created_at`` read without Django's converters (SQLite gives naive UTC, or text)."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if django_settings.USE_TZ and timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value


def _skeleton(chat_id: int) -> list[_Row]:
    """Every message of the chat in order, without its content (one light query)."""
    return [
        _Row(pk, role, _aware(at), None if mark is None else bool(mark))
        for pk, role, at, mark in _SKELETON.rows(chat_id)
    ]


def _answered(rows: list[_Row], index: int) -> bool:
    """Whether something other than a prompt follows ``rows[index]``."""
    return any(r.role != "user" for r in rows[index + 1 :])


def _move_after_the_rest(chat_id: int, ids: list[int], rows: list[_Row]) -> None:
    """Give the user messages ``ids`` a ``created_at`` after every other message, keeping
    their order (ties sort by id): a prompt queued during a run follows that run's reply."""
    if not ids:
        return
    _, Message, _ = _models()
    moving = set(ids)
    others = [r.created_at for r in rows if r.pk not in moving]
    when = timezone.now()
    if others and when <= max(others):
        when = max(others) + timedelta(microseconds=1)
    Message.objects.filter(pk__in=ids, role="user").update(created_at=when)


def _next(rows: list[_Row]) -> tuple[_Turn | None, _Row | None]:
    """The run answering the oldest waiting prompt (it sees the transcript up to it; the
    messages after it wait for their own turn), or the waiting prompt a run already
    answered (its worker died before it could say so: only its turn is left to close)."""
    for i, row in enumerate(rows):
        if row.mark is True:
            if _answered(rows, i):
                return None, row
            later = [r.pk for r in rows[i + 1 :]]
            return _Turn(message_id=row.pk, queued=True, limit=i + 1, later=later), None
    return None, None


def _decide(
    chat_id: int, rows: list[_Row], reply_to: int | None, first: bool
) -> tuple[_Turn | None, _Row | None]:
    if first and reply_to is not None:
        index = next((i for i, r in enumerate(rows) if r.pk == reply_to), None)
        if index is None or rows[index].role != "user":
            return None, None  # deleted, or not a prompt of this chat
        mark = rows[index].mark
        if mark is False:
            return None, None  # its turn was taken (cancelled or failed): no second try
        if mark is None:
            # a prompt saved without ask_later: answer it if nothing answered it yet
            if _answered(rows, index):
                return None, None
            turn, stale = _next(rows)
            if turn is None and stale is None:
                turn = _Turn(message_id=reply_to)
            return turn, stale
    turn, stale = _next(rows)
    if turn is not None or stale is not None or not first or reply_to is not None:
        return turn, stale
    # no reply_to: continue when the transcript ends waiting for the model
    if not rows:
        return None, None
    last = rows[-1]
    if last.role == "user":
        return _Turn(message_id=last.pk), None
    if last.role == "tool":
        return _Turn(), None
    if last.role == "assistant":
        _, _, ToolCall = _models()
        if ToolCall.objects.filter(message_id=last.pk, result__isnull=True).exists():
            return _Turn(), None
    return None, None


def plan(
    chat_id: int, reply_to: int | None = None, *, first: bool = True, settle: bool = False
) -> _Turn | None:
    """The next run a task should make for the chat, or ``None`` when nothing awaits a
    reply. ``first=False`` only looks at queued prompts (a task draining the queue);
    ``settle=True`` (only under the chat's lock) closes the turn of a queued prompt that a
    run already answered, e.g. one whose worker died before it could say so."""
    while True:
        rows = _skeleton(chat_id)
        turn, stale = _decide(chat_id, rows, reply_to, first)
        if stale is None:
            return turn
        if not settle:
            return _Turn(message_id=stale.pk, queued=True)  # there is work: settling it
        _close_turn(chat_id, _Turn(message_id=stale.pk, queued=True), rows)


# -- running ---------------------------------------------------------------------------
class _Publisher:
    """Publishes a run's events to the chat's stream through this process's publisher
    thread (:func:`streams.publish_later`); a Redis failure never stops the run (the
    database holds the truth)."""

    def __init__(self, chat_id: int):
        self.chat_id = chat_id
        self.on = streams.enabled()
        if self.on:
            streams.client()  # ImproperlyConfigured now, before any work, if redis is missing

    def __call__(self, event: StreamEvent) -> None:
        if self.on:
            streams.publish_later(self.chat_id, event)

    def flush(self) -> None:
        if self.on and not streams.flush(timeout=10):
            logger.warning("live events of chat %s are still unsent", self.chat_id)


def _retry_delay(exc: BaseException, attempt: int) -> float | None:
    """Seconds before the task tries again, or ``None`` to give up."""
    if attempt >= int(settings.TASK_MAX_RETRIES):
        return None
    if isinstance(exc, ProviderError):
        if not exc.retryable:
            return None
        hint = exc.retry_after
    elif isinstance(exc, DatabaseError):
        hint = None
    else:
        return None
    cap = float(settings.TASK_RETRY_MAX_WAIT)
    if hint is not None:
        return min(max(float(hint), 0.0), cap)
    return min(cap, 2.0 * 2**attempt) * random.uniform(0.5, 1.0)


def _close_turn(chat_id: int, turn: _Turn, rows: list[_Row] | None = None) -> None:
    """After a run: the prompt's turn is over; the messages its run did not see (held back,
    or queued meanwhile) move after what the run stored."""
    _, Message, _ = _models()
    if not turn.queued or turn.message_id is None:
        return
    rows = _skeleton(chat_id) if rows is None else rows
    index = next((i for i, r in enumerate(rows) if r.pk == turn.message_id), None)
    if index is None:
        return
    answered = _answered(rows, index)
    Message.objects.filter(pk=turn.message_id).update(raw=None if answered else {QUEUED: False})
    waiting = {r.pk for r in rows[index + 1 :] if r.mark is True}
    _move_after_the_rest(chat_id, sorted(set(turn.later) | waiting), rows)


def _run_turn(chat_id: int, turn: _Turn, attempt: int, publish: _Publisher) -> str:
    """One run of the loop; returns its outcome, raises :class:`RetryLater` or the error."""
    from .runner import Runner

    Chat, _, _ = _models()
    chat = Chat.objects.get(pk=chat_id)
    run_id = uuid.uuid4().hex
    publish(RunStarted(run_id=run_id, message_id=turn.message_id))
    if chat.cancel_requested:  # cancelled while it waited in the queue
        Chat.objects.filter(pk=chat_id).update(
            status="interrupted", error="", cancel_requested=False, updated_at=Now()
        )
        publish(Interrupt(reason=chat.interrupt_reason or None))
        publish(RunFinished(run_id=run_id, status="interrupted"))
        _close_turn(chat_id, turn)
        return "interrupted"
    runner = Runner(chat)
    runner.history_limit = turn.limit
    if chat.status == "running" and not chat.error:
        runner.started = True  # ask_later marked the run started with its prompt
    try:
        for event in runner.run(stream=True):
            publish(event)
    except Exception as exc:
        error = chat.error or str(exc)[:4000]
        delay = _retry_delay(exc, attempt)
        if delay is not None:
            # the retry is pending: still running (and cancellable) for the user
            Chat.objects.filter(pk=chat_id).update(status="running", updated_at=Now())
            publish(RunFinished(run_id=run_id, status="retrying", error=error))
            logger.info("chat %s: %s; retrying in %.1fs", chat_id, error, delay)
            raise RetryLater(delay, attempt + 1, exc) from exc
        publish(RunFinished(run_id=run_id, status="failed", error=error))
        _close_turn(chat_id, turn)
        raise
    status = _RUN_STATUS.get(chat.status, chat.status)
    publish(RunFinished(run_id=run_id, status=status))
    _close_turn(chat_id, turn)
    return status


def run_chat(
    chat_id: int, reply_to: int | None = None, *, attempt: int = 0, wait: float | None = 0.0
) -> str:
    """The body of :func:`complete_chat`, callable anywhere: take the chat's lock (waiting
    up to ``wait`` seconds, ``None`` forever), then answer the queued prompts in order.

    Returns ``"nothing"`` (no prompt awaits a reply), ``"busy"`` (another run holds the
    chat) or ``"done"``. Raises :class:`RetryLater` on a retryable error with retries left,
    else the error (the chat is then marked failed with its text)."""
    from .locks import ChatLock

    Chat, _, _ = _models()
    if plan(chat_id, reply_to) is None:
        return NOTHING
    try:
        publish = _Publisher(chat_id)
    except ImproperlyConfigured as exc:
        Chat.objects.filter(pk=chat_id).update(status="failed", error=str(exc), updated_at=Now())
        raise
    lock = ChatLock(chat_id, namespace=Chat._meta.db_table)
    if not lock.acquire(wait=wait):
        return BUSY
    try:
        first = True
        while True:
            turn = plan(chat_id, reply_to, first=first, settle=True)
            if turn is None:
                return DONE if not first else NOTHING
            _run_turn(chat_id, turn, attempt, publish)
            first, attempt = False, 0
    finally:
        lock.release()
        publish.flush()


# -- where the task runs ---------------------------------------------------------------
def in_process_mode(app=None) -> str | None:
    """``"thread"`` or ``"inline"`` when tasks run in this process, ``None`` when they go
    to the Celery broker."""
    if app is None:
        from celery import current_app as app
    if app.conf.task_always_eager:
        return "inline"
    setting = settings.TASKS_EAGER_WITHOUT_BROKER
    if not setting:
        return None
    broker = getattr(django_settings, "CELERY_BROKER_URL", None) or app.conf.broker_url
    if broker and not str(broker).startswith("memory://"):
        return None
    return "inline" if setting == "inline" else "thread"


_threads: set[threading.Thread] = set()
_threads_mutex = threading.Lock()


def _call_args(chat_id: int, reply_to: int | None = None, attempt: int = 0):
    return chat_id, reply_to


def run_in_process(chat_id: int, reply_to: int | None = None) -> str | None:
    """Run the task here, retrying in place; errors are logged (the chat records them)."""
    attempt = 0
    try:
        while True:
            try:
                return run_chat(chat_id, reply_to, attempt=attempt, wait=None)
            except RetryLater as later:
                time.sleep(later.countdown)
                attempt = later.attempt
    except Exception:
        logger.exception("the in-process run of chat %s failed", chat_id)
        return None


def _in_thread(chat_id: int, reply_to: int | None) -> None:
    try:
        run_in_process(chat_id, reply_to)
    finally:
        connections.close_all()  # this thread's connections
        with _threads_mutex:
            _threads.discard(threading.current_thread())


def wait_for_background_runs(timeout: float | None = None) -> bool:
    """Wait for the runs started in background threads (no broker configured); returns
    whether they all ended. Handy in tests."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _threads_mutex:
            running = list(_threads)
        if not running:
            return True
        for thread in running:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)
            if thread.is_alive():
                return False


class ChatTask(Task):
    """Sends to the broker, or runs in this process when no broker is configured."""

    def apply_async(self, args=None, kwargs=None, *rest, **options):
        mode = in_process_mode(self.app)
        if mode is None:
            return super().apply_async(args, kwargs, *rest, **options)
        chat_id, reply_to = _call_args(*(args or ()), **(kwargs or {}))
        task_id = options.get("task_id") or uuid.uuid4().hex
        if mode == "inline":
            outcome = run_in_process(chat_id, reply_to)
            return EagerResult(task_id, outcome, "SUCCESS", name=self.name)
        thread = threading.Thread(
            target=_in_thread, args=(chat_id, reply_to), name=f"llmchat-chat-{chat_id}", daemon=True
        )
        with _threads_mutex:
            _threads.add(thread)
        thread.start()
        return EagerResult(task_id, None, "PENDING", name=self.name)


@shared_task(
    bind=True,
    base=ChatTask,
    name="django_llmchat.tasks.complete_chat",
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,  # retries are bounded by LLMCHAT["TASK_MAX_RETRIES"] below
    ignore_result=True,
)
def complete_chat(self, chat_id: int, reply_to: int | None = None, attempt: int = 0) -> str:
    """Answer the chat's queued prompts (``reply_to``: the prompt this task was queued for;
    nothing happens when it has its reply already). ``attempt`` counts the retries after
    provider errors so far."""
    close_old_connections()
    try:
        outcome = run_chat(chat_id, reply_to, attempt=attempt, wait=LOCK_WAIT)
    except RetryLater as later:
        raise self.retry(
            args=(chat_id,),
            kwargs={"reply_to": reply_to, "attempt": later.attempt},
            countdown=later.countdown,
        ) from None
    finally:
        close_old_connections()
    if outcome == BUSY:
        # another task runs this chat: come back when it may be done (waiting longer
        # each time, up to half a minute)
        raise self.retry(
            args=(chat_id,),
            kwargs={"reply_to": reply_to, "attempt": attempt},
            countdown=min(30.0, LOCK_RETRY_DELAY * 2 ** min(self.request.retries or 0, 5)),
        )
    return outcome
