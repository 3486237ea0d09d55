"""The provider attempts of a run: one step's request and response, each attempt on the
usage ledger (a pending row before the call, closed when it ends), the summary request of
a compaction, and a step stopped mid-stream stored as what was shown.

Every end of an attempt goes through one place, :meth:`ProviderAttempts._ended`, whatever
ended it: a stop or an interrupt from any process (seen by the run's poll), the stream
closed or dropped (``GeneratorExit``), the run lost to another
process, the vendor's stream breaking. Every attempt, a summary's included, is billed by
:meth:`ProviderAttempts.billed`: the vendor's counts when they came; else (an attempt that
ended before its response, or a response whose vendor reported no usage) its estimated
input and the output weighed from what it received, priced, marked ``estimated``.

:class:`ProviderAttempts` is a collaborator of :class:`~django_llmchat.loop.runner.Runner`
(``runner.attempts``): it works on the runner's chat, execution, history and result."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .. import runs, telemetry
from ..db import dbconn
from ..errors import (
    ConfigurationError,
    ContextLengthExceededError,
    IncompleteStreamError,
    ProviderError,
    RunLostError,
    StructuredOutputError,
)
from ..events import (
    FinishReasonDone,
    StepFinished,
    StreamEvent,
    TextDelta,
    TextDone,
    TokenUsageDone,
    ToolCallDone,
)
from ..guardrails import AFTER, screen
from ..inputs import model_allowed
from ..models import Usage
from ..providers import get_provider
from ..providers.types import ProviderMessage, ProviderRequest, ProviderResponse
from ..runs.estimates import estimate_tokens
from ..values import Cost, Tokens, usd_text
from .attempts_billing import Received, billed
from .attempts_summary import summarize
from .fallbacks import Target, fallbacks_for, falls_back
from .history import History
from .steps import (
    closed_attempt,
    open_attempt,
    record_failed_attempts,
    save_step,
    usage_row,
    write_attempts,
)
from .transcript import path_leaf

if TYPE_CHECKING:
    from .runner import Runner

logger = logging.getLogger("django_llmchat.loop.runner")


@dataclass
class FirstCall:
    """A run's first provider call, made ready before the run is admitted: the history
    read (with the new prompt), the request built from it and its attempt's pending usage
    row, which the admission writes with the run when the path is still ``seen`` (so a
    plain ask commits twice: before the provider call and after)."""

    history: History
    request: ProviderRequest
    row: Usage
    seen: tuple[int | None, int, int | None]
    prompt: ProviderMessage


@dataclass
class _Step:
    """One step's call as its attempts go: the model answering (moved on by a fallback),
    the pending row of the attempt under way and what it received, the attempts ended
    failed, and what the caller was shown (or, with after-guardrails, what is held)."""

    request: ProviderRequest
    target: Target
    provider: object
    held: list[StreamEvent] | None
    pending: Usage | None = None
    received: Received = field(default_factory=Received)
    started: float = field(default_factory=time.monotonic)
    first_token: float | None = None
    failed: list[Usage] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)  # the text the caller has seen
    yielded: bool = False  # whether the caller has seen anything of this step
    candidates: list[Target] | None = None


class ProviderAttempts:
    """The provider calls of a :class:`~django_llmchat.loop.runner.Runner`'s run: a
    collaborator the runner holds (``runner.attempts``), working on its chat, execution,
    history and result."""

    def __init__(self, runner: Runner):
        self.runner = runner
        self.first: FirstCall | None = None
        """The run's first call, made ready before its admission (used once)."""
        self.answering: tuple | None = None
        """The path the first call was made ready on, its prompt (provider message, row)."""
        self.last_tokens: Tokens | None = None
        """The tokens the last response reported (what the estimates are scaled by)."""

    # -- one provider response ------------------------------------------------------------
    def step(self, *, stream: bool):
        """One step's request, shaped by the history policy, and its response; a vendor
        refusing the request as too long gets one compaction (or a tighter window) and one
        retry."""
        history = self.runner.history
        self.last_tokens = None
        if self.first is not None:
            request = self.first.request
        else:
            request = yield from history.fit(self.runner.request_for, compact=self._compact)
        try:
            response = yield from self._call(request, stream=stream)
        except ContextLengthExceededError:
            request = yield from history.fit(
                self.runner.request_for, overflow=request, compact=self._compact
            )
            response = yield from self._call(request, stream=stream)
        if self.last_tokens is not None:
            history.observed(request, self.last_tokens)
        return response

    def _save(
        self,
        response,
        content: str,
        usages: list[Usage],
        *,
        final: bool = False,
        target: Target | None = None,
    ):
        """Store one step (its message, tool calls and usage rows), fenced by the run; its
        calls are the run's unanswered ones until their results are stored. ``target``:
        the model that answered (a fallback), else the chat's."""
        chat = self.runner.chat
        target = target or Target(chat.provider, chat.model_id)
        titled = self.runner.reply_title if final and not response.tool_calls else None
        message, calls = save_step(
            chat,
            response,
            provider=target.provider,
            model_id=target.model_id,
            content=content,
            usages=usages,
            execution=self.runner.execution,
            final=final,
            parent_id=path_leaf(self.runner.history.messages),
            title=titled(self.runner) if titled is not None else None,
        )
        self.runner.unanswered = list(calls)
        return message, calls

    def _store_stopped(
        self, text: str, usages: list[Usage], target: Target | None = None
    ) -> StepFinished | None:
        """A step stopped mid-stream (a stop, a cancel, the client gone): the text shown
        so far is stored as its reply, finish reason ``cancelled``, with the attempt's
        usage rows; its tool calls, unfinished, are not. ``None`` when the run is no
        longer this process's (nothing is stored). ``target``: the model that was
        answering."""
        chat, execution = self.runner.chat, self.runner.execution
        target = target or Target(chat.provider, chat.model_id)
        response = ProviderResponse(
            content=text,
            finish_reason="other",
            raw_finish_reason="cancelled",
            model_id=target.model_id,
        )
        try:
            message, _ = self._save(response, text, usages, target=target)
        except RunLostError:
            return None
        self.runner.result.message = message
        return StepFinished(
            message_id=message.pk,
            step=execution.run.steps,
            finish_reason="other",
            token_usage=sum((row.tokens for row in usages), Tokens()),
            cost=usd_text(sum((row.cost for row in usages), Cost()).total),
            estimated=True if any(row.estimated for row in usages) else None,
            provider=target.provider,
            model_id=message.model_id or target.model_id,
        )

    def open_attempt(
        self, request: ProviderRequest, provider: str, model_id: str, *, operation: str = "chat"
    ) -> Usage:
        """The pending Usage row of an attempt about to call ``provider``, written now (or
        with the run's admission, for its first call)."""
        first, self.first = self.first, None
        if first is not None and first.request is request and operation == "chat":
            opened = first.row
        else:
            opened = open_attempt(self.pending_row(request, provider, model_id, operation))
        opened.span = telemetry.start_attempt(self.runner, request, provider, model_id, operation)
        return opened

    def pending_row(
        self, request: ProviderRequest, provider: str, model_id: str, operation: str
    ) -> Usage:
        """The pending Usage row of an attempt (unsaved): its input tokens as the history
        estimates them, their cost (marked estimated)."""
        estimate = None
        if self.runner.history is not None:
            try:
                estimate = self.runner.history.count(request.messages)
            except Exception:  # an estimator's failure never stops a call
                logger.exception("chat %s: could not estimate a request", self.runner.chat.pk)
        row = usage_row(
            self.runner.chat,
            provider=provider,
            model_id=model_id,
            status=Usage.PENDING,
            tokens=Tokens(input_tokens=estimate) if estimate is not None else None,
            started=time.monotonic(),
            run_id=self.runner.execution.pk if self.runner.execution is not None else None,
        )
        row.duration_ms, row.operation = None, operation
        row.status, row.estimated = Usage.PENDING, True
        return row

    def billed(
        self,
        pending: Usage | None,
        received: Received,
        answer: ProviderResponse | None = None,
    ) -> tuple[Tokens | None, bool]:
        """The tokens an ended attempt is billed for and whether they are estimated
        (:func:`~django_llmchat.loop.attempts_billing.billed`, weighed by the run's
        estimator)."""
        return billed(pending, received, answer, self._weigh)

    def _weigh(self, message: ProviderMessage) -> int:
        """``message``'s tokens by the run's estimator (scaled as the history's)."""
        try:
            if self.runner.history is not None:
                return self.runner.history.estimate(message)
            return estimate_tokens(message)
        except Exception:  # an estimator's failure never loses the row
            logger.exception("chat %s: could not estimate a reply", self.runner.chat.pk)
            return estimate_tokens(message)

    def discard_first_call(self) -> None:
        """A run that ended before its first call: the attempt its admission opened was
        never made, so its pending row goes (it was never paid for)."""
        first, self.first = self.first, None
        if first is not None and first.row.pk is not None:
            Usage.objects.filter(pk=first.row.pk, status=Usage.PENDING).delete()

    @staticmethod
    def close_attempt(pending: Usage | None, row: Usage, response=None) -> Usage:
        """``row``, the ended attempt, as the close of its ``pending`` row (and of its
        span)."""
        closed = closed_attempt(pending, row)
        telemetry.end_attempt(getattr(pending, "span", None), closed, response)
        return closed

    def _compact(self, covered, until_id, previous, budget):
        """A summary of ``covered`` (:func:`~django_llmchat.loop.attempts_summary.summarize`)."""
        return summarize(self, covered, until_id, previous, budget)

    def _next_fallback(self, candidates: list[Target], error: ProviderError):
        """The next of ``candidates`` (``LLMCHAT["FALLBACKS"]`` of the failing model,
        consumed) a call may move on to after ``error``, as ``(target, provider)``, or
        ``None``: a model ``ALLOWED_MODELS`` leaves out or whose provider is not
        configured is skipped (the reason logged); over a spending limit
        (``runner.budget``, the check before every provider call) nothing is tried."""
        chat = self.runner.chat
        while candidates:
            target = candidates.pop(0)
            if not model_allowed(target.provider, target.model_id):
                logger.warning(
                    "chat %s: fallback %s skipped: not in LLMCHAT['ALLOWED_MODELS']",
                    chat.pk,
                    target,
                )
                continue
            try:
                provider = (
                    self.runner.provider
                    if target.provider == chat.provider
                    else get_provider(target.provider)
                )
            except ConfigurationError as exc:
                logger.warning("chat %s: fallback %s skipped: %s", chat.pk, target, exc)
                continue
            exceeded = yield from self.runner.budget.check()
            if exceeded is not None:
                logger.warning(
                    "chat %s: no fallback after %s: %s", chat.pk, error, exceeded.message
                )
                return None
            return target, provider
        return None

    def _call(self, request: ProviderRequest, *, stream: bool):
        chat, execution = self.runner.chat, self.runner.execution
        assert execution is not None
        # the model answering: the chat's, then, once its retries are used up on a
        # retryable error, each of its fallbacks (LLMCHAT["FALLBACKS"]) in turn; with
        # after-guardrails, the step's events wait until they pass: a blocked reply never
        # leaves (to the caller, to Redis, to the database)
        st = _Step(
            request=request,
            target=Target(chat.provider, chat.model_id),
            provider=self.runner.provider,
            held=[] if self.runner.holds_text else None,
        )
        st.pending = self.open_attempt(request, st.target.provider, st.target.model_id)
        response = yield from self._answered(st, stream)
        content = response.content
        self._check_schema(st, response)
        succeeded = self._ended(st, Usage.SUCCEEDED, answer=response, response=response)
        self.last_tokens = response.tokens  # the vendor's (what the estimates are scaled by)
        billed = succeeded.tokens  # the vendor's, else our estimate (``succeeded.estimated``)
        rows = [*st.failed, succeeded]
        # after-guardrails
        content, modified, tripwire = screen(
            self.runner.guardrails, content, AFTER, self.runner.context
        )
        if tripwire is not None:
            record_failed_attempts(st.failed + [succeeded])
            self.runner.result.tripwire = tripwire
            yield tripwire
            return None
        final = not response.tool_calls
        try:
            message, calls = self._save(response, content, rows, final=final, target=st.target)
        except RunLostError:
            # the step is not ours to store, but the attempt was paid for
            succeeded.message = None
            write_attempts([succeeded])
            raise
        self.runner.result.message = message
        self._count_tokens(billed)
        yield from self._released(st.held, modified, content)
        yield from self._closing_events(response, content, stream)
        yield StepFinished(
            message_id=message.pk,
            step=execution.run.steps,
            finish_reason=response.finish_reason,
            token_usage=billed,
            cost=usd_text(sum((row.cost for row in rows), Cost()).total),
            estimated=True if any(row.estimated for row in rows) else None,
            provider=st.target.provider,
            model_id=message.model_id or st.target.model_id,
        )
        return message, calls

    def _ended(self, st: _Step, status: str, *, answer=None, error: str = "", response=None):
        """The Usage row of the attempt that just ended, its cost frozen now (written over
        the attempt's pending row), billed by :meth:`billed`: the vendor's counts with its
        ``answer``, else our estimate of what it received. ``response`` goes to the
        attempt's span."""
        execution = self.runner.execution
        tokens, estimated = self.billed(st.pending, st.received, answer)
        row = usage_row(
            self.runner.chat,
            provider=st.target.provider,
            model_id=st.target.model_id,
            status=status,
            tokens=tokens,
            started=st.started,
            first_token=st.first_token,
            error=error,
            run_id=execution.pk,
        )
        row.estimated = estimated
        return self.close_attempt(st.pending, row, response)

    def _next_attempt(self, st: _Step, ended: Usage) -> None:
        """Whether nothing: the ended attempt is written (closed now) and counted as failed,
        and the next one gets a pending row of its own."""
        write_attempts([ended])
        st.failed.append(ended)
        st.started, st.first_token = time.monotonic(), None
        st.pending = self.open_attempt(st.request, st.target.provider, st.target.model_id)

    def _answered(self, st: _Step, stream: bool):
        """The response the step ends with, deciding what each failed attempt becomes:
        stored as a stopped reply, recorded as failed, or followed by a fallback."""

        def on_retry(error: ProviderError, number: int) -> None:
            self._next_attempt(st, self._ended(st, Usage.FAILED, error=str(error)))

        while True:
            dbconn.release()  # nothing to ask the database while the model works
            try:
                return (yield from self._ask(st, stream, on_retry))
            except (runs.CancelRequested, GeneratorExit) as exc:
                # stopped, or the stream dropped: the tokens spent so far are still spent,
                # and the text the caller was shown is the reply (what a reload shows is
                # what the user saw)
                yield from self._stopped(st, exc)
                raise
            except RunLostError:
                record_failed_attempts([*st.failed, self._ended(st, Usage.CANCELLED)])
                raise
            except (ProviderError, IncompleteStreamError) as exc:
                yield from self._fall_back(st, exc)
            except Exception as exc:  # a fault of ours mid-attempt: the attempt still ended
                error = f"{type(exc).__name__}: {exc}"
                record_failed_attempts([*st.failed, self._ended(st, Usage.FAILED, error=error)])
                raise

    def _ask(self, st: _Step, stream: bool, on_retry):
        """One call to the answering model (streamed or not), its response."""
        if not stream:
            response = st.provider.complete(st.request, on_retry=on_retry)
            st.first_token = time.monotonic()
            return response
        provider_stream = st.provider.stream(st.request, on_retry=on_retry)
        events = iter(provider_stream)
        try:
            yield from self._relay(st, events)
        finally:
            close = getattr(events, "close", None)
            if close:
                close()
        return provider_stream.response

    def _relay(self, st: _Step, events):
        """Which of the stream's events the caller sees now, which are held and which
        wait to be re-emitted after the after-guardrails."""
        execution = self.runner.execution
        for event in events:
            st.received.add(event)
            if st.first_token is None:
                st.first_token = time.monotonic()
            if execution.poll():
                dbconn.release()
            if isinstance(event, TextDone) and self.runner.guardrails:
                continue  # re-emitted after the after-guardrails
            if st.held is not None:
                st.held.append(event)
                continue
            if isinstance(event, TextDelta):
                st.shown.append(event.content)
            st.yielded = True
            yield event

    def _stopped(self, st: _Step, exc: BaseException):
        """Whether a stopped or dropped attempt leaves a reply (the text shown, yielded
        on a stop) or only its failed attempts."""
        rows = [*st.failed, self._ended(st, Usage.CANCELLED)]
        stopped = self._store_stopped("".join(st.shown), rows, st.target) if st.shown else None
        if stopped is None:
            record_failed_attempts(rows)
        elif isinstance(exc, runs.CancelRequested):
            yield stopped

    def _fall_back(self, st: _Step, exc: ProviderError | IncompleteStreamError):
        """Whether a failed attempt moves on to a fallback (``st`` aimed at it) or the
        run fails with ``exc``."""
        chat = self.runner.chat
        ended = self._ended(st, Usage.FAILED, error=str(exc))
        # a fallback answers only a step the caller has seen nothing of
        if st.yielded or not falls_back(exc):
            record_failed_attempts([*st.failed, ended])
            raise exc
        write_attempts([ended])
        st.failed.append(ended)
        if st.candidates is None:
            st.candidates = fallbacks_for(chat.provider, chat.model_id)
        found = yield from self._next_fallback(st.candidates, exc)
        if found is None:  # the run fails with the error of its last attempt
            raise exc
        logger.warning("chat %s: %s; falling back to %s", chat.pk, exc, found[0])
        st.target, st.provider = found
        st.request = replace(st.request, model_id=st.target.model_id)
        st.started, st.first_token = time.monotonic(), None
        st.received = Received()
        if st.held is not None:
            st.held.clear()
        st.pending = self.open_attempt(st.request, st.target.provider, st.target.model_id)

    def _check_schema(self, st: _Step, response: ProviderResponse) -> None:
        """Whether a structured chat's answer is JSON (else its attempt fails and the
        run with it)."""
        chat, content = self.runner.chat, response.content
        if chat.schema is None or not content or response.tool_calls:
            return
        try:
            json.loads(content)
        except ValueError as exc:
            bad = self._ended(
                st, Usage.FAILED, answer=response, error="invalid JSON for the schema"
            )
            record_failed_attempts([*st.failed, bad])
            raise StructuredOutputError(
                f"{chat.provider} returned content that is not valid JSON for the "
                f"chat's schema: {exc}"
            ) from exc

    def _count_tokens(self, billed: Tokens) -> None:
        """Whether the step's tokens add to the run's total now (not when none were
        billed, nor when the total is deferred: read from the usage rows)."""
        if billed.is_empty:
            return
        context = self.runner.context
        if not context.token_usage_deferred:
            usage = context.token_usage
            context.token_usage = billed if usage is None else usage + billed

    @staticmethod
    def _released(held: list[StreamEvent] | None, modified, content: str):
        """Which held events leave once the after-guardrails passed (a transformed text
        as one delta of the text they left), then the guardrails' own events."""
        if held:
            first_text = True
            for event in held:
                if isinstance(event, TextDelta) and modified:
                    if first_text:  # transformed: the text as the guardrails left it
                        first_text = False
                        yield TextDelta(content)
                    continue
                yield event
        yield from modified

    def _closing_events(self, response: ProviderResponse, content: str, stream: bool):
        """Which closing events a step emits itself: all of them for a response that was
        not streamed, the final text for a stream whose text the guardrails held."""
        if not stream:
            for tc in response.tool_calls:
                yield ToolCallDone(
                    item_id=tc.item_id or tc.call_id,
                    call_id=tc.call_id,
                    name=tc.name,
                    arguments=json.dumps(tc.arguments),
                )
            if content:
                yield TextDone(content)
            yield TokenUsageDone(token_usage=response.tokens)
            yield FinishReasonDone(
                finish_reason=response.finish_reason, raw_finish_reason=response.raw_finish_reason
            )
        elif content and self.runner.guardrails:
            yield TextDone(content)
