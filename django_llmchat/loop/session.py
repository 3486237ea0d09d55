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
  (``LLMCHAT["TITLES"]``, :mod:`django_llmchat.chats.titles`) before the iteration ends;
- a session closed before its end (a dropped stream) ends the run ``cancelled`` and, when
  it publishes, sends that ``RunFinished`` to the chat's event stream, so every follower
  learns the end.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from django.db.models import OuterRef, Subquery

from .. import signals, telemetry
from ..errors import ChatBusyError, RunLostError, safe_error
from ..events import GuardrailTripwire, RunFinished, RunStarted, StreamEvent
from ..models import Message, Run
from ..streams import EventsUnavailable
from ..values import usd_text
from .run_state import BLOCKED, RETRYING, End, Outcome, Phase

if TYPE_CHECKING:
    from ..runs import Execution
    from .runner import Runner

__all__ = ["BLOCKED", "RETRYING", "Blocked", "RunSession", "run_finished"]

logger = logging.getLogger("django_llmchat.loop.runner")


class Blocked(Exception):
    """A before-guardrail blocked the prompt."""

    def __init__(self, event: GuardrailTripwire):
        self.event = event
        super().__init__(event.reason or "blocked")


class RunSession:
    """The event sequence of one run of ``runner``'s chat: the run's whole life, from its
    admission through its turn and its loop to its end and its terminal event.

    One of: a new ``prompt`` (with ``attachments``; ``None`` continues the saved history),
    ``regenerate=True`` (the last prompt answered again), ``resume`` (a run queued again
    after its tool-call decisions) or ``execution`` (a run a worker claimed). ``runner``
    may be ``None`` with ``build_runner``, a function building it (a claimed run whose
    runner cannot be built here ends ``failed``). The runner is the loop (its steps,
    provider attempts and tool runs): the session drives it through its public methods.

    ``publish(event)`` (optional) is called with every event before it is yielded, and
    with the terminal event of a session closed early; what it returns is
    :attr:`last_id`. ``raise_errors``: an error ending the run is raised after its
    ``RunFinished`` (the Python API) rather than only kept in :attr:`error` (the
    streams and the task, which report it themselves). ``totals=False``: the
    ``RunFinished`` leaves out the last message, tokens and cost (no queries; ``ask()``,
    which returns the message, has no reader for them). ``later=True``: :meth:`admit`
    queues the run for a worker, its task sent when the transaction commits
    (``Chat.ask_later``); such a session is only admitted, never iterated.

    Its state is typed: :attr:`phase` (:class:`~django_llmchat.loop.run_state.Phase`) and,
    once the run ended, :attr:`outcome` (:class:`~django_llmchat.loop.run_state.Outcome`),
    decided in one place whatever ended it.

    Iterating it (or :meth:`admit`) stores the prompt with its run, through the gate;
    nothing happens before."""

    def __init__(
        self,
        runner: Runner | None = None,
        prompt: str | None = None,
        attachments: list[tuple] | None = None,
        *,
        regenerate: bool = False,
        resume: Run | None = None,
        execution: Execution | None = None,
        stream: bool = True,
        retry_on: Callable[[BaseException], bool] | None = None,
        publish: Callable[[StreamEvent], object] | None = None,
        raise_errors: bool = True,
        build_runner: Callable[[], Runner] | None = None,
        totals: bool = True,
        later: bool = False,
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
        self.later = later
        self.phase = Phase.NEW
        self.blocked: GuardrailTripwire | None = None
        self.outcome: Outcome | None = None
        """How the run ended, once it did."""
        self.last_id: object = None
        self._pre: list[StreamEvent] = []
        self._events: Iterator[StreamEvent] | None = None

    # -- the state ----------------------------------------------------------------------------
    @property
    def admitted(self) -> bool:
        return self.phase is not Phase.NEW

    @property
    def status(self) -> str | None:
        """The terminal status, once the session ended."""
        return self.outcome.status if self.outcome is not None else None

    @property
    def error(self) -> BaseException | None:
        """The error that ended the run (a failed or retrying run), if any."""
        return self.outcome.error if self.outcome is not None else None

    @property
    def finished(self) -> RunFinished | None:
        """The terminal event, once yielded (or published after an early close)."""
        return self.outcome.event if self.outcome is not None else None

    @property
    def lost(self) -> bool:
        """The run was taken over by another process: it tells the run's end, not this."""
        return self.outcome is not None and self.outcome.end is End.LOST

    # -- the runner and its run -----------------------------------------------------------
    @property
    def runner(self) -> Runner:
        if self._runner is None:
            if self._build_runner is None:
                raise RuntimeError("a RunSession needs a runner or build_runner")
            self._runner = self._build_runner()
        return self._runner

    @property
    def run(self) -> Run | None:
        """The run (``None`` before admission, or when a guardrail blocked the prompt)."""
        if self._runner is not None:
            return self._runner.run_row
        return self.execution.run if self.execution is not None else None

    def admit(self) -> RunSession:
        """Store the prompt with its run now, through the gate
        (:func:`django_llmchat.runs.enqueue`):
        :class:`~django_llmchat.errors.BudgetExceededError` over a limit,
        :class:`~django_llmchat.errors.ChatBusyError` when the chat cannot take it, and
        nothing stored. A blocked prompt stores nothing and the session tells it. Waiting
        for the run's turn is left to the iteration."""
        if self.phase is not Phase.NEW:
            return self
        if self.execution is None and self.resume is None:
            runner = self.runner
            try:
                self._pre = runner.admit(
                    self.prompt, self.attachments, regenerate=self.regenerate, later=self.later
                )
            except Blocked as exc:
                self.blocked = exc.event
                runner.blocked(exc.event)
        self.phase = Phase.ADMITTED
        return self

    # -- iterating --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        if self.later:
            raise TypeError("a run admitted later is a worker's to run: it is not iterated")
        if self._events is None:
            self._events = self._sequence()
        return next(self._events)

    def close(self) -> None:
        """End the session: a run it began ends ``cancelled`` (its usage rows kept), one
        admitted but not begun is cancelled; either way followers are told. A run
        admitted ``later`` is the worker's: closing leaves it queued."""
        if self.later:
            return
        if self._events is not None:
            self._events.close()
        if self.phase is Phase.ADMITTED:
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

    # -- the end: one place decides it -------------------------------------------------------
    def _end(
        self,
        end: End,
        exc: BaseException | None = None,
        *,
        event: bool = True,
        publish: bool = True,
    ) -> RunFinished | None:
        """Decide how the run ended, once: its terminal status from ``end`` (how it
        ended) and what the run stored, the error ``exc`` that ended it, and its terminal
        ``RunFinished`` (``event=False``: none is made, the status alone is kept), emitted
        (``publish=False``: not published). A failed run sends ``run_failed``. Returns
        the terminal event (``None`` without one); a second call returns the first's."""
        if self.outcome is not None:
            return self.outcome.event
        self.phase = Phase.ENDED
        run = self.run
        execution = self._runner.execution if self._runner is not None else None
        stored = execution.outcome if execution is not None else None
        if end is End.BLOCKED:
            status: str | None = BLOCKED
        elif end is End.LOOP_DONE:
            status = stored or (run.status if run is not None else None)
        elif end is End.LOOP_FAILED:
            status = RETRYING if stored == Run.QUEUED else stored or Run.FAILED
        elif end is End.CLOSED:
            status = stored or Run.CANCELLED
        elif end is End.UNSTARTED:
            status = Run.CANCELLED
        elif end is End.BEFORE_TURN:
            assert run is not None
            run.refresh_from_db(fields=["status", "error_type", "error"])
            status = run.status
        elif end is End.CANNOT_START:
            status = Run.FAILED
        else:  # End.LOST: the process that took the run over tells its end
            status = None
        self.outcome = Outcome(end, status, exc)
        if status is None or not event:
            return None
        error_type, error = safe_error(exc) if exc is not None else (None, None)
        if status == Run.FAILED and run is not None and run.pk is not None:
            self._tell_failed(run.pk, run.chat_id, error, error_type)
        if run is None or run.pk is None or not self.totals:
            if error is None and run is not None and run.error:
                error, error_type = run.error, error_type or run.error_type or None
            finished = RunFinished(
                run_id=self._run_id(), status=status, error=error, error_type=error_type
            )
        else:
            finished = run_finished(run.pk, status, error, error_type)
        self.outcome = Outcome(end, status, exc, finished)
        self._emit(finished, publish=publish)
        return finished

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

    # -- the run's life -----------------------------------------------------------------------
    def _sequence(self) -> Iterator[StreamEvent]:
        try:
            runner = self.runner
        except Exception as exc:  # a claimed run that cannot go on here (agent, tools gone)
            yield from self._cannot_start(exc)
            return
        self.admit()
        self.phase = Phase.BEGUN
        if self.blocked is not None:
            yield self._emit(self.blocked)
            yield self._end(End.BLOCKED)
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
            runner.remember()

    def _loop(self, runner: Runner) -> Iterator[StreamEvent]:
        from ..chats.titles import title_with_reply

        # an untitled chat's prompt title goes with its reply (no statement of its own)
        runner.reply_title = title_with_reply
        span = telemetry.start_run(runner, self.trace_parent)
        try:
            yield from self._told(runner)
        finally:
            error_type = safe_error(self.error)[0] if self.error is not None else None
            telemetry.end_run(span, self.status or ("lost" if self.lost else None), error_type)

    def _told(self, runner: Runner) -> Iterator[StreamEvent]:
        run = runner.run_row
        assert run is not None
        events = runner.run(stream=self.stream, pre_events=self._pre, retry_on=self.retry_on)
        try:
            yield self._emit(RunStarted(run_id=str(run.pk), message_id=run.prompt_id))
            for event in events:
                yield self._emit(event)
        except RunLostError:
            self._end(End.LOST)
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
                runner.cancel_before_loop()
            else:
                events.close()  # the loop ends the run cancelled, its usage rows kept
            self._closed_early()
            raise
        except Exception as exc:
            yield self._end(End.LOOP_FAILED, exc)
            self._title(runner)
            if self.raise_errors:
                raise
            return
        yield self._end(End.LOOP_DONE)
        self._title(runner)

    def _title(self, runner: Runner) -> None:
        """After the terminal event (never delaying it): an untitled chat whose run stored
        a reply gets its title (:mod:`django_llmchat.chats.titles`)."""
        if self.status != RETRYING and runner.result.message is not None:
            from ..chats.titles import title_chat

            title_chat(runner)

    def _closed_early(self) -> None:
        """The consumer left before the end: the loop ended the run ``cancelled``; the
        terminal event never went out, so it goes to the followers here."""
        try:
            self._end(End.CLOSED, event=self.publish is not None)
        except Exception:  # the run's end is stored; followers fall back on their timeout
            logger.exception("could not tell the end of run %s", self._run_id())

    def _ended_before_turn(self, exc: BaseException) -> Iterator[StreamEvent]:
        run = self.run
        assert run is not None
        yield self._emit(RunStarted(run_id=str(run.pk), message_id=run.prompt_id), publish=False)
        yield self._end(End.BEFORE_TURN, exc, publish=False)
        if self.raise_errors:
            raise exc

    def _cannot_start(self, exc: BaseException) -> Iterator[StreamEvent]:
        execution = self.execution
        assert execution is not None
        error_type, error = safe_error(exc)
        logger.exception("run %s of chat %s cannot start", execution.pk, execution.chat_id)
        execution.finish(Run.FAILED, error_type=error_type, error=error)
        yield self._emit(RunStarted(run_id=str(execution.pk), message_id=execution.run.prompt_id))
        yield self._end(End.CANNOT_START, exc)
        if self.raise_errors:
            raise exc

    def _cancel_unstarted(self) -> None:
        """Admitted, never iterated: the run ends cancelled, and its followers are told
        (here for a run this process held, by :mod:`django_llmchat.runs` for a queued
        one)."""
        run = self.run
        if run is None or run.pk is None or self._runner is None:
            return
        if self._runner.cancel_before_loop():
            self._end(End.UNSTARTED)


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
