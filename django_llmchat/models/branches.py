"""The conversation as a tree, and the one module that writes its shape.

Every message but the system ones (instructions, summaries) follows a ``parent``: the
message it answers or continues. A regenerated reply and an edited prompt are siblings of
what they replace, so nothing stored is ever lost. The chat's **active path** is the line
from a root to a leaf that the transcript, the next request, the REST list and the admin
show; it is kept on the rows themselves (``Message.on_path``), so reading it is the same
indexed read as reading a chat without branches.

This module alone writes ``on_path`` and explicit parents. It changes them inside the run
transitions' transaction, after the chat's lock (:mod:`django_llmchat.runs` calls it), and
the change is refused with :class:`~django_llmchat.errors.RunInProgress` (a
``ChatBusyError``) while the chat has a run queued, running or waiting for a tool-call
decision: a run never sees its path move under it.

- :func:`branch_here` (a new prompt after a given parent, from ``runs.enqueue`` inside
  :func:`branching`: the path becomes exactly the parent's ancestors and the parent,
  whatever was active before; the prompt joins it);
- :func:`drop_reply` (a regenerate: the messages after the last prompt leave the path);
- :func:`roll_back` (a run stopped by a new prompt under the ``rollback`` policy: its
  replies and steps are deleted, the path ends where the run began);
- :func:`rewire` (``runs.switch_to``: the path through any message of the chat, its
  ancestors, itself, then the newest child each time down to a leaf);
- :func:`plant` (a whole tree at once, for a chat being imported:
  :mod:`django_llmchat.chats.imports`);
- :func:`reads_before_its_parent` (a run starting: its prompt moves after the message it
  follows when its clock was read before that message's);
- :func:`leaf_id`, :func:`siblings` (reads).

A system message stays outside the tree: instructions are always on the path; a summary is
on it while the last message it covers is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connections, router, transaction
from django.db.models import Exists, OuterRef, Q, Subquery

from ..db.prepared import PreparedQuery
from ..errors import ArgumentError, RunInProgress
from . import Message, ToolCall
from .message import QUEUED_POSITION, branching, pending_branch, transcript_changed

__all__ = [
    "ROOT",
    "branch_here",
    "busy",
    "check_parent",
    "branching",
    "drop_reply",
    "leaf_id",
    "leaf_row",
    "link_parents",
    "pending_branch",
    "plant",
    "reads_before_its_parent",
    "rewire",
    "roll_back",
    "siblings",
]


class _Root:
    """The parent of a prompt that starts the conversation anew (before every message)."""

    def __repr__(self) -> str:
        return "ROOT"


ROOT: Any = _Root()
"""Pass as ``parent`` to branch before the first message (an edit of the first prompt)."""


# on the hot path (every new prompt): compiled once per database
_LEAF = PreparedQuery(lambda chat_id: Message.objects.leaf_rows(chat_id)[:1])


def leaf_row(chat_id: int) -> tuple[int, int] | None:
    """``(id, position)`` of the chat's active leaf (the last message on its path, system
    messages aside), or ``None``. One query."""
    rows = _LEAF.rows(chat_id)
    return tuple(rows[0]) if rows else None


def leaf_id(chat_id: int) -> int | None:
    """The id of the chat's active leaf, or ``None``. One query."""
    row = leaf_row(chat_id)
    return row[0] if row is not None else None


def busy(chat_id: int, doing: str) -> RunInProgress:
    """The refusal of a change of the path while a run of the chat is unfinished."""
    return RunInProgress(
        f"chat {chat_id} has a run in progress: wait for it to end (or cancel it) before {doing}"
    )


def _changed(chat_id: int) -> None:
    """The path moved: this process's built histories of the chat are read again once
    the change commits (other processes see it from the rows: see ``load_history``)."""
    transaction.on_commit(lambda: transcript_changed.send(sender=Message, chat_id=chat_id))


def check_parent(chat_id: int, parent: Any) -> tuple[int, int] | None:
    """``(id, position)`` of ``parent`` (a Message, an id, or :data:`ROOT`: ``None``),
    checked to be a message of the chat a prompt may follow."""
    row = _parent_row(chat_id, parent)
    return None if row is None else row[:2]


