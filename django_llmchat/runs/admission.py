"""The gate: every run is created here (:func:`enqueue`: a prompt, a continuation, a
regenerate), admitted in the transaction that writes it.

After the chat's lock the gate takes the user's lock (a PostgreSQL advisory lock; SQLite's
write lock is already held; a row lock on the user elsewhere), checks every spending limit
(:func:`django_llmchat.runs.limits.admit`) and only then writes. Racing requests of one user are
so admitted one at a time, whatever path they came by, and ``concurrent_runs`` is exact. A
run queued again by its last tool-call decision passes the same gate
(:mod:`.decisions`).

A new run reserves its expected cost (:func:`django_llmchat.runs.limits.reservation`), written
here and nowhere else (``Run.reserved_cost``, with the run's row): while the run is
unfinished the USD limits count it, so racing runs of a user with a USD budget are
admitted only while their reservations fit in it. The run's end, whichever transition
ends it, releases it (the limits count unfinished runs only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

from django.db import connections, router, transaction
from django.db.models import Count, Max
from django.utils import timezone

from ..conf import settings
from ..db.prepared import (
    INT_ARG,
    PreparedInsert,
    PreparedQuery,
    mark_saved,
    mark_unsaved,
    new_instance,
)
from ..errors import (
    ArgumentError,
    BudgetExceededError,
    ChatBusyError,
    DoubleTextingRejected,
    RunInProgress,
)
from ..models import Chat, IdempotencyKey, Message, Run, Usage, branches
from ..models.message import QUEUED_POSITION
from . import limits, pg
from .base import (
    _CHAT_RUNNING,
    _CHAT_STATUS,
    _head,
    _lease_until,
    _lock,
    hold_if_idle,
    worker_name,
)
from .execution import Execution
from .policy import ENQUEUE, REJECT, resolve
from .transitions import ADMIT, START

_INSERT_CHAT = PreparedInsert(Chat)
_INSERT_MESSAGE = PreparedInsert(Message)
_INSERT_RUN = PreparedInsert(Run)
_INSERT_USAGE = PreparedInsert(Usage)
_INSERT_KEY = PreparedInsert(IdempotencyKey)
# the path as the admission finds it, the prompt aside: its message count, its highest id
_PATH_SEEN = PreparedQuery(
    lambda chat_id, prompt_id: (
        Message.objects.filter(chat_id=chat_id, on_path=True, position__lt=QUEUED_POSITION)
        .exclude(pk=prompt_id)
        .values("chat_id")
        .annotate(count=Count("id"), top=Max("id"))
        .values_list("count", "top")
    ),
    (INT_ARG, INT_ARG - 1),
)

# the chat's row lock, read (the admission's call takes it again, held)
_LOCK_CHAT_ROW = PreparedQuery(
    lambda chat_id: (
        Chat.objects.filter(pk=chat_id).select_for_update(no_key=True).values_list("pk")
    ),
)

# the advisory lock space of users' admissions: "llmc"
_USER_LOCK_SPACE = 0x6C6C6D63


def _lock_user(user_id: int) -> None:
    """Take the user's admission lock for this transaction, after the chat's: a
    PostgreSQL advisory lock (released at commit or rollback); on SQLite the chat's lock
    already holds the database's write lock; elsewhere a row lock on the user."""
    connection = connections[router.db_for_write(Run)]
    if connection.vendor == "sqlite":
        return
    if connection.vendor == "postgresql":
        key = ((int(user_id) + 2**31) % 2**32) - 2**31  # any id into the int4 key
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_USER_LOCK_SPACE, key])
        return
    from django.contrib.auth import get_user_model

    list(get_user_model()._default_manager.select_for_update().filter(pk=user_id).values("pk"))


def _admit(
    chat: Chat, prompt: Message | None = None, attachments=None, *, reserve: bool = True
) -> limits.Verdict | None:
    """The gate, in the caller's transaction after the chat's lock: the user's lock, then
    every limit. Over a hard limit :class:`BudgetExceededError` (the caller rolls back
    and sends the signal). ``reserve``: a new run answering ``prompt`` (``None``: the
    saved history) reserves its expected cost (``verdict.reservation``)."""
    if not limits.enabled() or chat.user_id is None:
        return None
    _lock_user(chat.user_id)
    tokens = None
    if reserve:
        tokens = limits.prompt_tokens(prompt.content, attachments) if prompt is not None else 0
    return limits.admit(chat, signal=False, prompt=tokens)


