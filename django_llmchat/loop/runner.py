"""The agent loop: transcript -> provider -> events -> one transaction per step.

``Runner(chat).run(stream=True)`` is a generator of stream events. Each provider response
is saved when it ends (assistant message, tool calls, citations, usage link) in one
transaction; tool calls then run and their results are saved; the loop goes on until the
model stops calling tools, ``max_steps`` is reached, or the run is interrupted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import runs
from ..agents import Agent, load_agent
from ..conf import settings
from ..context import Context
from ..errors import (
    ArgumentError,
    InterruptError,
    RunLostError,
    safe_error,
)
from ..events import GuardrailTripwire, Interrupt, StreamEvent
from ..guardrails import AFTER, BEFORE, as_guardrail, screen
from ..models import Chat, Message, Run, ToolCall, branches
from ..models.llm_model import model_limits
from ..providers import get_provider
from ..providers.types import ProviderMessage, ProviderRequest
from ..skills import SkillsContext, load_skills
from ..tools import Tool, get_tools
from .attempts import ProviderAttempts
from .history import History
from .runner_admission import admit
from .runner_budget import RunBudget
from .runner_request import provider_request
from .session import Blocked, RunSession
from .toolrun import ToolRunner
from .transcript import (
    last_reported_step,
    load_history,
    provider_message,
    remember_answered,
)

logger = logging.getLogger("django_llmchat.loop.runner")


@dataclass
class RunResult:
    """What a finished run produced."""

    message: Message | None = None
    """The last assistant message stored in this run."""
    interrupt: Interrupt | None = None
    tripwire: GuardrailTripwire | None = None
    steps: int = 0
    events: list[StreamEvent] = field(default_factory=list)


class Runner:
    """Runs the loop for one chat. Build one per run.

    The loop's parts are collaborators it holds: :attr:`attempts` (the provider calls,
    :class:`~django_llmchat.loop.attempts.ProviderAttempts`), :attr:`tool_runs` (the tool
    calls, :class:`~django_llmchat.loop.toolrun.ToolRunner`) and :attr:`budget` (the spending
    limits, :class:`~django_llmchat.loop.runner_budget.RunBudget`). A
    :class:`~django_llmchat.loop.session.RunSession` drives it through its public methods."""

    def __init__(
        self,
        chat: Chat,
        *,
        context: dict[str, Any] | None = None,
        provider=None,
        keep_events: bool = False,
    ):
        self.chat = chat
        self.agent: Agent | None = load_agent(chat.agent) if chat.agent else None
        self._provider = provider
        self.context = Context({**(chat.context or {}), **(context or {})})
        self.result = RunResult()
        self.keep_events = keep_events
        # what a new prompt does while a run of the chat is unfinished (runs.policy;
        # None: the context's, the chat's, LLMCHAT["DOUBLE_TEXTING"])
        self.double_texting: str | None = None
        # ``Message.raw`` of the prompt :meth:`admit` stores (the AI SDK's client id of
        # the message, kept with its row), or ``None``
        self.prompt_raw: dict[str, Any] | None = None
        self.max_steps = (
            self.agent.max_steps if self.agent and self.agent.max_steps else settings.MAX_STEPS
        )
        self.guardrails = [as_guardrail(g) for g in (self.agent.guardrails if self.agent else [])]
        self.tools: dict[str, Tool] = {}
        for item in list(chat.tools or []) + list(self.agent.tools if self.agent else []):
            for found in get_tools(item, chat=chat, context=self.context):
                self.tools[found.name] = found
        skills = self.agent.skills if self.agent else []
        if skills:
            self.context.skills = (
                skills if isinstance(skills, SkillsContext) else load_skills(list(skills))
            )
        self.run_row: Run | None = None  # the run, once admitted or taken
        self.prompt: Message | None = None  # the prompt the admission stored, if any
        self.execution: runs.Execution | None = None
        self.trace_context = None  # the run's span's context (telemetry)
        # ``retry_on(exc)``: whether a failed run goes back to the queue (a task retries it)
        self.retry_on: Any = None
        self.holds_text = any(AFTER in g.phases for g in self.guardrails)
        self.history: History | None = None
        self.budget = RunBudget(chat)  # its spending limits, checked before each call
        # tool calls this run stored (or found) and has not answered yet
        self.unanswered: list[ToolCall] = []
        self.attempts = ProviderAttempts(self)
        self.tool_runs = ToolRunner(self)
        # ``reply_title(runner)``: the title the run's last reply is stored with (an
        # untitled chat's automatic title, a ``chats.titles.ReplyTitle``), or ``None``
        # (its driver sets it)
        self.reply_title: Any = None

    # -- setup ----------------------------------------------------------------------------
    @property
    def provider(self):
        if self._provider is None:
            self._provider = get_provider(self.chat.provider)
        return self._provider

    def check_prompt(self, text: str) -> tuple[str, list[StreamEvent]]:
        """Run the before-guardrails on a prompt: returns the (maybe transformed) text and the
        events; a block raises :class:`Blocked`."""
        text, events, tripwire = screen(self.guardrails, text, BEFORE, self.context)
        if tripwire is not None:
            raise Blocked(tripwire)
        return text, events

    def request_for(self, history: list[ProviderMessage]) -> ProviderRequest:
        """The provider request of one step on ``history``
        (:func:`~django_llmchat.loop.runner_request.provider_request`)."""
        return provider_request(self, history)

    # -- starting -------------------------------------------------------------------------
    def begin(self, prompt: str | None, attachments: list[tuple] | None = None) -> list:
        """Store ``prompt`` (after the before-guardrails) with a run answering it, and take
        the run (waiting for the runs ahead of it); returns the guardrails' events. A
        blocked prompt raises :class:`Blocked` and stores nothing."""
        events = self.admit(prompt, attachments)
        self.take_turn()
        return events

    def admit(
        self,
        prompt: str | None,
        attachments: list[tuple] | None = None,
        *,
        regenerate: bool = False,
        later: bool = False,
    ) -> list:
        """The first half of :meth:`begin`: store ``prompt`` with its run through the gate
        (:func:`django_llmchat.runs.enqueue`: over a limit
        :class:`~django_llmchat.errors.BudgetExceededError`, nothing stored), without
        waiting for its turn. ``regenerate``: answer the last prompt again instead.
        ``later``: the run is queued for a worker, whose task is sent when the
        transaction commits (:meth:`ask_later`). A blocked prompt raises
        :class:`Blocked` and stores nothing. The stored prompt is :attr:`prompt`."""
        return admit(self, prompt, attachments, regenerate=regenerate, later=later)

    def take_turn(self) -> None:
        """The second half of :meth:`begin`: wait until the admitted run is this
        caller's to work on."""
        if self.execution is None:
            self.execution = runs.wait_for_turn(self.run_row)

    def resume(self, run: Run) -> None:
        """Take ``run`` (queued again after a tool-call decision) to continue it here."""
        self.run_row = run
        self.execution = runs.wait_for_turn(run)

    def take(self, execution: runs.Execution) -> None:
        """Work on a run claimed elsewhere (a worker's :func:`~django_llmchat.runs.claim`)."""
        self.execution, self.run_row = execution, execution.run

    # -- the loop -------------------------------------------------------------------------
    def run(
        self,
        *,
        stream: bool = True,
        pre_events: list[StreamEvent] | None = None,
        retry_on: Any = None,
    ):
        """Generator of the loop's events; ``self.result`` holds the outcome when it ends.
        ``retry_on(exc)``: whether a run failing with ``exc`` goes back to the queue (a
        task retries it) rather than ending ``failed``. Drivers iterate a
        :class:`~django_llmchat.loop.session.RunSession`, which frames these events."""
        if self.execution is None:
            raise RuntimeError("Runner.run() needs a run: call begin() or resume() first")
        if retry_on is not None:
            self.retry_on = retry_on
        for event in self._run(stream=stream, pre_events=pre_events or []):
            if self.keep_events:
                self.result.events.append(event)
            yield event

    def _run(self, *, stream: bool, pre_events: list[StreamEvent]) -> Iterator[StreamEvent]:
        chat, execution = self.chat, self.execution
        assert execution is not None
        # what the run ends with when the loop leaves: (status, error_type, error, reason)
        outcome: tuple[str, str, str, str] | None = None
        try:
            yield from pre_events
            history, pending_ids = self._read_history()
            # read only if a tool or callback asks: the sum is over every usage row
            self.context.defer_token_usage(lambda: _none_if_empty(chat.tokens))
            pending = (
                list(ToolCall.objects.filter(pk__in=pending_ids).order_by("id"))
                if pending_ids
                else []
            )
            steps = execution.run.steps
            # calls a process that died left unanswered may have run: never again
            again = not execution.taken_over
            self.unanswered = list(pending)
            while True:
                if pending:
                    stop = yield from self.tool_runs.run(pending, history, again=again)
                    if stop is not None:
                        self.result.interrupt = stop
                        yield stop
                        outcome = (
                            (Run.AWAITING_APPROVAL, "", "", "")
                            if stop.reason == "approval_required"
                            else (Run.INTERRUPTED, "", "", stop.reason or "")
                        )
                        return
                    pending, again = [], True
                if steps:
                    execution.poll(force=True)
                outcome = yield from self._over_limits(steps)
                if outcome is not None:
                    return
                response = yield from self.attempts.step(stream=stream)
                steps += 1
                self.result.steps = steps
                if response is None:  # blocked by an after-guardrail
                    outcome = (
                        Run.FAILED,
                        "guardrail_tripwire",
                        "A guardrail blocked the reply.",
                        "",
                    )
                    return
                message, calls = response
                history.append(provider_message(message, calls=calls, attachments=[]))
                try:
                    if self.agent is not None:
                        self.agent.on_message(message, self.context)
                except InterruptError as exc:
                    event = Interrupt(reason=exc.reason)
                    self.result.interrupt = event
                    yield event
                    outcome = (Run.INTERRUPTED, "", "", exc.reason or "")
                    return
                if not calls:  # stored with the step: the run succeeded
                    if steps == 1:
                        self._remember_answer(history[-1], message)
                    return
                pending = calls
        except runs.CancelRequested as exc:
            event = Interrupt(reason=exc.reason)
            self.result.interrupt = event
            status = runs.stop_status(exc.reason)
            outcome = (status, "", "", exc.reason or "")
            yield event
        except RunLostError:
            raise
        except GeneratorExit:
            # the stream was closed or dropped before its end
            outcome = (Run.CANCELLED, "", "", "stream_closed")
            raise
        except Exception as exc:
            outcome = self._failure(exc)
            raise
        finally:
            self.attempts.discard_first_call()
            self._keep_caller_data()
            self._end(outcome)

    def _over_limits(self, steps: int):
        """Whether the run stops before its next step: at ``max_steps`` or over a
        spending limit (the interrupt yielded, the outcome returned), else ``None``."""
        if steps >= self.max_steps:
            event = Interrupt(reason="max_steps")
            self.result.interrupt = event
            yield event
            return (Run.INTERRUPTED, "", "", "max_steps")
        exceeded = yield from self.budget.check()
        if exceeded is not None:  # the steps paid for so far are stored
            event = Interrupt(reason="budget")
            self.result.interrupt = event
            yield event
            return (Run.INTERRUPTED, "budget", exceeded.message, "budget")
        return None

    def _read_history(self) -> tuple[list[ProviderMessage], list[int]]:
        """Which history the run starts from (the first call's, read before the admission,
        else the chat's, read again if a branch read before its parent), and the ids of
        the tool calls it left pending."""
        chat, execution = self.chat, self.execution
        if self.attempts.first is not None:  # read before the admission
            self.history = self.attempts.first.history
            return self.history.messages, []
        loaded = load_history(chat)
        prompt_id = execution.run.prompt_id if not execution.run.steps else None
        if branches.reads_before_its_parent(chat.pk, prompt_id, loaded):
            loaded = load_history(chat)
        self.history = History(
            chat,
            self.agent,
            loaded.messages,
            loaded.summary,
            loaded.tokens,
            limits=model_limits,
            last_step=last_reported_step,
        )
        return loaded.messages, loaded.pending

    def _remember_answer(self, answer: ProviderMessage, message: Message) -> None:
        """Whether a first step's answer is remembered with its prompt (only when the
        first call was made ready on a path seen before the admission)."""
        if self.attempts.answering is None:
            return
        seen, asked, prompt = self.attempts.answering
        stored = [(answer, message.pk, message.position)]
        if prompt is not None:  # stored by the admission (a worker's was on the path read)
            stored.insert(0, (asked, prompt.pk, prompt.position))
        remember_answered(self.chat, seen, stored)

    def _failure(self, exc: Exception) -> tuple[str, str, str, str]:
        """What a run that raised ``exc`` ends with: queued again if ``retry_on`` says
        so, else failed."""
        error_type, error = safe_error(exc)
        if self.retry_on is not None and self.retry_on(exc):
            return (Run.QUEUED, error_type, error, "")
        return (Run.FAILED, error_type, error, "")

    def _keep_caller_data(self) -> None:
        """Whether the chat's context is written: only when the caller's data changed."""
        chat = self.chat
        caller = self.context.caller_data()
        if caller != (chat.context or {}):
            Chat.objects.filter(pk=chat.pk).update(context=caller)
            chat.context = caller

    def _end(self, outcome: tuple[str, str, str, str] | None) -> None:
        execution = self.execution
        if execution is None or execution.done:
            return
        if outcome is None:  # the loop left without saying why: do not leave it running
            outcome = (Run.FAILED, "internal_error", "The reply failed.", "")
        status, error_type, error, reason = outcome
        if status == Run.CANCELLED:
            self.tool_runs.answer_unanswered(
                "cancelled", "The run was cancelled before this call ran."
            )
        elif status in (Run.FAILED, Run.QUEUED):
            self.tool_runs.answer_unanswered(
                "execution_error",
                "The run failed before this call's result was stored; it is not run again.",
            )
        if status == Run.AWAITING_APPROVAL:
            execution.pause()
        elif status == Run.QUEUED:
            execution.requeue(error_type, error)
        else:
            execution.finish(status, error_type=error_type, error=error, interrupt_reason=reason)

    # -- what the chat's methods call (Chat.ask, stream, ask_later, approve, interrupt) ----
    def ask(self, prompt: str | None, attachments: list[tuple]):
        """Run the loop with whole answers; the final assistant Message (``None`` when a
        guardrail blocked the prompt)."""
        for _ in RunSession(self, prompt, attachments, stream=False, totals=False):
            pass
        return self.result.message

    def regenerate(self):
        """Answer the active path's last prompt again (the reply it had leaves the path);
        the new final Message."""
        for _ in RunSession(self, None, [], regenerate=True, stream=False, totals=False):
            pass
        return self.result.message

    @staticmethod
    def switch_to(chat: Chat, message) -> int:
        """Make the branch through ``message`` the chat's active path; the new leaf's id."""
        return runs.switch_to(chat.pk, message)

    def events(self, prompt, attachments, *, stream: bool, resume: Run | None = None):
        """The run's :class:`~django_llmchat.loop.session.RunSession`: ``RunStarted``, the
        loop's events, one ``RunFinished``; an error ending the run is raised after it.
        Nothing is stored or marked before the first ``next()``, and closing or dropping
        the iterator ends the run ``cancelled``. ``chat.last_run`` is the run."""
        return RunSession(self, prompt, attachments, stream=stream, resume=resume)

    def ask_later(self, prompt: str, attachments: list[tuple]):
        """Store ``prompt`` (before-guardrails applied) with a queued run whose task is sent
        when the transaction commits: a :class:`~django_llmchat.loop.session.RunSession`
        admitted ``later``, through the same gate as every run. The user Message, or
        ``None`` when blocked."""
        session = RunSession(self, prompt, attachments, later=True).admit()
        if session.blocked is not None:
            return None
        self.chat.last_run = self.run_row
        return self.prompt

    def decide(self, call_id: str, approval: str, *, resume: bool):
        """Record a decision on a waiting tool call; when none is left waiting (and
        ``resume``), run the rest here and return the final Message."""
        chat = self.chat
        calls = list(
            ToolCall.objects.filter(chat=chat, call_id=call_id)
            .select_related("result")
            .order_by("id")
        )
        if not calls:
            raise ArgumentError(f"chat {chat.pk} has no tool call {call_id!r}")
        waiting = ToolCall.first_waiting(calls)
        if waiting is None:
            raise ArgumentError(f"tool call {call_id!r} has already been answered")
        run = runs.decide(chat.pk, waiting, approval)
        if run is not None and resume:
            for _ in RunSession(self, stream=False, resume=run, totals=False):
                pass
            return self.result.message
        return None

    @staticmethod
    def interrupt(chat: Chat, reason: str | None) -> bool:
        """Ask the chat's current run to stop (no runner needed: its agent may be gone)."""
        return runs.interrupt(chat.pk, reason)

    def blocked(self, event: GuardrailTripwire) -> Run:
        """What ``last_run`` is after a before-guardrail blocked the prompt: nothing was
        stored, so an unsaved Run saying why."""
        run = Run(
            chat=self.chat,
            status=Run.FAILED,
            error_type="guardrail_tripwire",
            error="A guardrail blocked the prompt.",
        )
        run.tripwire = event
        self.result.tripwire = event
        self.chat.last_run = run
        return run

    def cancel_before_loop(self) -> bool:
        """The run ends ``cancelled`` before its loop began (its stream closed at once):
        the attempt its admission opened goes; a run still queued is cancelled (and its
        followers told) by :func:`~django_llmchat.runs.cancel_queued`. Returns whether
        this call ended a run this process held (its followers are to be told)."""
        self.attempts.discard_first_call()
        run, execution = self.run_row, self.execution
        if execution is None:
            if run is not None and run.pk is not None:
                runs.cancel_queued(run.chat_id, run.pk, reason="stream_closed")
            return False
        if execution.done:
            return False
        return execution.finish(Run.CANCELLED, interrupt_reason="stream_closed")

    def remember(self) -> None:
        """``chat.last_run``: the run worked on, with what this call saw."""
        run = self.run_row
        if run is None:
            return
        result = self.result
        run.message, run.interrupt, run.tripwire = result.message, result.interrupt, result.tripwire
        run.events = result.events if self.keep_events else None
        if self.execution is not None:
            run.steps = max(run.steps, result.steps)
        self.chat.last_run = run


def _none_if_empty(tokens):
    return None if tokens.is_empty else tokens