def _parent_row(chat_id: int, parent: Any) -> tuple[int, int, bool] | None:
    """:func:`check_parent`, with whether the parent is on the active path. One query."""
    if parent is ROOT:
        return None
    pk = getattr(parent, "pk", parent)
    if isinstance(pk, bool) or not isinstance(pk, int):
        raise ArgumentError(f"parent must be a message of the chat or its id, got {parent!r}")
    row = (
        Message.objects.filter(pk=pk, chat_id=chat_id)
        .annotate(calls=Exists(ToolCall.objects.filter(message_id=OuterRef("pk"))))
        .values_list("role", "position", "summary_until_id", "on_path", "calls")
        .first()
    )
    if row is None:
        raise ArgumentError(f"message {pk} is not a message of chat {chat_id}")
    role, position, summary_until, on_path, calls = row
    if role == "system" or summary_until is not None:
        raise ArgumentError(f"message {pk} is a system message: a prompt cannot follow it")
    if role == "tool":
        raise ArgumentError(f"message {pk} is a tool result: a prompt cannot follow it")
    if calls:
        # its calls' results follow it: a prompt there would leave them off the path
        raise ArgumentError(
            f"message {pk} made tool calls: a prompt cannot follow it (follow the reply "
            "after their results)"
        )
    if position >= QUEUED_POSITION:
        raise ArgumentError(f"message {pk} is a prompt still waiting for its run")
    return pk, position, on_path


def branch_here(chat_id: int, parent: Any, *, in_progress: bool) -> tuple[int, int] | None:
    """A new prompt will follow ``parent``: in the caller's transaction, under the chat's
    lock (``in_progress``: the chat has an unfinished run, and the branch is refused), the
    active path becomes exactly the parent's ancestors and the parent, whatever was
    active before (with the instructions, and the summaries of what stays). Returns the
    parent's ``(id, position)`` for the prompt (``None`` for :data:`ROOT`).

    A parent on the path (the common case: the active leaf, or a prompt edited on the
    path) costs one read and one ``UPDATE`` (the path's messages after it leave); a
    parent off the path, one read of the chat's rows and at most two ``UPDATE``
    statements, as :func:`rewire`."""
    row = _parent_row(chat_id, parent)
    if in_progress:
        raise busy(chat_id, "branching")
    if row is not None and not row[2]:
        rows = _tree_rows(chat_id)
        parents = {r[0]: r[1] for r in rows if r[4] != "system"}
        path: set[int] = set()
        node: int | None = row[0]
        while node is not None and node not in path:
            path.add(node)
            node = parents.get(node)
        _apply(chat_id, rows, path)
        return row[:2]
    on_path = Message.objects.filter(chat_id=chat_id, on_path=True, position__lt=QUEUED_POSITION)
    if row is None:  # before the first message: only the instructions stay
        leaving = ~Q(role="system") | Q(summary_until__isnull=False)
    else:
        pk, position = row[:2]
        leaving = (
            (Q(position__gt=position) | Q(position=position, pk__gt=pk)) & ~Q(role="system")
        ) | Q(summary_until__position__gt=position)
        leaving |= Q(summary_until__position=position, summary_until_id__gt=pk)
    if on_path.filter(leaving).update(on_path=False):
        _changed(chat_id)
    return None if row is None else row[:2]


def reads_before_its_parent(chat_id: int, prompt_id: int | None, loaded: Any) -> bool:
    """Whether the prompt ``prompt_id`` of a run that stored no step yet reads before the
    messages of the path it follows in ``loaded`` (the history the run read when it
    started); if so it moves after them (one ``UPDATE``, only of a prompt placed before
    its parent) and the caller reads the history again. A prompt admitted in one call
    (PostgreSQL) took its place from the clock before the chat's lock: a reply another
    run stored meanwhile can read after it. The run holds the chat: nothing else moves
    the path now."""
    if prompt_id is None:
        return False
    messages = loaded.messages
    at = next((i for i, m in enumerate(messages) if m.ref == prompt_id), None)
    if at is None or not any(m.role != "system" for m in messages[at + 1 :]):
        return False
    path = Message.objects.filter(chat_id=chat_id, on_path=True, position__lt=QUEUED_POSITION)
    last = path.exclude(pk=prompt_id).order_by("-position").values("position")[:1]
    parent = Message.objects.filter(pk=OuterRef("parent_id")).values("position")[:1]
    moved = Message.objects.filter(pk=prompt_id, position__lte=Subquery(parent)).update(
        position=Subquery(last) + 1
    )
    if moved:
        _changed(chat_id)
    return bool(moved)