_ON_ADMIT: ContextVar[Callable[[Run], None] | None] = ContextVar("llmchat_on_admit", default=None)


@contextmanager
def on_admit(callback: Callable[[Run], None]) -> Iterator[None]:
    """While in this block, ``callback(run)`` is called inside the transaction that admits
    a run (:func:`enqueue`, after the run row is written) or records a tool-call decision
    (:func:`decide`, with the run waiting for it), under the chat's lock: what it writes
    commits with the run, and an exception it raises rolls everything back."""
    token = _ON_ADMIT.set(callback)
    try:
        yield
    finally:
        _ON_ADMIT.reset(token)


_KEY: ContextVar[Any] = ContextVar("llmchat_admission_key", default=None)


@contextmanager
def keyed(row: Any) -> Iterator[None]:
    """While in this block, ``row`` (an unsaved
    :class:`~django_llmchat.models.IdempotencyKey`, its ``run`` not set) is inserted in the
    transaction that admits a run, naming it (:func:`enqueue`, on PostgreSQL in the
    admission's one call; :func:`decide`): the request's key, committed with its run or
    not at all. A key already stored fails the admission with ``IntegrityError`` (the
    unique constraint), and nothing is stored. Inserted once: ``row.pk`` is set then."""
    token = _KEY.set(row)
    try:
        yield
    finally:
        _KEY.reset(token)


def _admitted(run: Run) -> None:
    row = _KEY.get()
    if row is not None and row.pk is None:
        row.run_id, row.chat_id = run.pk, run.chat_id
        row.save(force_insert=True, using=router.db_for_write(type(row)))
    callback = _ON_ADMIT.get()
    if callback is not None:
        callback(run)


