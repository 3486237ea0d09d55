"""The chat's run verbs: what starts, continues, decides or stops a run of the loop, each
with its async twin (``aask`` for ``ask``, ``astream`` for ``stream``, ...).

The verbs reach the loop one way: the class named by ``runner_class``
(:meth:`ChatRuns._loop`). The async twins run the synchronous verb in a worker thread
(:mod:`django_llmchat.loop.aio`): one implementation, two faces.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.utils.module_loading import import_string

from ..errors import ArgumentError
from ..loop.aio import call_in_thread, stream_in_thread
from .message import branching
from .run import Run

RUN_VERBS = (
    ("ask", "aask"),
    ("stream", "astream"),
    ("ask_later", "aask_later"),
    ("resume", "aresume"),
    ("complete", "acomplete"),
    ("regenerate", "aregenerate"),
    ("branch_from", "abranch_from"),
    ("switch_to", "aswitch_to"),
    ("approve", "aapprove"),
    ("deny", "adeny"),
    ("interrupt", "ainterrupt"),
    ("cancel", "acancel"),
)
"""Every run verb of a chat and its async twin."""


def _attachment_items(attachments) -> list[tuple]:
    """``(filename, bytes[, mime])`` tuples or Django ``File`` objects, as tuples."""
    items = []
    for item in attachments or []:
        if isinstance(item, tuple):
            items.append(item)
        elif hasattr(item, "read"):
            name = getattr(item, "name", "attachment") or "attachment"
            mime = getattr(item, "content_type", None)
            data = item.read()
            items.append((name.rsplit("/", 1)[-1], data, mime) if mime else (name, data))
        else:
            raise ArgumentError(f"cannot attach {item!r}: give (filename, bytes) or a File")
    return items


class _BranchedEvents:
    """A run's events whose prompt follows ``parent``: its admission (an explicit
    ``admit()``, else the first ``next()``) happens inside :func:`branching`."""

    def __init__(self, events: Any, parent: Any) -> None:
        self._events = events
        self._parent = parent
        self._admitted = False

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._admitted:
            return next(self._events)
        self._admitted = True
        with branching(self._parent):
            return next(self._events)

    def admit(self) -> _BranchedEvents:
        if not self._admitted:
            self._admitted = True
            with branching(self._parent):
                self._events.admit()
        return self

    def close(self) -> None:
        self._events.close()

    def __getattr__(self, name: str) -> Any:  # the session's status, error, finished...
        return getattr(self._events, name)


class ChatRuns:
    """The run verbs of :class:`~django_llmchat.models.AbstractChat` (a mixin)."""

    runner_class = "django_llmchat.loop.runner.Runner"
    """Dotted path of the class running this chat's loop (the loop is built on the models,
    so a chat names it rather than importing it). A subclass may name its own Runner."""

    def _loop(self):
        """The class named by :attr:`runner_class`: the one way the verbs reach the loop."""
        return import_string(self.runner_class)

    def runner(self, context=None):
        """The runner for one call of this chat's loop (the chat must be saved; a verb
        with a prompt saves an unsaved chat with it)."""
        if self.pk is None:
            raise ArgumentError(
                "save the chat before running it (Chat.objects.create(...) or chat.save()); "
                "an unsaved chat is saved with its first prompt"
            )
        return self._loop()(self, context=context)

    @staticmethod
    def _check_prompt_type(prompt: Any, attachments: Any) -> list[tuple]:
        if prompt is None:
            if attachments:
                raise ArgumentError("attachments need a prompt")
            return []
        if not isinstance(prompt, str):
            raise ArgumentError(f"prompt must be a string, got {type(prompt).__name__}")
        return _attachment_items(attachments)

    def _runner_for(self, context, double_texting, prompt: Any = None):
        """The runner of a prompt's verb: an unsaved chat asked a prompt is saved with it
        (in the admission's transaction: :func:`django_llmchat.runs.enqueue`)."""
        from ..runs.policy import checked

        policy = checked(double_texting)
        if self.pk is None and isinstance(prompt, str):
            runner = self._loop()(self, context=context)
        else:
            runner = self.runner(context)
        runner.double_texting = policy
        return runner

    # -- a prompt: ask, stream, ask_later (each takes ``parent=``) ------------------------
    def ask(
        self,
        prompt: str | None = None,
        attachments=None,
        *,
        context=None,
        parent=None,
        double_texting: str | None = None,
    ):
        """Send ``prompt`` (saved first) and run the loop with non-streaming requests;
        returns the final assistant Message (``None`` when a guardrail blocked the run).
        ``chat.last_run`` is the run. Asked while another run of the chat works, it waits
        for its turn (or follows ``double_texting``: ``"enqueue"``, ``"reject"``,
        ``"interrupt"``, ``"rollback"``; default the chat's ``double_texting``, else
        ``LLMCHAT["DOUBLE_TEXTING"]``). ``parent``: the prompt starts a new branch after
        that message (a Message of this chat of any branch, its id, or
        ``django_llmchat.models.branches.ROOT``; see :meth:`branch_from`). With no prompt, the
        saved history is continued (:meth:`resume`)."""
        runner = self._runner_for(context, double_texting, prompt)
        items = self._check_prompt_type(prompt, attachments)
        if parent is None:
            return runner.ask(prompt, items)
        if prompt is None:
            raise ArgumentError("a branch needs a prompt")
        with branching(parent):
            return runner.ask(prompt, items)

    def stream(
        self,
        prompt: str | None = None,
        attachments=None,
        *,
        context=None,
        parent=None,
        double_texting: str | None = None,
    ):
        """An iterator of the stream events of a run answering ``prompt``. Nothing happens
        until the first ``next()``: then the prompt is stored with its run, before the first
        event. Closing the iterator (or dropping it) ends the run ``cancelled``, its usage
        row kept. With no prompt, the saved history is continued (a retry after an
        ``IncompleteStreamError`` adds no second user turn). ``parent`` and
        ``double_texting``: as :meth:`ask`."""
        runner = self._runner_for(context, double_texting, prompt)
        items = self._check_prompt_type(prompt, attachments)
        if parent is not None and prompt is None:
            raise ArgumentError("a branch needs a prompt")
        events = runner.events(prompt, items, stream=True)
        return events if parent is None else _BranchedEvents(events, parent)

    def ask_later(
        self, prompt: str, attachments=None, *, parent=None, double_texting: str | None = None
    ):
        """Store ``prompt`` (before-guardrails applied) with a queued run, and let a worker
        answer it: the Celery task ``tasks.complete_chat`` is sent when the current
        transaction commits. Returns the user Message (``None`` when a before-guardrail
        blocked the prompt: nothing is stored, ``chat.last_run.tripwire`` says why);
        ``chat.last_run`` is the queued run.

        Prompts asked while an earlier one is still being answered are queued runs, each
        answered in order. With no Celery broker configured, the task runs in this process
        (see ``LLMCHAT["TASKS_EAGER_WITHOUT_BROKER"]``). ``parent``: as :meth:`ask`
        (refused with ``ChatBusyError`` while a run is unfinished). ``double_texting``: as
        :meth:`ask` (``"reject"`` raises
        :class:`~django_llmchat.errors.DoubleTextingRejected` while a run is unfinished;
        ``"interrupt"``/``"rollback"`` stop it, and the worker answers this prompt next)."""
        if not isinstance(prompt, str):
            raise ArgumentError(f"prompt must be a string, got {type(prompt).__name__}")
        items = _attachment_items(attachments)
        runner = self._runner_for(None, double_texting, prompt)
        if parent is None:
            return runner.ask_later(prompt, items)
        with branching(parent):
            return runner.ask_later(prompt, items)

    def branch_from(
        self,
        parent,
        prompt: str,
        attachments=None,
        *,
        context=None,
        double_texting: str | None = None,
    ):
        """Ask ``prompt`` as a new branch after ``parent`` (a Message of this chat, its
        id, or ``django_llmchat.models.branches.ROOT`` to start over): the active path's messages
        after ``parent`` leave the path (kept as the other branch) and the reply answers
        the new path alone. ``chat.ask(prompt, parent=parent)``."""
        return self.ask(
            prompt, attachments, context=context, parent=parent, double_texting=double_texting
        )

    # -- no prompt: resume, regenerate, switch_to -----------------------------------------
    def resume(self, *, context=None):
        """Run the loop on the saved history without a new prompt: answers the tool calls
        still waiting for their results, resumes an interrupted run, retries a reply that
        broke off. Returns the final assistant Message. (RubyLLM calls it ``complete``:
        :meth:`complete` is the same.)"""
        return self.ask(None, context=context)

    def complete(self, *, context=None):
        """:meth:`resume`, under RubyLLM's name."""
        return self.resume(context=context)

    def regenerate(self, *, context=None):
        """Answer the active path's last prompt again: the reply it had (with its tool
        calls and results) leaves the path, kept as a sibling of the new one (see
        ``Message.alternatives()``). Returns the new final Message."""
        return self.runner(context).regenerate()

    def switch_to(self, message):
        """Make the branch through ``message`` (a Message of this chat or its id) the
        active path: its ancestors, itself, then the newest reply each time down to a
        leaf. Returns the new active leaf. :class:`~django_llmchat.errors.ChatBusyError`
        while a run of the chat is unfinished."""
        return self.messages.get(pk=self._loop().switch_to(self, message))

    # -- a run waiting for a decision: approve, deny -------------------------------------
    def approve(self, call_id: str, *, resume: bool = True):
        """Approve a tool call waiting for approval; when none is left waiting, the run
        resumes here (returns the final Message, else ``None``)."""
        return self.runner().decide(call_id, "approved", resume=resume)

    def deny(self, call_id: str, *, resume: bool = True):
        """Deny a tool call: the model gets a ``denied`` error result and the run resumes."""
        return self.runner().decide(call_id, "denied", resume=resume)

    # -- stopping: interrupt, cancel -------------------------------------------------------
    def interrupt(self, reason: str | None = None) -> bool:
        """Ask the chat's current run (in any process) to stop between chunks or steps; it
        ends with ``Interrupt(reason=reason)``, the transcript valid, and :meth:`resume`
        continues it. A run waiting for a tool-call decision, or queued, ends at once.
        Returns whether there was a run to stop (the first of concurrent requests wins)."""
        if reason is not None and not isinstance(reason, str):
            raise ArgumentError(f"reason must be a string or None, got {type(reason).__name__}")
        if self.pk is None:
            return False
        return self._loop().interrupt(self, reason)

    def cancel(self) -> bool:
        """``interrupt("cancelled")``: the run ends ``cancelled``, with
        ``Interrupt(reason="cancelled")``."""
        return self.interrupt("cancelled")

    # -- the async twins ------------------------------------------------------------------
    async def aask(
        self,
        prompt: str | None = None,
        attachments=None,
        *,
        context=None,
        parent=None,
        double_texting: str | None = None,
    ):
        """Async twin of :meth:`ask` for ASGI views."""
        return await call_in_thread(
            self.ask,
            prompt,
            attachments,
            context=context,
            parent=parent,
            double_texting=double_texting,
        )

    def astream(
        self,
        prompt: str | None = None,
        attachments=None,
        *,
        context=None,
        parent=None,
        double_texting: str | None = None,
    ):
        """Async twin of :meth:`stream`: an async iterator of events. The loop runs in a
        worker thread; the prompt is saved before the first event."""
        return stream_in_thread(
            lambda: self.stream(
                prompt,
                attachments,
                context=context,
                parent=parent,
                double_texting=double_texting,
            )
        )

    async def aask_later(
        self, prompt: str, attachments=None, *, parent=None, double_texting: str | None = None
    ):
        """Async twin of :meth:`ask_later` (the task is sent when the worker thread's
        transaction commits: at once, outside an atomic block)."""
        return await call_in_thread(
            self.ask_later, prompt, attachments, parent=parent, double_texting=double_texting
        )

    async def abranch_from(
        self,
        parent,
        prompt: str,
        attachments=None,
        *,
        context=None,
        double_texting: str | None = None,
    ):
        """Async twin of :meth:`branch_from`."""
        return await call_in_thread(
            self.branch_from,
            parent,
            prompt,
            attachments,
            context=context,
            double_texting=double_texting,
        )

    async def aresume(self, *, context=None):
        """Async twin of :meth:`resume`."""
        return await call_in_thread(self.resume, context=context)

    async def acomplete(self, *, context=None):
        """Async twin of :meth:`complete` (:meth:`aresume`)."""
        return await call_in_thread(self.complete, context=context)

    async def aregenerate(self, *, context=None):
        """Async twin of :meth:`regenerate`."""
        return await call_in_thread(self.regenerate, context=context)

    async def aswitch_to(self, message):
        """Async twin of :meth:`switch_to`."""
        return await call_in_thread(self.switch_to, message)

    async def aapprove(self, call_id: str, *, resume: bool = True):
        """Async twin of :meth:`approve`."""
        return await call_in_thread(self.approve, call_id, resume=resume)

    async def adeny(self, call_id: str, *, resume: bool = True):
        """Async twin of :meth:`deny`."""
        return await call_in_thread(self.deny, call_id, resume=resume)

    async def ainterrupt(self, reason: str | None = None) -> bool:
        """Async twin of :meth:`interrupt`."""
        return await call_in_thread(self.interrupt, reason)

    async def acancel(self) -> bool:
        """Async twin of :meth:`cancel`."""
        return await call_in_thread(self.cancel)

    # -- what the verbs leave -------------------------------------------------------------
    @property
    def last_run(self):
        """The chat's latest run (``None`` before the first). After ``ask()``,
        ``stream()`` or ``ask_later()`` in this process: the run that call made, with
        ``message``, ``interrupt`` and ``tripwire`` as that call saw them."""
        found = self.__dict__.get("_last_run")
        if found is not None:
            return found
        if self.pk is None:
            return None
        return self.runs.order_by("-id").first()

    @last_run.setter
    def last_run(self, run) -> None:
        self.__dict__["_last_run"] = run

    @property
    def cancel_requested(self) -> bool:
        """Whether a stop was asked for the run working now."""
        if self.pk is None:
            return False
        return Run.objects.filter(chat=self, status=Run.RUNNING, cancel_requested=True).exists()