def drop_reply(chat_id: int) -> int:
    """A regenerate, in the caller's transaction under the chat's lock (the caller checked
    it is idle): the on-path messages after the path's last prompt leave the path (the
    new run's reply becomes their sibling). Returns how many left; ``-1`` when the path
    has no prompt."""
    on_path = Message.objects.filter(chat_id=chat_id, on_path=True, position__lt=QUEUED_POSITION)
    prompt = on_path.filter(role="user").order_by("-position", "-id").values_list("position", "pk")
    found = prompt.first()
    if found is None:
        return -1
    position, pk = found
    after = Q(position__gt=position) | Q(position=position, pk__gt=pk)
    left = on_path.filter(
        (after & ~Q(role="system")) | Q(summary_until__position__gt=position)
    ).update(on_path=False)
    if left:
        _changed(chat_id)
    return left


def roll_back(chat_id: int, run_id: int, prompt_id: int | None = None) -> int:
    """Delete what run ``run_id`` stored (its assistant and tool messages, their tool calls;
    not its prompt ``prompt_id``), in the caller's transaction under the chat's lock, as
    the run ends. Its usage rows stay (the ledger bills every attempt; they lose their
    message). A message that followed a deleted one follows that one's first kept
    ancestor, so the path stays one chain and no call is left without its result (a
    result goes with its call). Returns how many messages were deleted."""
    doomed = dict(
        Message.objects.filter(chat_id=chat_id, run_id=run_id)
        .exclude(pk=prompt_id)
        .exclude(role="user")
        .values_list("pk", "parent_id")
    )
    # results stored for the run's calls by another writer (a stop answering them)
    doomed.update(
        Message.objects.filter(chat_id=chat_id, parent_tool_call__message_id__in=list(doomed))
        .exclude(pk__in=list(doomed))
        .values_list("pk", "parent_id")
    )
    if not doomed:
        return 0

    def kept(parent: int | None) -> int | None:
        while parent is not None and parent in doomed:
            parent = doomed[parent]
        return parent

    orphans = (
        Message.objects.filter(chat_id=chat_id, parent_id__in=list(doomed))
        .exclude(pk__in=list(doomed))
        .values_list("pk", "parent_id")
    )
    for pk, parent in list(orphans):
        Message.objects.filter(pk=pk).update(parent_id=kept(parent))
    deleted = len(doomed)
    Message.objects.filter(pk__in=list(doomed)).delete()
    _changed(chat_id)
    return deleted


def _path_through(rows: list[tuple], target: int) -> set[int]:
    """The ids of the path through ``target``: its ancestors, itself, then the newest
    child each time down to a leaf (``rows``: ``(id, parent_id, position)`` of the tree)."""
    parents = {pk: parent for pk, parent, _ in rows}
    children: dict[int | None, list[tuple[int, int]]] = {}
    for pk, parent, position in rows:
        children.setdefault(parent if parent in parents else None, []).append((position, pk))
    path = set()
    node: int | None = target
    while node is not None and node not in path:
        path.add(node)
        node = parents.get(node)
    node = target
    while children.get(node):
        node = max(children[node])[1]
        if node in path:  # a cycle cannot be built here; never loop on bad data
            break
        path.add(node)
    return path


