"""The provider attempts of a run: one step's request and response, each attempt on the
usage ledger (a pending row before the call, closed when it ends), the summary request of
a compaction, and a step stopped mid-stream stored as what was shown.

Every end of an attempt goes through one place, :meth:`ProviderAttempts._call`'s
``attempt()``, whatever ended it: a stop or an interrupt from any process (seen by the
run's poll), the stream closed or dropped (``GeneratorExit``), the run lost to another
process, the vendor's stream breaking. Every attempt, a summary's included, is billed by
:meth:`ProviderAttempts._billed`: the vendor's counts when they came; else (an attempt that
ended before its response, or a response whose vendor reported no usage) its estimated
input and the output weighed from what it received, priced, marked ``estimated``.

:class:`ProviderAttempts` is a part of :class:`~django_llmchat.runner.Runner`: it works
on the runner's chat, execution, history and result."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace

from . import dbconn, runs, telemetry
from .errors import (
    ConfigurationError,
    ContextLengthExceededError,
    IncompleteStreamError,
    ProviderError,
    RunLostError,
    StructuredOutputError,
)
from .estimates import estimate_tokens
from .events import (
    FinishReasonDone,
    ReasoningDelta,
    StepFinished,
    StreamEvent,
    TextDelta,
    TextDone,
    TokenUsageDone,
    ToolCallDelta,
    ToolCallDone,
)
from .fallbacks import Target, fallbacks_for, falls_back
from .guardrails import AFTER, screen
from .history import History, check_summary_response, summary_request
from .inputs import model_allowed
from .models import Usage
from .providers import get_provider
from .providers.types import ProviderMessage, ProviderRequest, ProviderResponse
from .steps import (
    closed_attempt,
    open_attempt,
    record_failed_attempts,
    save_step,
    save_summary,
    usage_row,
    write_attempts,
)
from .transcript import path_leaf
from .values import Cost, Thinking, Tokens, usd_text

logger = logging.getLogger("django_llmchat.runner")


class Received:
    """What one streamed attempt received so far: the text, reasoning and tool-call
    argument fragments, and the vendor's usage once it arrived. An attempt that ends
    before its response does (stopped, its stream dropped or broken) is billed from it:
    :meth:`ProviderAttempts._billed`."""

    __slots__ = ("arguments", "reasoning", "text", "tokens")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.arguments: list[str] = []  # every provider streams a call's arguments as deltas
        self.tokens: Tokens | None = None

    def add(self, event: StreamEvent) -> None:
        kind = type(event)
        if kind is TextDelta:
            self.text.append(event.content)
        elif kind is ReasoningDelta:
            self.reasoning.append(event.content)
        elif kind is ToolCallDelta:
            if event.name:
                self.arguments.append(event.name)
            self.arguments.append(event.arguments_delta)
        elif kind is TokenUsageDone:
            self.tokens = event.token_usage

    @property
    def anything(self) -> bool:
        """Whether the vendor sent anything of an answer (else it charged nothing)."""
        return bool(self.text or self.reasoning or self.arguments) or self.tokens is not None

    def message(self) -> ProviderMessage:
        """What streamed, as one assistant message (what the token estimator weighs)."""
        reasoning = "".join(self.reasoning)
        return ProviderMessage(
            role="assistant",
            content="".join(self.text) + "".join(self.arguments),
            thinking=Thinking(reasoning) if reasoning else None,
        )


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
    """The provider calls of :class:`~django_llmchat.runner.Runner`."""

    _first: FirstCall | None = None
    # the path the first call was made ready on, its prompt (provider message, row)
    _answering: tuple | None = None

    # -- one provider response ------------------------------------------------------------
    def _step(self, *, stream: bool):
        """One step's request, shaped by the history policy, and its response; a vendor
        refusing the request as too long gets one compaction (or a tighter window) and one
        retry."""
        history = self.history
        self.last_tokens = None
        if self._first is not None:
            request = self._first.request
        else:
            request = yield from history.fit(self._request, compact=self._compact)
        try:
            response = yield from self._call(request, stream=stream)
        except ContextLengthExceededError:
            request = yield from history.fit(self._request, overflow=request, compact=self._compact)
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
        chat = self.chat
        target = target or Target(chat.provider, chat.model_id)
        message, calls = save_step(
            chat,
            response,
            provider=target.provider,
            model_id=target.model_id,
            content=content,
            usages=usages,
            execution=self.execution,
            final=final,
            parent_id=path_leaf(self.history.messages),
        )
        self.unanswered = list(calls)
        return message, calls

    def _store_stopped(
        self, text: str, usages: list[Usage], target: Target | None = None
    ) -> StepFinished | None:
        """A step stopped mid-stream (a stop, a cancel, the client gone): the text shown
        so far is stored as its reply, finish reason ``cancelled``, with the attempt's
        usage rows; its tool calls, unfinished, are not. ``None`` when the run is no
        longer this process's (nothing is stored). ``target``: the model that was
        answering."""
        chat, execution = self.chat, self.execution
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
        self.result.message = message
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

    def _open_attempt(
        self, request: ProviderRequest, provider: str, model_id: str, *, operation: str = "chat"
    ) -> Usage:
        """The pending Usage row of an attempt about to call ``provider``, written now (or
        with the run's admission, for its first call)."""
        first, self._first = self._first, None
        if first is not None and first.request is request and operation == "chat":
            opened = first.row
        else:
            opened = open_attempt(self._pending_row(request, provider, model_id, operation))
        opened.span = telemetry.start_attempt(self, request, provider, model_id, operation)
        return opened

    def _pending_row(
        self, request: ProviderRequest, provider: str, model_id: str, operation: str
    ) -> Usage:
        """The pending Usage row of an attempt (unsaved): its input tokens as the history
        estimates them, their cost (marked estimated)."""
        estimate = None
        if self.history is not None:
            try:
                estimate = self.history.count(request.messages)
            except Exception:  # an estimator's failure never stops a call
                logger.exception("chat %s: could not estimate a request", self.chat.pk)
        row = usage_row(
            self.chat,
            provider=provider,
            model_id=model_id,
            status=Usage.PENDING,
            tokens=Tokens(input_tokens=estimate) if estimate is not None else None,
            started=time.monotonic(),
            run_id=self.execution.pk if self.execution is not None else None,
        )
        row.duration_ms, row.operation = None, operation
        row.status, row.estimated = Usage.PENDING, True
        return row

    def _billed(
        self,
        pending: Usage | None,
        received: Received,
        answer: ProviderResponse | None = None,
    ) -> tuple[Tokens | None, bool]:
        """The tokens an ended attempt is billed for and whether they are estimated: the
        vendor's counts when they arrived (with its ``answer``, the response it ended
        with, else in its stream); else, for what they leave out, the request's input
        tokens as its pending row estimated them and the output as the token estimator
        weighs the answer (a vendor that reported no usage) or, for an attempt that ended
        before its response (stopped, its stream dropped or broken), what streamed (text,
        reasoning, tool-call arguments). ``(None, False)`` when nothing of an answer came
        (a refused request: the vendor charged nothing)."""
        if answer is not None:
            tokens = answer.tokens
            message = ProviderMessage(
                role="assistant",
                content=answer.content,
                tool_calls=list(answer.tool_calls),
                thinking=answer.thinking,
            )
        elif not received.anything:
            return None, False
        else:
            tokens = received.tokens or Tokens()
            message = received.message()
        filled: dict[str, int] = {}
        if tokens.input_tokens is None and pending is not None:
            if pending.input_tokens is not None:
                filled["input_tokens"] = pending.input_tokens
        if tokens.output_tokens is None:
            weighed = bool(message.content or message.tool_calls or message.thinking)
            filled["output_tokens"] = self._weigh(message) if weighed else 0
            if message.thinking is not None and tokens.thinking_tokens is None:
                filled["thinking_tokens"] = self._weigh(
                    ProviderMessage(role="assistant", thinking=message.thinking)
                )
        return (replace(tokens, **filled) if filled else tokens), bool(filled)

    def _weigh(self, message: ProviderMessage) -> int:
        """``message``'s tokens by the run's estimator (scaled as the history's)."""
        try:
            if self.history is not None:
                return self.history.estimate(message)
            return estimate_tokens(message)
        except Exception:  # an estimator's failure never loses the row
            logger.exception("chat %s: could not estimate a reply", self.chat.pk)
            return estimate_tokens(message)

    def discard_first_call(self) -> None:
        """A run that ended before its first call: the attempt its admission opened was
        never made, so its pending row goes (it was never paid for)."""
        first, self._first = self._first, None
        if first is not None and first.row.pk is not None:
            Usage.objects.filter(pk=first.row.pk, status=Usage.PENDING).delete()

    @staticmethod
    def _close_attempt(pending: Usage | None, row: Usage, response=None) -> Usage:
        """``row``, the ended attempt, as the close of its ``pending`` row (and of its
        span)."""
        closed = closed_attempt(pending, row)
        telemetry.end_attempt(getattr(pending, "span", None), closed, response)
        return closed

    def _compact(self, covered, until_id, previous, budget):
        """Write and store a summary of ``covered`` (the messages up to ``until_id``,
        after the ``previous`` summary): one request to the summary model, its own usage
        row. Returns the summary row, or ``None`` when the summary model failed (the run
        goes on with a window)."""
        chat, execution, options = self.chat, self.execution, self.history.options
        provider_name = options.summary_provider or chat.provider
        model_id = options.summary_model or chat.model_id
        started = time.monotonic()
        pending = None
        try:
            provider = (
                self.provider if provider_name == chat.provider else get_provider(provider_name)
            )
            request = summary_request(options, model_id, covered, previous, budget)
            request.chat = chat  # what LLMCHAT["REDACT"] is told of
            pending = self._open_attempt(request, provider_name, model_id, operation="summary")
            response = provider.complete(request)
            content = check_summary_response(provider_name, response.content)
        except Exception as exc:
            ours = not isinstance(exc, ProviderError)  # a fault of ours fails the run
            if pending is not None or not ours:  # an attempt was made: it is on the ledger
                failed = usage_row(
                    chat,
                    provider=provider_name,
                    model_id=model_id,
                    status=Usage.FAILED,
                    started=started,
                    error=f"{type(exc).__name__}: {exc}" if ours else str(exc),
                    run_id=execution.pk,
                )
                failed.operation = "summary"
                record_failed_attempts([self._close_attempt(pending, failed)])
            if ours:
                raise
            logger.warning(
                "chat %s: the summary failed, a window is sent instead: %s", chat.pk, exc
            )
            return None
        tokens, estimated = self._billed(pending, Received(), response)
        usage = usage_row(
            chat,
            provider=provider_name,
            model_id=response.model_id or model_id,
            status=Usage.SUCCEEDED,
            tokens=tokens,
            started=started,
            first_token=time.monotonic(),
            run_id=execution.pk,
        )
        usage.operation, usage.estimated = "summary", estimated
        self._close_attempt(pending, usage, response)
        return save_summary(
            chat,
            content=content,
            until_id=until_id,
            provider=provider_name,
            model_id=response.model_id or model_id,
            usage=usage,
            execution=execution,
        )

    def _next_fallback(self, candidates: list[Target], error: ProviderError):
        """The next of ``candidates`` (``LLMCHAT["FALLBACKS"]`` of the failing model,
        consumed) a call may move on to after ``error``, as ``(target, provider)``, or
        ``None``: a model ``ALLOWED_MODELS`` leaves out or whose provider is not
        configured is skipped (the reason logged); over a spending limit
        (:meth:`_check_budget`, the check before every provider call) nothing is tried."""
        chat = self.chat
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
                    self.provider
                    if target.provider == chat.provider
                    else get_provider(target.provider)
                )
            except ConfigurationError as exc:
                logger.warning("chat %s: fallback %s skipped: %s", chat.pk, target, exc)
                continue
            exceeded = yield from self._check_budget()
            if exceeded is not None:
                logger.warning(
                    "chat %s: no fallback after %s: %s", chat.pk, error, exceeded.message
                )
                return None
            return target, provider
        return None

    def _call(self, request: ProviderRequest, *, stream: bool):
        chat, provider, execution = self.chat, self.provider, self.execution
        assert execution is not None
        failed: list[Usage] = []
        clock = {"started": time.monotonic(), "first_token": None}
        # with after-guardrails, the step's events wait until they pass: a blocked reply
        # never leaves (to the caller, to Redis, to the database)
        held: list[StreamEvent] | None = [] if self.holds_text else None
        shown: list[str] = []  # the text the caller has seen of this step
        yielded = False  # whether the caller has seen anything of this step
        # the model answering: the chat's, then, once its retries are used up on a
        # retryable error, each of its fallbacks (LLMCHAT["FALLBACKS"]) in turn
        target = Target(chat.provider, chat.model_id)
        candidates: list[Target] | None = None

        pending = [self._open_attempt(request, target.provider, target.model_id)]
        received = Received()  # what a stopped or broken attempt is billed for

        def attempt(status: str, *, answer=None, error: str = "", response=None) -> Usage:
            """The Usage row of the attempt that just ended, its cost frozen now (written
            over the attempt's pending row), billed by :meth:`_billed`: the vendor's
            counts with its ``answer``, else our estimate of what it received. ``response``
            goes to the attempt's span."""
            tokens, estimated = self._billed(pending[0], received, answer)
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
            return self._close_attempt(pending[0], row, response)

        def on_retry(error: ProviderError, number: int) -> None:
            ended = attempt(Usage.FAILED, error=str(error))
            write_attempts([ended])  # closed now: the next attempt has a row of its own
            failed.append(ended)
            clock["started"], clock["first_token"] = time.monotonic(), None
            pending[0] = self._open_attempt(request, target.provider, target.model_id)

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
                            if isinstance(event, TextDone) and self.guardrails:
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
                pending[0] = self._open_attempt(request, target.provider, target.model_id)
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
        content, modified, tripwire = screen(self.guardrails, content, AFTER, self.context)
        if tripwire is not None:
            record_failed_attempts(failed + [succeeded])
            self.result.tripwire = tripwire
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
        self.result.message = message
        if not billed.is_empty:
            # a deferred total is read from the usage rows, which now include this step
            if not self.context.token_usage_deferred:
                usage = self.context.token_usage
                self.context.token_usage = billed if usage is None else usage + billed
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
        elif content and self.guardrails:
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
