"""Stopping a run and deciding on its tool calls.

:func:`interrupt` stops the chat's current run (a running one at its next poll, a queued
or waiting one now), :func:`cancel_queued` ends a run whose caller gave up before its
turn, :func:`decide` records a tool-call decision and, with the last one, queues the run
again through the gate.
"""

from __future__ import annotations

from django.db import router, transaction
from django.db.models.functions import Now

from ..errors import ArgumentError, BudgetExceededError, ChatBusyError
from ..loop.steps import save_tool_results
from ..models import Chat, Run, ToolCall, branches
from ..models.message import QUEUED_POSITION
from ..tools import ToolResult
from . import base, limits, pg
from .admission import _admit, _admitted
from .base import (
    _head,
    _lock,
    _move_prompt_into_place,
    _release,
    _send,
    _sync_chat,
    _waits_for_a_worker,
)
from .execution import _next_run
from .policy import INTERRUPTED_BY_PROMPT, ROLLBACK, ROLLED_BACK, stop_status
from .transitions import RESUME, STOPS, WITHDRAW


def cancel_queued(chat_id: int, run_id: int, *, error_type: str = "", reason: str = "") -> bool:
    """End run ``run_id`` ``cancelled`` while it is still queued (its caller gave up on
    it before its turn came); ``False`` when it is not queued any more."""
    with transaction.atomic():
        _lock(chat_id)
        run = Run.objects.filter(pk=run_id, status=Run.QUEUED).first()
        if run is None:
            return False
        Run.objects.filter(pk=run_id, status__in=WITHDRAW.sources).update(
            status=WITHDRAW.target,
            error_type=error_type,
            interrupt_reason=reason[:255],
            finished_at=Now(),
            lease_expires_at=None,
        )
        _move_prompt_into_place(chat_id, run.prompt_id)
        following = _sync_chat(chat_id)
        base.tell_followers(chat_id, run_id, WITHDRAW.target, error_type)
        if _waits_for_a_worker(following):
            transaction.on_commit(lambda: _send(following))
    return True


# -- stopping, deciding -----------------------------------------------------------------------
def interrupt(chat_id: int, reason: str | None = None, *, run_id: int | None = None) -> bool:
    """Stop the chat's current run: a running one stops between chunks or steps (its
    process sees the request within a quarter second); one waiting for a decision or in
    the queue ends now. ``reason == "cancelled"`` (or a new prompt's stop:
    :func:`~django_llmchat.runs.policy.stop_status`) ends it ``cancelled``, any other
    reason ``interrupted``. ``run_id``: stop only that run (when it is still the chat's
    current one). Returns whether there was a run to stop (``False`` as well when a stop
    was asked for already: the first request wins)."""
    reason = (reason or "")[:255]
    status = stop_status(reason)
    # the PostgreSQL face: tests/runs/test_pg.py and the suite on PostgreSQL test it
    using = router.db_for_write(Run)  # pragma: no mutate
    if pg.available(using):  # pragma: no mutate block
        found = _interrupt_call(chat_id, reason, status, run_id, using)
        if found is not None:
            return found
    with transaction.atomic():
        if not _lock(chat_id):
            return False
        head = _head(chat_id)
        if head is None or (run_id is not None and head.pk != run_id):
            return False
        if head.status == Run.RUNNING:
            return bool(
                Run.objects.filter(pk=head.pk, status=Run.RUNNING, cancel_requested=False).update(
                    cancel_requested=True, interrupt_reason=reason
                )
            )
        if head.status == Run.AWAITING_APPROVAL:
            _answer_waiting_calls(chat_id, head)
        step = STOPS[status]
        changed = Run.objects.filter(pk=head.pk, status__in=step.sources).update(
            status=step.target,
            interrupt_reason=reason,
            finished_at=Now(),
            lease_expires_at=None,
        )
        if changed:
            _move_prompt_into_place(chat_id, head.prompt_id)
            following = _release(chat_id, head.pk)
            base.tell_followers(chat_id, head.pk, status)
            if _waits_for_a_worker(following):
                transaction.on_commit(lambda: _send(following))
        return bool(changed)