def rewire(chat_id: int, message: Any) -> int:
    """Make the path through ``message`` (a Message of the chat or its id) the active one,
    in the caller's transaction under the chat's lock, the chat idle
    (:func:`django_llmchat.runs.switch_to` is the entry): its ancestors, itself, then the
    newest child each time down to a leaf. One read of the chat's rows and at most two
    UPDATEs (only the rows that change). Returns the new leaf's id."""
    pk = getattr(message, "pk", message)
    if isinstance(pk, bool) or not isinstance(pk, int):
        raise ArgumentError(f"message must be a message of the chat or its id, got {message!r}")
    rows = _tree_rows(chat_id)
    tree = [(r[0], r[1], r[2]) for r in rows if r[4] != "system"]
    if pk not in {r[0] for r in tree}:
        raise ArgumentError(f"message {pk} is not a message of chat {chat_id} in its tree")
    path = _path_through(tree, pk)
    _apply(chat_id, rows, path)
    leaf = max((r[2], r[0]) for r in tree if r[0] in path)
    return leaf[1]


def _tree_rows(chat_id: int) -> list[tuple]:
    """``(id, parent_id, position, on_path, role, summary_until_id)`` of every message of
    the chat but the prompts still queued. One query."""
    return list(
        Message.objects.filter(chat_id=chat_id, position__lt=QUEUED_POSITION).values_list(
            "pk", "parent_id", "position", "on_path", "role", "summary_until_id"
        )
    )


def _apply(chat_id: int, rows: list[tuple], path: set[int]) -> None:
    """Make ``path`` (ids of tree messages) the active path: ``rows`` (:func:`_tree_rows`)
    on it exactly when in ``path``, the instructions always, a summary while the message
    it covers is. At most two ``UPDATE`` statements, of the rows that change."""
    turn_on, turn_off = [], []
    for row_pk, _parent, _position, on, role, until in rows:
        if role == "system":
            wanted = until is None or until in path
        else:
            wanted = row_pk in path
        if wanted and not on:
            turn_on.append(row_pk)
        elif on and not wanted:
            turn_off.append(row_pk)
    if turn_off:
        Message.objects.filter(pk__in=turn_off).update(on_path=False)
    if turn_on:
        Message.objects.filter(pk__in=turn_on).update(on_path=True)
    if turn_on or turn_off:
        _changed(chat_id)


def plant(
    messages: list[Message],
    parents: list[int | None],
    *,
    leaf: int | None = None,
    summaries: dict[int, int] | None = None,
) -> None:
    """Store the unsaved ``messages`` of a chat nobody else writes yet (one being
    imported, in the caller's transaction) as its tree. ``parents[i]`` is the index in
    ``messages`` of message ``i``'s parent, an earlier message of the tree, or ``None``
    (a root; system messages always). ``summaries`` maps a summary's index to the index
    of the last message it covers. The active path is the line from a root to
    ``messages[leaf]`` (default: the last message of the tree); a summary is on it while
    the message it covers is, system messages always. Raises
    :class:`~django_llmchat.errors.ArgumentError` naming the message whose links are
    wrong. Two queries (one ``INSERT``, one ``UPDATE`` of the links) per thousand."""
    summaries = summaries or {}
    tree = _planted_tree(messages, parents, summaries)
    if leaf is None:
        leaf = max(tree, default=None)
    elif leaf not in tree:
        raise ArgumentError(f"the active leaf must be a message of the tree, got {leaf!r}")
    path: set[int] = set()
    while leaf is not None:
        path.add(leaf)
        leaf = parents[leaf]
    for i, message in enumerate(messages):
        if i in tree:
            message.on_path = i in path
        elif i in summaries:
            message.on_path = summaries[i] in path
        else:
            message.on_path = True
        message.placed = True
    Message.objects.bulk_create(messages, batch_size=1000)
    for i, message in enumerate(messages):
        parent = parents[i]
        message.parent_id = messages[parent].pk if parent is not None else None
        covered = summaries.get(i)
        message.summary_until_id = messages[covered].pk if covered is not None else None
    linked = [m for i, m in enumerate(messages) if parents[i] is not None or i in summaries]
    if linked:
        Message.objects.bulk_update(linked, ["parent", "summary_until"], batch_size=1000)


