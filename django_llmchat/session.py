"""One run session: a run's whole event sequence, from ``RunStarted`` to one terminal
``RunFinished``.

Every driver of a run iterates a :class:`RunSession` and only encodes or publishes what
it yields: ``Chat.ask``/``Chat.stream`` (the Python API), the inline SSE stream of
``POST messages/``, the ``ui/chat`` stream and the Celery task. So every run is told the
same way, whoever drives it:

- a prompt refused at the door (a spending limit, a busy chat) raises before anything is
  yielded, and nothing is stored;
- a prompt a before-guardrail blocked yields its ``GuardrailTripwire`` and
  ``RunFinished(status="blocked")``;
- any other run yields ``RunStarted``, the loop's events, then one ``RunFinished`` with
  the run's status (``succeeded``, ``failed``, ``cancelled``, ``interrupted``,
  ``awaiting_approval``, or ``retrying`` when a task gives it back to the queue), its
  error, last message, tokens and cost;
- after the terminal event, an untitled chat whose run stored a reply gets its title
  (``LLMCHAT["TITLES"]``, :mod:`django_llmchat.titles`) before the iteration ends;
- a session closed before its end (a dropped stream) ends the run ``cancelled`` and, when
  it publishes, sends that ``RunFinished`` to the chat's event stream, so every follower
  learns the end.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any

from django.db.models import OuterRef, Subquery

from . import signals, telemetry
from .errors import ChatBusyError, RunLostError, safe_error
from .events import GuardrailTripwire, RunFinished, RunStarted, StreamEvent
from .models import Message, Run
from .streams import EventsUnavailable
from .values import usd_text

__all__ = ["Blocked", "RunSession", "run_finished"]

logger = logging.getLogger("django_llmchat.runner")

RETRYING = "retrying"
BLOCKED = "blocked"


class Blocked(Exception):
    """A before-guardrail blocked the prompt."""

    def __init__(self, event: GuardrailTripwire):
        self.event = event
        super().__init__(event.reason or "blocked")


class RunSession:
    """The event sequence of one run of ``runner``'s chat.

    One of: a new ``prompt`` (with ``attachments``; ``None`` continues the saved history),
    ``regenerate=True`` (the last prompt answered again), ``resume`` (a run queued again
    after its tool-call decisions) or ``execution`` (a run a worker claimed). ``runner``
    may be ``None`` with ``build_runner``, a function building it (a claimed run whose
    runner cannot be built here ends ``failed``).

    ``publish(event)`` (optional) is called with every event before it is yielded, and
    with the terminal event of a session closed early; what it returns is
    :attr:`last_id`. ``raise_errors``: an error ending the run is raised after its
    ``RunFinished`` (the Python API) rather than only kept in :attr:`error` (the
    streams and the task, which report it themselves). ``totals=False``: the
    ``RunFinished`` leaves out the last message, tokens and cost (no queries; ``ask()``,
    which returns the message, has no reader for them).

    Iterating it (or :meth:`admit`) stores the prompt with its run, through the gate;
    nothing happens before."""

    def __init__(
        self,
        runner: Any = None,
        prompt: str | None = None,
        attachments: list[tuple] | None = None,
        *,
        regenerate: bool = False,
        resume: Run | None = None,
        execution: Any = None,
        stream: bool = True,
        retry_on: Callable[[BaseException], bool] | None = None,
        publish: Callable[[StreamEvent], Any] | None = None,
        raise_errors: bool = True,
        build_runner: Callable[[], Any] | None = None,
        totals: bool = True,
    ):
        self._runner = runner
        self._build_runner = build_runner
        self.totals = totals
        self.trace_parent = telemetry.current_context()  # the run's span is its child
        self.prompt = prompt
        self.attachments = attachments or []
        self.regenerate = regenerate
        self.resume = resume
        self.execution = execution
        self.stream = stream
        self.retry_on = retry_on
        self.publish = publish
        self.raise_errors = raise_errors
        self.admitted = False
        self.blocked: GuardrailTripwire | None = None
        self.status: str | None = None
        """The terminal status, once the session ended."""
        self.error: BaseException | None = None
        """The error that ended the run (a failed or retrying run), if any."""
        self.finished: RunFinished | None = None
        """The terminal event, once yielded (or published after an early close)."""
        self.lost = False
        """The run was taken over by another process: it tells the run's end, not this."""
        self.last_id: Any = None
        self._pre: list[StreamEvent] = []
        self._events: Iterator[StreamEvent] | None = None
        self._began = False

    # -- the runner and its run -----------------------------------------------------------
    @property
    def runner(self):
        if self._runner is None:
            self._runner = self._build_runner()
        return self._runner

    @property
    def run(self) -> Run | None:
        """The run (``None`` before admission, or when a guardrail blocked the prompt)."""
        return getattr(self._runner, "run_row", None)

    def admit(self) -> RunSession:
        """Store the prompt with its run now, through the gate
        (:func:`django_llmchat.runs.enqueue`):
        :class:`~django_llmchat.errors.BudgetExceededError` over a limit,
        :class:`~django_llmchat.errors.ChatBusyError` when the chat cannot take it, and
        nothing stored. A blocked prompt stores nothing and the session tells it. Waiting
        for the run's turn is left to the iteration."""
        if self.admitted:
            return self
        if self.execution is None and self.resume is None:
            runner = self.runner
            try:
                self._pre = runner.admit(self.prompt, self.attachments, regenerate=self.regenerate)
            except Blocked as exc:
                self.blocked = exc.event
                runner._blocked_run(exc.event)
        self.admitted = True
        return self

    # -- iterating --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        if self._events is None:
            self._events = self._sequence()
        return next(self._events)

    def close(self) -> None:
        """End the session: a run it began ends ``cancelled`` (its usage rows kept), one
        admitted but not begun is cancelled; either way followers are told."""
        if self._events is not None:
            self._events.close()
        if not self._began:
            self._cancel_unstarted()

    def _emit(self, event: StreamEvent, *, publish: bool = True) -> StreamEvent:
        self.last_id = None
        if publish and self.publish is not None:
            try:
                self.last_id = self.publish(event)
            except Exception as exc:  # the reply goes on without followers
                if not isinstance(exc, EventsUnavailable):  # that one is logged once
                    logger.warning("could not publish an event of run %s: %s", self._run_id(), exc)
        return event

    def _end(self, status: str, *, publish: bool = True, **known: Any) -> StreamEvent:
        self.status = status
        run = self.run
        if status == Run.FAILED and run is not None and run.pk is not None:
            self._tell_failed(run.pk, run.chat_id, known.get("error"), known.get("error_type"))
        if run is None or run.pk is None or not self.totals:
            error, error_type = known.get("error"), known.get("error_type")
            if error is None and run is not None and run.error:
                error, error_type = run.error, error_type or run.error_type or None
            event = RunFinished(
                run_id=self._run_id(), status=status, error=error, error_type=error_type
            )
        else:
            event = run_finished(run.pk, status, known.get("error"), known.get("error_type"))
        self.finished = event
        return self._emit(event, publish=publish)

    @staticmethod
    def _tell_failed(run_id: int, chat_id: int, error, error_type) -> None:
        if error is None:  # the run's own (a guardrail's block, a limit)
            error, error_type = Run.objects.filter(pk=run_id).values_list(
                "error", "error_type"
            ).first() or (None, None)
        signals.send_after_commit(
            signals.run_failed, run_id=run_id, chat_id=chat_id, error_type=error_type, error=error
        )

    def _run_id(self) -> str:
        run = self.run
        return str(run.pk) if run is not None and run.pk is not None else ""

    def _sequence(self) -> Iterator[StreamEvent]:
        self._began = True
        try:
            runner = self.runner
        except Exception as exc:  # a claimed run that cannot go on here (agent, tools gone)
            yield from self._cannot_start(exc)
            return
        self.admit()
        if self.blocked is not None:
            yield self._emit(self.blocked)
            yield self._end(BLOCKED)
            return
        try:
            if self.execution is not None:
                runner.take(self.execution)
            elif self.resume is not None:
                runner.resume(self.resume)
            else:
                runner.take_turn()
        except (RunLostError, ChatBusyError) as exc:
            # the run ended before its turn came (cancelled while queued, a paused run
            # ahead of it): whoever ended it told the followers
            yield from self._ended_before_turn(exc)
            return
        runner.chat.last_run = runner.run_row
        try:
            yield from self._loop(runner)
        finally:
            runner._remember()

    def _loop(self, runner) -> Iterator[StreamEvent]:
        span = telemetry.start_run(runner, self.trace_parent)
        try:
            yield from self._told(runner)
        finally:
            error_type = safe_error(self.error)[0] if self.error is not None else None
            telemetry.end_run(span, self.status or ("lost" if self.lost else None), error_type)

    def _told(self, runner) -> Iterator[StreamEvent]:
        run = runner.run_row
        events = runner.run(stream=self.stream, pre_events=self._pre, retry_on=self.retry_on)
        try:
            yield self._emit(RunStarted(run_id=str(run.pk), message_id=run.prompt_id))
            for event in events:
                yield self._emit(event)
        except RunLostError:
            self.lost = True
            logger.warning("run %s was taken over by another process", self._run_id())
            signals.send_after_commit(
                signals.run_lost, run_id=run.pk, chat_id=run.chat_id, worker=run.worker
            )
            if self.raise_errors:
                raise
            return
        except GeneratorExit:
            if inspect.getgeneratorstate(events) == inspect.GEN_CREATED:
                # closed at run_started: the loop never began, the run ends here
                runner.discard_first_call()
                runner.execution.finish(Run.CANCELLED, interrupt_reason="stream_closed")
            else:
                events.close()  # the loop ends the run cancelled, its usage rows kept
            self._closed_early(runner)
            raise
        except Exception as exc:
            self.error = exc
            error_type, error = safe_error(exc)
            status = runner.execution.outcome if runner.execution is not None else None
            if status == Run.QUEUED:
                status = RETRYING
            yield self._end(status or Run.FAILED, error=error, error_type=error_type)
            self._title(runner)
            if self.raise_errors:
                raise
            return
        yield self._end(runner.execution.outcome or runner.run_row.status)
        self._title(runner)

    def _title(self, runner) -> None:
        """After the terminal event (never delaying it): an untitled chat whose run stored
        a reply gets its title (:mod:`django_llmchat.titles`)."""
        if self.status != RETRYING and runner.result.message is not None:
            from .titles import title_chat

            title_chat(runner)

    def _closed_early(self, runner) -> None:
        """The consumer left before the end: the loop ended the run ``cancelled``; the
        terminal event never went out, so it goes to the followers here."""
        if self.finished is not None:
            return
        execution = runner.execution
        status = (execution.outcome if execution is not None else None) or Run.CANCELLED
        self.status = status
        if self.publish is None:
            return
        try:
            self._end(status)
        except Exception:  # the run's end is stored; followers fall back on their timeout
            logger.exception("could not tell the end of run %s", self._run_id())

    def _ended_before_turn(self, exc: BaseException) -> Iterator[StreamEvent]:
        run = self.run
        self.error = exc
        error_type, error = safe_error(exc)
        run.refresh_from_db(fields=["status", "error_type", "error"])
        yield self._emit(RunStarted(run_id=str(run.pk), message_id=run.prompt_id), publish=False)
        yield self._end(run.status, publish=False, error=error, error_type=error_type)
        if self.raise_errors:
            raise exc

    def _cannot_start(self, exc: BaseException) -> Iterator[StreamEvent]:
        execution = self.execution
        self.error = exc
        error_type, error = safe_error(exc)
        logger.exception("run %s of chat %s cannot start", execution.pk, execution.chat_id)
        execution.finish(Run.FAILED, error_type=error_type, error=error)
        self._tell_failed(execution.pk, execution.chat_id, error, error_type)
        run_id = str(execution.pk)
        yield self._emit(RunStarted(run_id=run_id, message_id=execution.run.prompt_id))
        self.status = Run.FAILED
        self.finished = run_finished(execution.pk, Run.FAILED, error, error_type)
        yield self._emit(self.finished)
        if self.raise_errors:
            raise exc

    def _cancel_unstarted(self) -> None:
        """Admitted, never iterated: the run ends cancelled, and its followers are told
        (here for a run this process held, by :mod:`django_llmchat.runs` for a queued
        one)."""
        from . import runs

        run = self.run
        if not self.admitted or run is None or run.pk is None:
            return
        self._runner.discard_first_call()
        execution = self._runner.execution
        if execution is None:
            runs.cancel_queued(run.chat_id, run.pk, reason="stream_closed")
        elif not execution.done and execution.finish(
            Run.CANCELLED, interrupt_reason="stream_closed"
        ):
            self._end(Run.CANCELLED)


def run_finished(
    run_id: int | str, status: str, error: str | None = None, error_type: str | None = None
) -> RunFinished:
    """The ``RunFinished`` event of run ``run_id``, with the last message it stored and
    its token and USD totals over every attempt (one query); the safe error and its type
    are the run's when not given (a run stopped by a spending limit says so)."""
    last = (
        Message.objects.filter(run_id=OuterRef("pk"))
        .exclude(role="user")
        .order_by("-position", "-id")
        .values("pk")[:1]
    )
    run = (
        Run.objects.filter(pk=run_id).with_totals().annotate(_last=Subquery(last)).first()
        if run_id
        else None
    )
    if run is None:
        return RunFinished(
            run_id=str(run_id or ""), status=status, error=error, error_type=error_type
        )
    if error is None and run.error:
        error, error_type = run.error, error_type or run.error_type or None
    elif error is not None and error_type is None:
        error_type = run.error_type or None
    return RunFinished(
        run_id=str(run.pk),
        status=status,
        error=error,
        error_type=error_type,
        message_id=run._last,
        token_usage=run.tokens,
        cost=usd_text(run.cost().total),
        estimated=True if run.estimated else None,
    )