# -- enqueue and claim ----------------------------------------------------------------------
def enqueue(
    chat: Chat,
    prompt: Message | None = None,
    attachments: list[tuple] | None = None,
    *,
    task_id: str = "",
    start: bool = False,
    wait: bool = False,
    regenerate: bool = False,
    attempt: Usage | None = None,
    seen: tuple[int | None, int, int | None] | None = None,
    double_texting: str | None = None,
) -> tuple[Run, Execution | None]:
    """Admit and store ``prompt`` (unsaved, with its attachments) and a queued run
    answering it, in one transaction (the gate: the chat's lock, the user's lock, every
    limit; over one :class:`BudgetExceededError` and nothing is stored). ``start=True``
    also claims the run when nothing is ahead of it (the caller runs it now).
    ``wait=True``: the caller will wait for the run's turn (the run holds a lease the
    waiting renews, so nobody else takes it); it raises :class:`ChatBusyError` instead
    when the chat's run waits for a tool-call decision. ``regenerate=True`` (no prompt):
    the messages after the active path's last prompt leave the path (kept, as siblings of
    the new reply) and the new run answers again; :class:`ChatBusyError` while a run is
    unfinished. Inside :func:`django_llmchat.models.branches.branching`, the prompt follows the
    given message instead of the active leaf (a new branch; :class:`ChatBusyError` while
    a run is unfinished).

    ``attempt`` (with :func:`opens_attempt`): the run's first attempt, its pending usage
    row (unsaved), built from the chat's path as the caller read it before, ``seen`` =
    ``(its active leaf's id, its message count, its highest message id)``. It is written in
    the admission's own call when the run starts and the path is still the one read (its
    ``pk`` is set then); otherwise nothing of it is written and the caller reads again.

    ``double_texting``: what ``prompt`` does while a run of the chat is unfinished
    (:mod:`.policy`; ``None``: the context's, the chat's, the setting's): ``reject``
    raises :class:`DoubleTextingRejected` (nothing stored), ``interrupt`` and ``rollback``
    stop the unfinished runs first, all under the chat's lock in this transaction (the
    admission then takes the statements, not the one call).

    An unsaved ``chat`` (``Chat(...)``, with a prompt) is saved here, in the admission's
    transaction: its row commits with its first prompt and run, or not at all (refused by
    a limit, it is unsaved again). Nobody else can see it before, so its lock and its
    empty path are not read.

    On PostgreSQL the one call admitting a run this process answers itself
    (``start=True``), in a transaction of its own (not inside the caller's), commits
    without waiting for the disk (:func:`_synchronous`).

    The admission's verdict (``None`` with limits off) is ``run.verdict``."""
    new_chat = chat.pk is None
    if new_chat and (prompt is None or regenerate):
        raise ArgumentError(
            "save the chat before running it (Chat.objects.create(...) or chat.save()); "
            "an unsaved chat is saved with its first prompt"
        )
    if new_chat and prompt.chat_id is not None:
        raise ArgumentError(
            f"the prompt is a message of chat {prompt.chat_id}, not of this unsaved chat"
        )
    if regenerate and prompt is not None:
        raise ArgumentError("a regenerate answers the last prompt again: it takes no prompt")
    policy = ENQUEUE if prompt is None else resolve(chat, double_texting)
    worker = worker_name()
    using = router.db_for_write(Run)
    synchronous = _synchronous(start, using)  # pragma: no mutate
    try:
        # the PostgreSQL face (one call) is tested on PostgreSQL, not by the mutation
        # campaign (on SQLite); it commits alone, the statements (or a callback's writes
        # with the call) in one transaction
        one_call = _in_one_call(chat, attachments, regenerate, using, policy)  # pragma: no mutate
        # the gate's limits, read under the chat's and the user's locks before the call,
        # in its transaction
        gated = one_call and limits.enabled() and chat.user_id is not None  # pragma: no mutate
        # a new chat's row goes in the one call too, unless a receiver of its save wants it
        # or the gate reads it first (its limits count the chat's requests)
        chat_in_call = (  # pragma: no mutate
            new_chat and one_call and not gated and pg.available(using, Chat)
        )
        callback = _ON_ADMIT.get()  # pragma: no mutate
        key = _key_in_call(one_call, using)  # pragma: no mutate
        alone = (  # pragma: no mutate
            one_call
            and callback is None
            and new_chat == chat_in_call
            and not gated
            and _key_alone(key, using)
        )
        with nullcontext() if alone else transaction.atomic(using=using):  # pragma: no mutate
            if new_chat and not chat_in_call:
                _save_new_chat(chat, prompt, attempt, using)
            if one_call:  # pragma: no mutate block
                verdict = _gate_before_call(chat, prompt, attachments) if gated else None
                run, claimed, chat.status = _enqueue_call(
                    chat,
                    prompt,
                    task_id,
                    start,
                    wait,
                    worker,
                    using,
                    attempt,
                    seen,
                    chat_in_call,
                    key,
                    verdict,
                    synchronous,
                )
            else:
                run, claimed, chat.status = _enqueue(
                    chat,
                    prompt,
                    attachments,
                    task_id,
                    start,
                    wait,
                    regenerate,
                    worker,
                    policy,
                    new_chat,
                )
                if claimed and attempt is not None and seen is not None:
                    _open_first_attempt(chat.pk, prompt, run, attempt, seen, new_chat)
    except BaseException as exc:
        if new_chat and chat.pk is not None:
            mark_unsaved(chat)  # its row rolled back with the rest
        if isinstance(exc, BudgetExceededError):
            limits.exceeded(chat, exc)  # after the rollback: a receiver may write
        raise
    return run, (Execution(run, worker=worker) if claimed else None)


def _synchronous(start: bool, using: str) -> bool:  # pragma: no mutate block
    """Whether the admission's commit waits for the disk (its call's ``p_synchronous``):
    always, but for a run its own process answers right after (``start``), admitted in a
    transaction of its own (the call's, or the gate's), with
    ``LLMCHAT["ADMISSION_SYNCHRONOUS_COMMIT"]`` off. That run's end commits synchronously
    and makes the admission durable with it (PostgreSQL flushes its WAL in order); a crash
    of the database server in between loses both, and the caller, still waiting for the
    reply, gets the error. A crash of this process loses nothing: the database has the
    admission. Inside the caller's transaction the commit is the caller's, and waits."""
    if not start or settings.ADMISSION_SYNCHRONOUS_COMMIT:
        return True
    return connections[using].in_atomic_block


