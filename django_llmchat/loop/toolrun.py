"""Running a step's tool calls: approvals, the before/after tool hooks, a pool of threads
for calls that may run at once, timeouts, and their results stored in one transaction.

:class:`ToolRunner` is a collaborator of :class:`~django_llmchat.loop.runner.Runner`
(``runner.tool_runs``): it works on the runner's chat, tools, context and execution."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from django.db import connections

from .. import telemetry
from ..conf import settings
from ..errors import InterruptError
from ..events import Interrupt, SkillActivation, ToolApprovalRequest, ToolResultDone
from ..models import ToolCall
from ..providers.types import ProviderMessage
from ..runs.claims import WORKER_LOST_RESULT
from ..skills import ACTIVATE_TOOL
from ..tools import Tool, ToolResult, describe
from .steps import save_tool_results
from .transcript import path_leaf, provider_message

if TYPE_CHECKING:
    from .runner import Runner

logger = logging.getLogger("django_llmchat.loop.runner")


class ToolRunner:
    """The tool calls of a :class:`~django_llmchat.loop.runner.Runner`'s run: a collaborator
    the runner holds (``runner.tool_runs``), working on its chat, tools, context and
    execution."""

    def __init__(self, runner: Runner):
        self.runner = runner

    # -- tools ----------------------------------------------------------------------------
    def run(self, calls: list[ToolCall], history: list[ProviderMessage], *, again: bool = True):
        """Answer ``calls``; returns an ``Interrupt`` when the run must pause. ``again``
        ``False``: the calls were stored by a process that died while it ran them, so
        those that would run get an ``interrupted`` error result instead (a tool's side
        effect happens at most once)."""
        results: list[tuple[ToolCall, ToolResult]] = []
        waiting: list[ToolCall] = []
        interrupt: Interrupt | None = None
        runnable: list[tuple[ToolCall, Tool | None]] = []
        for call in calls:
            tool = self.runner.tools.get(call.name)
            if call.name == ACTIVATE_TOOL and self.runner.context.skills is not None:
                name = (call.arguments or {}).get("name")
                skill = self.runner.context.skills.get(name) if isinstance(name, str) else None
                if skill is None:
                    results.append(
                        (call, ToolResult.error("validation_error", f"no skill named {name!r}"))
                    )
                else:
                    self.runner.context.skills.activate(skill.name)
                    yield SkillActivation(skill.name)
                    results.append((call, ToolResult(content=skill.body)))
                continue
            if call.approval == "denied":
                results.append(
                    (call, ToolResult.error("denied", "The user denied this tool call."))
                )
                continue
            if tool is not None and tool.requires_approval and call.approval != "approved":
                waiting.append(call)
                continue
            runnable.append((call, tool))
        if not again:
            results.extend((call, WORKER_LOST_RESULT) for call, _tool in runnable)
            runnable = []
        try:
            results.extend(self._execute(runnable))
        except InterruptError as exc:
            interrupt = Interrupt(reason=exc.reason)
            results.extend(getattr(exc, "partial_results", []))
        # keep the transcript's order: results follow their calls
        order = {c.pk: i for i, c in enumerate(calls)}
        results.sort(key=lambda pair: order[pair[0].pk])
        saved = save_tool_results(
            self.runner.chat, results, self.runner.execution, parent_id=path_leaf(history)
        )
        self.runner.unanswered = []  # a call waiting for a decision is answered after it
        for m, (call, _result) in zip(saved, results, strict=True):
            error = (m.raw or {}).get("error")
            yield ToolResultDone(
                call_id=call.call_id,
                name=call.name,
                result=m.content,
                error_type=(error.get("type") or "error") if error is not None else None,
                message_id=m.pk,
            )
        for m in saved:
            history.append(provider_message(m, calls=[]))  # a tool message calls nothing
            if self.runner.agent is not None and interrupt is None:
                try:
                    self.runner.agent.on_message(m, self.runner.context)
                except InterruptError as exc:
                    interrupt = Interrupt(reason=exc.reason)
        if interrupt is not None:
            return interrupt
        if waiting:
            for call in waiting:
                yield ToolApprovalRequest(
                    call_id=call.call_id,
                    name=call.name,
                    arguments=json.dumps(call.arguments or {}),
                )
            return Interrupt(reason="approval_required")
        return None

    def _execute(self, runnable: list[tuple[ToolCall, Tool | None]]):
        timeout = settings.TOOL_TIMEOUT
        done: list[tuple[ToolCall, ToolResult]] = []

        def run_one(call: ToolCall, tool: Tool | None) -> ToolResult:
            ran: list[ToolResult] = []
            with telemetry.tool_span(self.runner, call, lambda: ran[0] if ran else None):
                if tool is None:
                    ran.append(
                        ToolResult.error("unknown_tool", f"there is no tool named {call.name!r}")
                    )
                else:
                    try:
                        ran.append(
                            tool.run(call.arguments or {}, self.runner.context, timeout=timeout)
                        )
                    except InterruptError:
                        raise
                    except Exception as exc:  # a tool class of its own that let one out
                        ran.append(ToolResult.error("execution_error", describe(exc)))
            return ran[0]

        concurrent = [(c, t) for c, t in runnable if t is not None and t.concurrent]
        serial = [(c, t) for c, t in runnable if not (t is not None and t.concurrent)]
        if len(concurrent) > 1:
            with ThreadPoolExecutor(max_workers=min(8, len(concurrent))) as pool:
                futures = [(c, pool.submit(_in_thread, run_one, c, t)) for c, t in concurrent]
                interrupt: InterruptError | None = None
                for c, fut in futures:
                    try:
                        done.append((c, fut.result()))
                    except InterruptError as exc:
                        interrupt = interrupt or exc
                if interrupt is not None:
                    interrupt.partial_results = done
                    raise interrupt
        else:
            serial = concurrent + serial
        for c, t in serial:
            try:
                done.append((c, run_one(c, t)))
            except InterruptError as exc:
                exc.partial_results = done
                raise
        return done

    def answer_unanswered(self, error_type: str, message: str) -> None:
        """The run ends (failed, cancelled, given back to the queue) with calls it stored
        and never answered: each gets an error result, fenced by the run, so no later run
        runs them. A failure here is logged: the run's end is written all the same."""
        calls, self.runner.unanswered = self.runner.unanswered, []
        if not calls or self.runner.execution is None or self.runner.execution.done:
            return
        result = ToolResult.error(error_type, message)
        try:
            save_tool_results(
                self.runner.chat, [(call, result) for call in calls], self.runner.execution
            )
        except Exception:
            logger.exception("run %s: could not answer its tool calls", self.runner.execution.pk)


def _in_thread(func, *args):
    try:
        return func(*args)
    finally:
        connections.close_all()  # this thread's connections
