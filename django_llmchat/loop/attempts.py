"""The provider attempts of a run: one step's request and response, each attempt on the
usage ledger (a pending row before the call, closed when it ends), the summary request of
a compaction, and a step stopped mid-stream stored as what was shown.

Every end of an attempt goes through one place, :meth:`ProviderAttempts._call`'s
``attempt()``, whatever ended it: a stop or an interrupt from any process (seen by the
run's poll), the stream closed or dropped (``GeneratorExit``), the run lost to another
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
from dataclasses import dataclass, replace
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
        chat, provider, execution = self.runner.chat, self.runner.provider, self.runner.execution
        assert execution is not None
        failed: list[Usage] = []
        clock = {"started": time.monotonic(), "first_token": None}
        # with after-guardrails, the step's events wait until they pass: a blocked reply
        # never leaves (to the caller, to Redis, to the database)
        held: list[StreamEvent] | None = [] if self.runner.holds_text else None
        shown: list[str] = []  # the text the caller has seen of this step
        yielded = False  # whether the caller has seen anything of this step
        # the model answering: the chat's, then, once its retries are used up on a
        # retryable error, each of its fallbacks (LLMCHAT["FALLBACKS"]) in turn
        target = Target(chat.provider, chat.model_id)
        candidates: list[Target] | None = None

        pending = [self.open_attempt(request, target.provider, target.model_id)]
        received = Received()  # what a stopped or broken attempt is billed for

        def attempt(status: str, *, answer=None, error: str = "", response=None) -> Usage:
            """The Usage row of the attempt that just ended, its cost frozen now (written
            over the attempt's pending row), billed by :meth:`_billed`: the vendor's
            counts with its ``answer``, else our estimate of what it received. ``response``
            goes to the attempt's span."""
            tokens, estimated = self.billed(pending[0], received, answer)
            row = usage_row(
                chat,
                provider=target.provider,
                model_id=target.model_id,
                status=status,
                tokens=tokens,
                started=clock["started"],
                first_token=clock["first_token"],
                error=error,
                run_id=execution.pk,
            )
            row.estimated = estimated
            return self.close_attempt(pending[0], row, response)

        def on_retry(error: ProviderError, number: int) -> None:
            ended = attempt(Usage.FAILED, error=str(error))
            write_attempts([ended])  # closed now: the next attempt has a row of its own
            failed.append(ended)
            clock["started"], clock["first_token"] = time.monotonic(), None
            pending[0] = self.open_attempt(request, target.provider, target.model_id)

        while True:
            dbconn.release()  # nothing to ask the database while the model works
            try:
                if stream:
                    provider_stream = provider.stream(request, on_retry=on_retry)
                    events = iter(provider_stream)
                    try:
                        for event in events:
                            received.add(event)
                            if clock["first_token"] is None:
                                clock["first_token"] = time.monotonic()
                            if execution.poll():
                                dbconn.release()
                            if isinstance(event, TextDone) and self.runner.guardrails:
                                continue  # re-emitted after the after-guardrails
                            if held is not None:
                                held.append(event)
                                continue
                            if isinstance(event, TextDelta):
                                shown.append(event.content)
                            yielded = True
                            yield event
                    finally:
                        close = getattr(events, "close", None)
                        if close:
                            close()
                    response = provider_stream.response
                else:
                    response = provider.complete(request, on_retry=on_retry)
                    clock["first_token"] = time.monotonic()
                break
            except (runs.CancelRequested, GeneratorExit) as exc:
                # stopped, or the stream dropped: the tokens spent so far are still spent,
                # and the text the caller was shown is the reply (what a reload shows is
                # what the user saw)
                rows = [*failed, attempt(Usage.CANCELLED)]
                stopped = self._store_stopped("".join(shown), rows, target) if shown else None
                if stopped is None:
                    record_failed_attempts(rows)
                elif isinstance(exc, runs.CancelRequested):
                    yield stopped
                raise
            except RunLostError:
                record_failed_attempts([*failed, attempt(Usage.CANCELLED)])
                raise
            except (ProviderError, IncompleteStreamError) as exc:
                ended = attempt(Usage.FAILED, error=str(exc))
                # a fallback answers only a step the caller has seen nothing of
                if yielded or not falls_back(exc):
                    record_failed_attempts([*failed, ended])
                    raise
                write_attempts([ended])
                failed.append(ended)
                if candidates is None:
                    candidates = fallbacks_for(chat.provider, chat.model_id)
                found = yield from self._next_fallback(candidates, exc)
                if found is None:  # the run fails with the error of its last attempt
                    raise exc
                logger.warning("chat %s: %s; falling back to %s", chat.pk, exc, found[0])
                target, provider = found
                request = replace(request, model_id=target.model_id)
                clock["started"], clock["first_token"] = time.monotonic(), None
                received = Received()
                if held is not None:
                    held.clear()
                pending[0] = self.open_attempt(request, target.provider, target.model_id)
            except Exception as exc:  # a fault of ours mid-attempt: the attempt still ended
                error = f"{type(exc).__name__}: {exc}"
                record_failed_attempts([*failed, attempt(Usage.FAILED, error=error)])
                raise
        content = response.content
        if chat.schema is not None and content and not response.tool_calls:
            try:
                json.loads(content)
            except ValueError as exc:
                bad = attempt(Usage.FAILED, answer=response, error="invalid JSON for the schema")
                record_failed_attempts([*failed, bad])
                raise StructuredOutputError(
                    f"{chat.provider} returned content that is not valid JSON for the "
                    f"chat's schema: {exc}"
                ) from exc
        succeeded = attempt(Usage.SUCCEEDED, answer=response, response=response)
        self.last_tokens = response.tokens  # the vendor's (what the estimates are scaled by)
        billed = succeeded.tokens  # the vendor's, else our estimate (``succeeded.estimated``)
        # after-guardrails
        content, modified, tripwire = screen(
            self.runner.guardrails, content, AFTER, self.runner.context
        )
        if tripwire is not None:
            record_failed_attempts(failed + [succeeded])
            self.runner.result.tripwire = tripwire
            yield tripwire
            return None
        final = not response.tool_calls
        try:
            message, calls = self._save(
                response, content, [*failed, succeeded], final=final, target=target
            )
        except RunLostError:
            # the step is not ours to store, but the attempt was paid for
            succeeded.message = None
            write_attempts([succeeded])
            raise
        self.runner.result.message = message
        if not billed.is_empty:
            # a deferred total is read from the usage rows, which now include this step
            if not self.runner.context.token_usage_deferred:
                usage = self.runner.context.token_usage
                self.runner.context.token_usage = billed if usage is None else usage + billed
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
        yield StepFinished(
            message_id=message.pk,
            step=execution.run.steps,
            finish_reason=response.finish_reason,
            token_usage=billed,
            cost=usd_text(sum((row.cost for row in [*failed, succeeded]), Cost()).total),
            estimated=True if any(row.estimated for row in [*failed, succeeded]) else None,
            provider=target.provider,
            model_id=message.model_id or target.model_id,
        )
        return message, calls