def _save_new_chat(chat: Chat, prompt: Message, attempt: Usage | None, using: str) -> None:
    """An unsaved chat's row, first in its first admission's transaction; the prompt and
    the first attempt's row (built before the chat had a key) name it."""
    chat.save(using=using)
    prompt.chat = chat
    if attempt is not None:
        attempt.chat = chat


def _enqueue(
    chat,
    prompt,
    attachments,
    task_id,
    start,
    wait,
    regenerate,
    worker,
    policy,
    new_chat,
):
    if new_chat:  # written in this transaction: no other can see it, it has no run
        head = None
    elif not _lock(chat.pk):
        raise ArgumentError(f"chat {chat.pk} does not exist")
    else:
        head = _head(chat.pk)
    if head is not None and policy != ENQUEUE:
        head = _double_texted(chat, head, policy)
    if wait and head is not None and head.status == Run.AWAITING_APPROVAL:
        raise _paused(chat.pk)
    if regenerate:
        _drop_last_reply(chat, head)
    branch = branches.pending_branch() if prompt is not None else None
    after = None  # the (id, position) the prompt follows
    if branch is not None:  # a prompt after a given message: a new branch
        after = branches.branch_here(chat.pk, branch, in_progress=head is not None)
        prompt.parent_id = None if after is None else after[0]
    verdict = _admit(chat, prompt, attachments)
    if prompt is not None:
        _place_prompt(chat, prompt, attachments, head, branch, after, new_chat)
    run = new_instance(Run, chat=chat, prompt=prompt, task_id=task_id[:255], status=ADMIT.target)
    if verdict is not None:
        run.reserved_cost = verdict.reservation
    now = timezone.now()
    claimed = start and head is None
    if claimed:
        run.status, run.attempt, run.started_at = START.target, 1, now
        run.worker, run.lease_expires_at = worker, _lease_until()
    elif wait:
        run.worker, run.lease_expires_at = worker, _lease_until()
    _INSERT_RUN.save(run)
    _admitted(run)
    if claimed:
        _CHAT_RUNNING.run(chat.pk, active_run=run.pk)
    elif head is None:
        _CHAT_STATUS.run(chat.pk, status=Run.QUEUED)
    run.verdict = verdict
    return run, claimed, (run.status if head is None else head.status)


def _open_first_attempt(
    chat_id: int, prompt, run: Run, attempt: Usage, seen, new_chat: bool
) -> None:
    """The started run's first attempt, its pending usage row, written in the
    admission's transaction when the path is still the one the caller read (``seen``: its
    active leaf, which the prompt now follows, its message count and highest id, the prompt
    aside); otherwise nothing is written and the caller reads the path again. A chat
    saved in this transaction has an empty path."""
    after, count, top = seen
    if prompt is None or prompt.parent_id != after:
        return
    if new_chat:
        found = [(0, None)]
    else:
        found = _PATH_SEEN.values(chat_id, prompt.pk)
    if (tuple(found[0]) if found else (0, None)) != (count, top):
        return
    attempt.run_id = run.pk
    _INSERT_USAGE.save(attempt)


def _place_prompt(chat, prompt, attachments, head, branch, after, new_chat) -> None:
    """Where the admitted prompt goes, under the chat's lock (queued behind ``head``,
    after the active leaf, or on its new ``branch`` after ``after``), and stores it."""
    if branch is None and head is not None:
        prompt.position += QUEUED_POSITION  # its parent is given when it is placed
    elif branch is None:
        # it follows the active leaf (a chat saved in this transaction has none)
        after = None if new_chat else branches.leaf_row(chat.pk)
        prompt.parent_id = None if after is None else after[0]
    if after is not None and prompt.position <= after[1]:
        # its clock was read before the lock: a reply stored meanwhile reads later
        prompt.position = after[1] + 1
    if attachments:
        chat._insert(prompt, attachments)
    else:
        _INSERT_MESSAGE.save(prompt)


def _double_texted(chat: Chat, head: Run, policy: str) -> Run | None:
    """A prompt while ``head`` is unfinished, under the chat's lock: refused (``reject``)
    or the unfinished runs stopped (``interrupt``, ``rollback``); the head after it."""
    if policy == REJECT:
        raise DoubleTextingRejected(
            f"chat {chat.pk} has a run {head.status.replace('_', ' ')}: its double-texting "
            "policy 'reject' refuses a new prompt until the run ends (or is cancelled)"
        )
    return stop_unfinished(chat.pk, policy)


