"""Admitting a run: its prompt stored with the run through the one gate
(:func:`django_llmchat.runs.enqueue`), and the run's first call made ready before the
admission when the loop has nothing else to do first. :meth:`Runner.admit
<django_llmchat.loop.runner.Runner.admit>` calls :func:`admit`."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.db import transaction

from .. import runs
from ..db.prepared import database_of, new_instance
from ..errors import ChatBusyError
from ..events import StreamEvent
from ..models import Message
from ..models.llm_model import model_limits
from ..models.message import clock_position
from .attempts import FirstCall
from .history import History
from .transcript import (
    answered_history,
    last_reported_step,
    load_history,
    new_chat_history,
    provider_message,
)

if TYPE_CHECKING:
    from .runner import Runner


def admit(
    runner: Runner,
    prompt: str | None,
    attachments: list[tuple] | None = None,
    *,
    regenerate: bool = False,
    later: bool = False,
) -> list:
    """Store ``prompt`` with its run through the gate, without waiting for its turn; the
    before-guardrails' events (see :meth:`Runner.admit`)."""
    chat = runner.chat
    events: list[StreamEvent] = []
    message = None
    if prompt is not None:
        text, events = runner.check_prompt(prompt)
        message = new_instance(Message, chat=chat, role="user", content=text)
        if runner.prompt_raw:
            message.raw = runner.prompt_raw
    elif not regenerate and not later:
        # continuing: the chat's next run, when nobody else is on it (a run queued
        # again after tool-call decisions, one whose worker died), is this one
        found = runs.claim(chat.pk)
        if found.execution is not None:
            runner.run_row, runner.execution = found.execution.run, found.execution
            return events
        if found.state == runs.PAUSED:
            raise ChatBusyError(
                f"chat {chat.pk} is waiting for a decision on its tool calls: approve "
                "or deny them (or cancel the run) first"
            )
    first = None
    if (
        not later
        and message is not None
        and runs.opens_attempt(chat, attachments, runner.double_texting)
    ):
        first = first_call(runner, message)
    if message is not None:
        # read after the path was: a path the admission finds as read is before it
        message.position = clock_position()
    task_id = uuid.uuid4().hex if later else ""
    unsaved = chat.pk is None  # saved by the admission, with the prompt
    run, execution = runs.enqueue(
        chat,
        message,
        attachments,
        task_id=task_id,
        start=not later,
        wait=not later,
        regenerate=regenerate,
        attempt=first.row if first is not None else None,
        seen=first.seen if first is not None else None,
        double_texting=runner.double_texting,
    )
    if unsaved:
        new_chat_history(chat)  # its empty history, kept now it has a key
    if first is not None and first.row.pk is not None:
        first.prompt.ref = message.pk  # what the reply follows
        runner.attempts.first = first
        runner.attempts.answering = (first.seen, first.prompt, message)
    runner.budget.admitted = run.verdict  # the admission's check serves the first call
    runner.run_row, runner.execution, runner.prompt = run, execution, message
    if later:
        chat_id, run_id = chat.pk, run.pk
        transaction.on_commit(
            lambda: runs.send(chat_id, run_id, task_id=task_id), using=database_of(chat)
        )
    return events


def first_call(runner: Runner, prompt: Message) -> FirstCall | None:
    """The run's first call made ready before its admission (:class:`FirstCall`): the
    history read, the prompt added, the request built and estimated. ``None`` when the
    loop has other work first (tool calls unanswered, a compaction to store)."""
    chat = runner.chat
    # a chat this instance created, or the history this process stored last, needs no
    # read: the admission checks it
    loaded = new_chat_history(chat) or answered_history(chat) or load_history(chat)
    if loaded.pending:
        return None
    message = provider_message(prompt, calls=[], attachments=[])
    return _made_ready(runner, loaded, [*loaded.messages, message], message)


def claimed_first_call(runner: Runner) -> FirstCall | None:
    """A worker's run's first call made ready before its claim
    (:func:`django_llmchat.runs.claim` with ``attempt=``): the chat's path read, the request
    built on it and estimated, for the run answering the path's last message (a prompt
    stored by :meth:`~django_llmchat.models.Chat.ask_later` or a ``202``). ``None`` when the
    path ends otherwise (tool calls unanswered, a compaction to store, nothing read)."""
    # read (only what is new to this process): the prompt was stored by another request
    loaded = load_history(runner.chat)
    anchor, _, top = loaded.seen
    if loaded.pending or anchor is None or anchor != top or not loaded.messages:
        return None
    prompt = loaded.messages[-1]
    if prompt.role != "user" or prompt.ref != top:
        return None
    return _made_ready(runner, loaded, loaded.messages, prompt)


def _made_ready(runner: Runner, loaded, messages: list, prompt) -> FirstCall | None:
    """The first call on ``messages`` (the path ``loaded`` read, ending with ``prompt``):
    its request built and its attempt's pending row estimated; ``None`` when the history
    must be compacted first."""
    chat = runner.chat
    history = History(
        chat,
        runner.agent,
        messages,
        loaded.summary,
        loaded.tokens,
        limits=model_limits,
        last_step=last_reported_step,
    )
    request = history.fit_now(runner.request_for)
    if request is None:
        return None
    runner.history = history
    row = runner.attempts.pending_row(request, chat.provider, chat.model_id, "chat")
    return FirstCall(history, request, row, loaded.seen, prompt)