def _planted_tree(
    messages: list[Message], parents: list[int | None], summaries: dict[int, int]
) -> set[int]:
    """The indexes of the tree's messages (neither system messages nor summaries), the
    links of :func:`plant` checked: each parent an earlier message of the tree, each
    summary covering another message."""
    if len(parents) != len(messages):
        raise ArgumentError("plant() needs one parent (or None) per message")
    tree = {i for i, m in enumerate(messages) if m.role != "system" and i not in summaries}
    for i, parent in enumerate(parents):
        if parent is None:
            continue
        if i not in tree:
            raise ArgumentError(f"message {i} is a system message: it has no parent")
        if not isinstance(parent, int) or not 0 <= parent < i or parent not in tree:
            raise ArgumentError(
                f"message {i}'s parent must be an earlier message of the tree, got {parent!r}"
            )
    for i, covered in summaries.items():
        if not isinstance(covered, int) or not 0 <= covered < len(messages) or covered == i:
            raise ArgumentError(f"summary {i} must cover another message, got {covered!r}")
    return tree


def link_parents(chat_id: int) -> int:
    """Give the messages of the chat's active path that have no parent (rows written
    with ``bulk_create`` or raw SQL, which bypass ``Message.save()``) the message before
    them on the path, as the migration that introduced the tree did for older rows: the
    first message of the path keeps none. Run it while the chat is idle. Returns how many
    messages got a parent; one read and one ``UPDATE`` per thousand of them."""
    rows = (
        Message.objects.filter(chat_id=chat_id, on_path=True, position__lt=QUEUED_POSITION)
        .exclude(role="system")
        .order_by("position", "id")
        .values_list("pk", "parent_id")
    )
    linked, previous = [], None
    for pk, parent in rows:
        if parent is None and previous is not None:
            linked.append(Message(pk=pk, parent_id=previous))
        previous = pk
    if linked:
        Message.objects.bulk_update(linked, ["parent"], batch_size=1000)
    return len(linked)


def siblings(messages: Iterable[Any]) -> dict[int, list[int]]:
    """``{message id: the ids of its alternatives, itself included, oldest first}`` for
    stored ``messages`` (of any chats): the messages with the same parent (for a message
    without one, the chat's other first messages). System messages have none but
    themselves. One query (raw SQL: a page of the REST list pays no ORM compile)."""
    wanted = [m for m in messages if m.pk is not None]
    tree = [m for m in wanted if m.role != "system" and m.position < QUEUED_POSITION]
    result = {m.pk: [m.pk] for m in wanted}
    if not tree:
        return result
    parents = sorted({m.parent_id for m in tree if m.parent_id is not None})
    roots = sorted({m.chat_id for m in tree if m.parent_id is None})
    groups: dict[tuple[str, Any], list[int]] = {}
    for pk, chat_id, parent_id in _sibling_rows(parents, roots):
        key = ("p", parent_id) if parent_id is not None else ("c", chat_id)
        groups.setdefault(key, []).append(pk)
    for m in tree:
        key = ("p", m.parent_id) if m.parent_id is not None else ("c", m.chat_id)
        result[m.pk] = groups.get(key) or [m.pk]
    return result


def _sibling_rows(parents: list[int], roots: list[int]) -> list[tuple]:
    """``(id, chat_id, parent_id)`` of the children of ``parents`` and of the first
    messages of the chats ``roots``, in transcript order."""
    using = router.db_for_read(Message)
    connection = connections[using]
    qn = connection.ops.quote_name

    def column(name: str) -> str:
        return qn(Message._meta.get_field(name).column)

    pk, chat, parent = column("id"), column("chat"), column("parent")
    position, role = column("position"), column("role")
    clauses, params = [], []
    if parents:
        clauses.append(f"{parent} IN ({', '.join(['%s'] * len(parents))})")
        params += parents
    if roots:
        clauses.append(
            f"({parent} IS NULL AND {chat} IN ({', '.join(['%s'] * len(roots))}) "
            f"AND {position} < %s AND {role} <> %s)"
        )
        params += [*roots, QUEUED_POSITION, "system"]
    sql = (
        f"SELECT {pk}, {chat}, {parent} FROM {qn(Message._meta.db_table)} "
        f"WHERE {' OR '.join(clauses)} ORDER BY {position}, {pk}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()