def stop_unfinished(chat_id: int, policy: str) -> Run | None:
    """Stops the chat's unfinished runs for a prompt under ``interrupt`` or ``rollback``:
    :func:`django_llmchat.runs.decisions.stop_for_prompt`, which the package puts here when
    it is imported (decisions reads the gate of this module, so this module does not import
    decisions)."""
    raise NotImplementedError("django_llmchat.runs sets stop_unfinished when it is imported")


def _in_one_call(
    chat: Chat, attachments, regenerate: bool, using: str, policy: str = ENQUEUE
) -> bool:  # pragma: no mutate block
    """Whether this admission is one call of ``llmchat_run_enqueue_v5`` (:mod:`.pg`): a
    prompt without attachments (or none), no regenerate, the ``enqueue`` double-texting
    policy (with limits to check for the chat's user, the call follows the gate's reads in
    its transaction: :func:`_gate_before_call`); otherwise the statements of
    :func:`_enqueue` (where the policy is applied under the chat's lock)."""
    if attachments or regenerate:
        return False
    if policy != ENQUEUE:
        return False
    if branches.pending_branch() is not None:  # a new branch: the statements
        return False
    return pg.available(using, Message, Run)


def opens_attempt(chat: Chat, attachments=None, double_texting: str | None = None) -> bool:
    """Whether :func:`enqueue` of a prompt (with ``attachments``, under ``double_texting``)
    can write its run's first attempt (``attempt=``) in its own transaction: a prompt
    without files after the active leaf (not a new branch), under the ``enqueue``
    policy. On PostgreSQL the one call writes it (not with a receiver of Usage's save
    signals: the caller opens it then), elsewhere the admission's statements."""
    if attachments or resolve(chat, double_texting) != ENQUEUE:
        return False
    return branches.pending_branch() is None


def _key_in_call(one_call: bool, using: str) -> Any:  # pragma: no mutate block
    """The request's key (:func:`keyed`) when the admission's one call stores it: not
    stored yet, and no receiver of its model's save signals (they are sent when the ORM
    saves it, with the run, by :func:`_admitted`)."""
    row = _KEY.get()
    if not one_call or row is None or row.pk is not None:
        return None
    return row if pg.available(using, type(row)) else None


def _gate_before_call(
    chat: Chat, prompt, attachments
) -> limits.Verdict | None:  # pragma: no mutate block
    """The gate of a PostgreSQL admission in one call with limits on, in the call's
    transaction: the chat's row lock (a chat saved in this transaction is ours already),
    the user's lock, every limit read and checked (:func:`_admit`); the call then takes the
    chat's lock again, held."""
    if chat.pk is not None and not _LOCK_CHAT_ROW.values(chat.pk):
        raise ArgumentError(f"chat {chat.pk} does not exist")
    return _admit(chat, prompt, attachments)


def _key_alone(key: Any, using: str) -> bool:  # pragma: no mutate block
    """Whether the admission's one call may go alone (no transaction of its own) as far
    as the request's key goes: no key to store, or the call stores it outside the caller's
    transaction (a key already stored fails the call: inside a transaction, in a
    savepoint of its own). A key the call does not store is saved with the run, in the
    admission's transaction."""
    pending = _KEY.get()
    if pending is None or pending.pk is not None:
        return True
    return key is not None and not connections[using].in_atomic_block


