"""Celery tasks: the loop run by workers.

``complete_chat(chat_id, run_id=None)`` answers run ``run_id`` of the chat, after the
runs ahead of it (``Chat.ask_later`` sends it); the end of that run sends the task of the
chat's next queued run, to the back of the queue. It is safe to run twice (a run is
claimed once, through :mod:`django_llmchat.runs`), two processes never work on one chat
at the same time, and a worker killed mid-run loses nothing but the step it was in: the
redelivered task (``acks_late``), the periodic :func:`recover_runs` or ``manage.py
llmchat_recover`` resumes the run from its last stored step once its lease ran out.

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

from celery import Task, shared_task
from celery.result import EagerResult
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, close_old_connections, connections

from . import runs, streams, telemetry
from .conf import settings
from .errors import ProviderError
from .events import StreamEvent
from .loop.attempts import FirstCall
from .loop.run_state import RETRYING
from .loop.runner import Runner
from .loop.runner_admission import claimed_first_call
from .loop.session import RunSession
from .models import Chat, Run
from .models.idempotency import purge_expired_keys

logger = logging.getLogger("django_llmchat.tasks")

__all__ = [
    "complete_chat",
    "in_process_mode",
    "recover_runs",
    "run_chat",
    "wait_for_background_runs",
]

NOTHING, BUSY, PAUSED, DONE = runs.NOTHING, runs.BUSY, runs.PAUSED, "done"


class RetryLater(Exception):
    """Try the task again in ``countdown`` seconds (a retryable error, or a busy chat)."""

    def __init__(self, countdown: float, attempt: int, error: BaseException | None = None):
        self.countdown = countdown
        self.attempt = attempt
        self.error = error
        super().__init__(f"retrying in {countdown:.1f}s" + (f" after: {error}" if error else ""))


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


def _execute(
    execution: runs.Execution, retries: int, publish: _Publisher, runner: Runner | None = None
) -> str:
    """Work on one claimed run, publishing its session's events; returns its final
    status, raises :class:`RetryLater` when a retryable error gave the run back to the
    queue. ``runner``: the one built before the claim (:func:`_made_ready`), else one is
    built now."""
    delay: list[float] = []

    def retry_on(exc: BaseException) -> bool:
        found = _retry_delay(exc, retries)
        if found is not None:
            delay.append(found)
        return found is not None

    session = RunSession(
        build_runner=(
            (lambda: runner)
            if runner is not None
            else lambda: Runner(Chat.objects.get(pk=execution.chat_id))
        ),
        execution=execution,
        retry_on=retry_on,
        publish=publish,
        raise_errors=False,
    )
    for _event in session:
        pass
    run = execution.run
    if session.lost:
        return "lost"
    if session.status == RETRYING:
        logger.info("chat %s: %s; retrying in %.1fs", run.chat_id, session.error, delay[0])
        raise RetryLater(delay[0], retries + 1, session.error) from session.error
    if session.error is not None:
        logger.warning("run %s of chat %s failed: %s", run.pk, run.chat_id, session.error)
    return session.status


def run_chat(
    chat_id: int,
    run_id: int | None = None,
    *,
    attempt: int = 0,
    task_id: str = "",
    drain: bool = True,
) -> str:
    """The body of :func:`complete_chat`, callable anywhere: answer the chat's unfinished
    runs in order, starting with the one ahead of ``run_id`` (a run whose worker died is
    resumed once its lease ran out).

    ``drain=True``: go on with the runs queued after ``run_id`` until none is left (what
    a process answering its own chat's queue does). ``drain=False`` (a Celery worker):
    stop after ``run_id`` (or after the first run, without one), handing the chat's next
    queued run to the back of the broker's queue: its end sends that run's task, so one
    chat's queued runs never hold a thread while other chats' tasks wait.

    Returns ``"nothing"`` (no run to answer), ``"paused"`` (the chat's run waits for a
    tool-call decision) or ``"done"``. Raises :class:`RetryLater` on a retryable error with
    retries left, or when another process is working on the chat (``countdown``: until its
    lease runs out, when it would be taken over)."""
    try:
        publish = _Publisher(chat_id)
    except ImproperlyConfigured as exc:
        found = runs.claim(chat_id, run_id=run_id, task_id=task_id)
        if found.execution is not None:
            found.execution.finish(
                runs.Run.FAILED, error_type="configuration_error", error=str(exc)[:500]
            )
        raise
    first = True
    retries = attempt
    # the run's runner and first call made ready before the claim, which opens the call's
    # attempt: the reply commits twice (the claim, the reply), as one asked in-process
    ready = _made_ready(chat_id) if run_id is not None else None
    while True:
        call = ready[1] if first and ready is not None else None
        found = runs.claim(
            chat_id,
            run_id=run_id if first else None,
            task_id=task_id,
            attempt=call.row if call is not None else None,
            seen=call.seen if call is not None else None,
        )
        runner = _took(ready, found.execution) if first and ready is not None else None
        if found.execution is None:
            if not first:
                return DONE
            if found.state == BUSY:
                # whoever works on the chat answers what is queued after it, or sends
                # its task when it ends; come back when its lease would run out, in
                # case it died
                countdown = (found.retry_in or 0.0) + 0.5
                raise RetryLater(min(countdown, float(settings.RUN_LEASE) + 1.0), retries)
            return found.state
        # the last run this call answers sends the task of the run queued after it when
        # it ends; before it, this loop answers what is queued next itself
        last = not drain and (run_id is None or found.execution.pk >= run_id)
        found.execution.kick_next = last
        try:
            _execute(found.execution, retries, publish, runner)
        finally:
            publish.flush()
        if last:
            return DONE
        first, retries = False, 0


def _made_ready(chat_id: int) -> tuple[Runner, FirstCall | None] | None:
    """The runner of the chat's next run, built before the claim, and the run's first
    call made ready on the path as read now
    (:func:`~django_llmchat.loop.runner_admission.claimed_first_call`): the claim writes the
    call's pending usage row in its own transaction when it starts the run answering the
    path's last prompt, the path unchanged. ``None`` when the runner cannot be built here
    (no such chat, an agent or tool that fails to load): the claim and the session then
    go as they would without it, and tell the error."""
    try:
        runner = Runner(Chat.objects.get(pk=chat_id))
        return runner, claimed_first_call(runner)
    except Exception:  # told by the session that builds it again after the claim
        logger.debug("chat %s: no runner before the claim", chat_id, exc_info=True)
        return None


def _took(ready: tuple[Runner, FirstCall | None], execution: runs.Execution | None):
    """The runner built before the claim, given the run the claim took (``None``: none
    taken), with the first call whose attempt the claim opened; the chat as the claim
    left it."""
    runner, call = ready
    if execution is None:
        return None
    if call is not None and call.row.pk is not None:
        runner.attempts.first = call
        runner.attempts.answering = (call.seen, None, None)
    elif call is not None:
        runner.history = None  # made ready on a path the run does not start from
    runner.chat.status, runner.chat.active_run_id = Run.RUNNING, execution.pk
    return runner


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


def _call_args(
    chat_id: int, run_id: int | None = None, reply_to: int | None = None, attempt: int = 0
) -> tuple[int, int | None]:
    if run_id is None and reply_to is not None:
        run_id = _run_of_prompt(chat_id, reply_to)
    return chat_id, run_id


def _run_of_prompt(chat_id: int, message_id: int) -> int | None:
    """A task sent by an earlier version names the prompt, not the run."""
    return (
        Run.objects.filter(chat_id=chat_id, prompt_id=message_id)
        .order_by("-id")
        .values_list("pk", flat=True)
        .first()
    )


def run_in_process(chat_id: int, run_id: int | None = None) -> str | None:
    """Run the task here, retrying in place; errors are logged (the run records them)."""
    attempt = 0
    try:
        while True:
            try:
                return run_chat(chat_id, run_id, attempt=attempt)
            except RetryLater as later:
                time.sleep(later.countdown)
                attempt = later.attempt
    except Exception:
        logger.exception("the in-process run of chat %s failed", chat_id)
        return None


def _in_thread(chat_id: int, run_id: int | None, trace_context=None) -> None:
    try:
        with telemetry.with_context(trace_context):
            run_in_process(chat_id, run_id)
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
            # the worker's run continues the trace of the code that queued it
            headers = dict(options.get("headers") or {})
            telemetry.inject(headers)
            if headers:
                options["headers"] = headers
            return super().apply_async(args, kwargs, *rest, **options)
        chat_id, run_id = _call_args(*(args or ()), **(kwargs or {}))
        task_id = options.get("task_id") or uuid.uuid4().hex
        if mode == "inline":
            outcome = run_in_process(chat_id, run_id)
            return EagerResult(task_id, outcome, "SUCCESS", name=self.name)
        thread = threading.Thread(
            target=_in_thread,
            args=(chat_id, run_id, telemetry.current_context()),
            name=f"llmchat-chat-{chat_id}",
            daemon=True,
        )
        with _threads_mutex:
            _threads.add(thread)
        thread.start()
        return EagerResult(task_id, None, "PENDING", name=self.name)


@shared_task(
    bind=True,
    base=ChatTask,
    name=runs.COMPLETE_CHAT,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,  # retries are bounded by LLMCHAT["TASK_MAX_RETRIES"] below
    ignore_result=True,
)
def complete_chat(
    self,
    chat_id: int,
    run_id: int | None = None,
    attempt: int = 0,
    reply_to: int | None = None,
) -> str:
    """Answer run ``run_id`` of the chat, after the runs ahead of it (``run_chat`` with
    ``drain=False``): the Celery task ``chat.ask_later()`` sends (its registered name stays
    ``runs.COMPLETE_CHAT``; ``Chat.complete`` and ``Provider.complete`` are other things).
    ``attempt`` counts the retries after provider errors so far;
    ``reply_to`` (a prompt's id) is what tasks of earlier versions sent instead of
    ``run_id``."""
    close_old_connections()
    try:
        chat_id, run_id = _call_args(chat_id, run_id, reply_to)
        with telemetry.with_context(telemetry.task_context(self.request)):
            outcome = run_chat(
                chat_id, run_id, attempt=attempt, task_id=self.request.id or "", drain=False
            )
    except RetryLater as later:
        raise self.retry(
            args=(chat_id,),
            kwargs={"run_id": run_id, "attempt": later.attempt},
            countdown=later.countdown,
        ) from None
    finally:
        close_old_connections()
    return outcome


@shared_task(name="django_llmchat.tasks.recover_runs", ignore_result=True)
def recover_runs() -> int:
    """Send ``complete_chat`` for every run nobody works on although it should be (its
    worker died, or its task was lost): schedule it with Celery beat, e.g. every minute.
    Returns how many runs it found. It also deletes the idempotency keys older than
    ``LLMCHAT["IDEMPOTENCY_TTL"]``."""
    close_old_connections()
    try:
        found = len(runs.recover())
        try:
            purge_expired_keys()
        except Exception as exc:  # the runs were sent: the keys wait for the next time
            logger.warning("could not purge expired idempotency keys: %s", exc)
        return found
    finally:
        close_old_connections()


@shared_task(name="django_llmchat.tasks.apply_retention", ignore_result=True)
def apply_retention() -> int:
    """Delete or anonymise the chats past ``LLMCHAT["RETENTION"]`` (their usage rows
    stay): schedule it with Celery beat, e.g. daily. Returns how many chats it changed."""
    from .chats.retention import apply_retention as apply

    close_old_connections()
    try:
        _, done = apply()
        return sum(done.values())
    finally:
        close_old_connections()