def stop_for_prompt(chat_id: int, policy: str) -> Run | None:
    """A new prompt under the ``interrupt`` or ``rollback`` policy, in the admission's
    transaction under the chat's lock: every unfinished run of the chat is stopped with
    the machinery of :func:`interrupt` and :func:`cancel_queued` (a running one is asked
    to stop, the others end now). Under ``rollback`` what a run that ended now stored is
    deleted now (:func:`django_llmchat.models.branches.roll_back`), a running one's when it
    ends (:meth:`Execution.finish <django_llmchat.runs.Execution.finish>`). Returns the
    chat's head run after it (a running one asked to stop, or ``None``)."""
    reason = ROLLED_BACK if policy == ROLLBACK else INTERRUPTED_BY_PROMPT
    while True:
        head = _head(chat_id)
        if head is None:
            return None
        if head.status == Run.RUNNING:
            interrupt(chat_id, reason, run_id=head.pk)  # a stop asked for already stands
            behind = Run.objects.filter(
                chat_id=chat_id, status=Run.QUEUED, pk__gt=head.pk
            ).values_list("pk", "prompt_id")
            for pk, prompt_id in list(behind):
                if cancel_queued(chat_id, pk, reason=reason) and policy == ROLLBACK:
                    branches.roll_back(chat_id, pk, prompt_id)
            return head
        if not interrupt(chat_id, reason, run_id=head.pk):  # pragma: no cover - locked
            return head
        if policy == ROLLBACK:
            branches.roll_back(chat_id, head.pk, head.prompt_id)


def _interrupt_call(
    chat_id: int, reason: str, status: str, run_id: int | None, using: str
) -> bool | None:  # pragma: no mutate block
    """:func:`interrupt` as one call of ``llmchat_run_interrupt_v1`` (:mod:`.pg`); ``None``
    when the run waits for decisions (its calls get results first: the statements)."""
    outcome, stopped, next_run, next_status, next_lease = pg.call(
        using,
        "llmchat_run_interrupt_v1",
        (chat_id, "bigint"),
        (run_id, "bigint"),
        (reason, "text"),
        (status, "text"),
        (base.clock_position(), "bigint"),
        (QUEUED_POSITION, "bigint"),
    )
    if outcome == "statements":
        return None
    if outcome == "ended":
        base.tell_followers(chat_id, stopped, status)
        following = _next_run(chat_id, next_run, next_status, next_lease)
        if _waits_for_a_worker(following):
            transaction.on_commit(lambda: _send(following))
    return outcome in ("asked", "ended")


def _answer_waiting_calls(chat_id: int, run: Run) -> None:
    """A run stopped while it waited for decisions: each waiting call gets an error
    result, so the transcript holds no call without its result."""
    result = ToolResult.error("cancelled", "The run was stopped before this call was decided.")
    answer_calls(chat_id, run, result)


def answer_calls(chat_id: int, run: Run, result: ToolResult) -> None:
    """Answer every call of the chat still without a result with ``result`` (in the
    caller's transaction, under the chat's lock): the run that would have answered them
    ended."""
    waiting = list(ToolCall.objects.filter(chat_id=chat_id, result__isnull=True).order_by("id"))
    if waiting:
        save_tool_results(Chat(pk=chat_id), [(call, result) for call in waiting], run_id=run.pk)


def decide(chat_id: int, call: ToolCall, approval: str) -> Run | None:
    """Record ``approval`` (``"approved"``/``"denied"``) on a call the chat's run waits
    for, once: a second decision on the same call raises :class:`AlreadyDecided`; a run
    that is not waiting raises :class:`ChatBusyError`. Returns the run when this was
    the last decision it waited for (it is queued again: run it, or send its task). The
    run queued again passes the gate as a new run does: over a limit
    :class:`BudgetExceededError`, and the decision is not recorded."""
    if approval not in ("approved", "denied"):
        raise ArgumentError(f"approval must be 'approved' or 'denied', got {approval!r}")
    try:
        with transaction.atomic():
            return _decide(chat_id, call, approval)
    except BudgetExceededError as exc:
        chat = Chat.objects.filter(pk=chat_id).first()
        if chat is not None:
            limits.exceeded(chat, exc)  # after the rollback: a receiver may write
        raise


def _decide(chat_id: int, call: ToolCall, approval: str) -> Run | None:
    _lock(chat_id)
    taken = ToolCall.objects.filter(pk=call.pk, approval="", result__isnull=True).update(
        approval=approval
    )
    if not taken:
        raise AlreadyDecided(f"tool call {call.call_id!r} has already been answered")
    head = _head(chat_id)
    if head is None or head.status != Run.AWAITING_APPROVAL:
        raise ChatBusyError(
            f"chat {chat_id} has no run waiting for a decision (it is running: wait for "
            "it to pause)"
        )
    _admitted(head)
    if ToolCall.objects.filter(chat_id=chat_id, approval="", result__isnull=True).exists():
        return None
    if limits.enabled():
        owner = Chat._base_manager.filter(pk=chat_id).values_list("user_id", flat=True).first()
        # the run keeps the reservation of its admission: nothing more is reserved
        _admit(Chat(pk=chat_id, user_id=owner), reserve=False)
    Run.objects.filter(pk=head.pk, status__in=RESUME.sources).update(status=RESUME.target)
    _sync_chat(chat_id)
    head.status = RESUME.target
    return head


class AlreadyDecided(ArgumentError):
    """The tool call was approved, denied or answered already."""