def _enqueue_call(
    chat,
    prompt,
    task_id,
    start,
    wait,
    worker,
    using,
    attempt=None,
    seen=None,
    new_chat=False,
    key=None,
    verdict=None,
    synchronous=True,
):  # pragma: no mutate block
    """:func:`_enqueue` as one call (chat's lock, head, prompt, run, the request's key,
    chat's status, and the first attempt's pending usage row when given; ``new_chat``: the
    unsaved chat's row first, instead of its lock and head; ``synchronous`` false: its
    commit does not wait for the disk)."""
    run = new_instance(Run, chat=chat, prompt=prompt, task_id=task_id[:255], status=ADMIT.target)
    if verdict is not None:
        run.reserved_cost = verdict.reservation
    now = timezone.now()
    lease = _lease_until() if (start or wait) else None
    after, count, top = seen if seen is not None else (None, 0, None)
    opened = attempt is not None and pg.available(using, Usage)
    chat_row = None
    if new_chat:
        chat._settle_new_row()
        chat_row = _INSERT_CHAT.row(chat, using)
    (
        outcome,
        new_chat_id,
        run_id,
        prompt_id,
        claimed,
        behind,
        parent,
        status,
        attempt_id,
        key_id,
    ) = pg.call(
        using,
        "llmchat_run_enqueue_v5",
        (chat.pk, "bigint"),
        (chat_row, "jsonb"),
        (None if prompt is None else _INSERT_MESSAGE.row(prompt, using), "jsonb"),
        (_INSERT_RUN.row(run, using), "jsonb"),
        (start, "boolean"),
        (wait, "boolean"),
        (worker, "text"),
        (now, "timestamptz"),
        (lease, "timestamptz"),
        (QUEUED_POSITION, "bigint"),
        (_INSERT_USAGE.row(attempt, using) if opened else None, "jsonb"),
        (after, "bigint"),
        (count, "bigint"),
        (top, "bigint"),
        (None if key is None else _INSERT_KEY.row(key, using), "jsonb"),
        (synchronous, "boolean"),
    )
    if outcome == "no_chat":
        raise ArgumentError(f"chat {chat.pk} does not exist")
    if outcome == "paused":
        raise _paused(chat.pk)
    if new_chat:
        chat._inserted_as(new_chat_id, using)
        run.chat = chat
        if prompt is not None:
            prompt.chat = chat
        if attempt is not None:
            attempt.chat = chat
    if prompt is not None:
        prompt.placed = True  # its parent is decided by the function
        if behind:
            prompt.position += QUEUED_POSITION
        prompt.pk, prompt.parent_id = prompt_id, parent
        mark_saved(prompt, using)
    run.pk, run.prompt_id = run_id, prompt_id
    if claimed:
        run.status, run.attempt, run.started_at = START.target, 1, now
        run.worker, run.lease_expires_at = worker, lease
    elif wait:
        run.worker, run.lease_expires_at = worker, lease
    mark_saved(run, using)
    if attempt_id is not None:
        attempt.pk, attempt.run_id = attempt_id, run_id
        mark_saved(attempt, using)
    if key_id is not None:
        key.pk, key.run_id, key.chat_id = key_id, run_id, chat.pk
        mark_saved(key, using)
    _admitted(run)
    run.verdict = verdict
    return run, claimed, status


def _paused(chat_id: int) -> ChatBusyError:
    return ChatBusyError(
        f"chat {chat_id} is waiting for a decision on its tool calls: approve or "
        "deny them (or cancel the run) first"
    )


def _drop_last_reply(chat: Chat, head: Run | None) -> None:
    """Regenerate, under the chat's lock: the messages after the active path's last
    prompt leave the path (they stay stored, siblings of the new reply; every usage row
    stays). One regenerate of many racing
    wins; the others find its run unfinished."""
    if head is not None:
        raise RunInProgress(
            f"chat {chat.pk} has a run in progress: wait for it to end (or cancel it) "
            "before regenerating"
        )
    last = Run.objects.filter(chat_id=chat.pk).order_by("-id").values_list("pk", flat=True)
    last_id = last.first()
    if last_id is None:
        raise NothingToRegenerate(f"chat {chat.pk} has no reply to regenerate")
    if branches.drop_reply(chat.pk) < 0:
        raise NothingToRegenerate(f"chat {chat.pk} has no prompt to answer again")


def switch_to(chat_id: int, message: Any) -> int:
    """Make the branch through ``message`` (a Message of the chat or its id) the chat's
    active path (:func:`django_llmchat.models.branches.rewire`), under the chat's lock;
    :class:`RunInProgress` while a run of the chat is unfinished. Returns the new leaf's
    id."""
    with transaction.atomic():
        if not hold_if_idle(chat_id):
            raise branches.busy(chat_id, "switching branches")
        return branches.rewire(chat_id, message)


class NothingToRegenerate(ArgumentError):
    """A regenerate on a chat that has no run yet."""
