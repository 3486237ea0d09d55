"""The conversation's tree as the AI SDK client sees it: the stored messages grouped into
UI messages (a user message each, one assistant message per run), named by the ids the
client knows, and which branch a ``POST ui/chat`` continues.

The messages a client sends are the path it shows. A new user message after a known
prefix follows the prefix's last message: the chat's active path when the prefix is the
whole of it (the ordinary append), else a new branch there (the SDK's edit flow:
``setMessages(messages.slice(0, i))``, then ``sendMessage``). A message the server does
not know anywhere but last is refused, as is a prefix that is not a path of the chat."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Case, F, When
from rest_framework.exceptions import ValidationError

from ...models import Chat, Message, Run
from ...models.message import QUEUED_POSITION

__all__ = [
    "Placement",
    "Tree",
    "UINode",
    "branch_of",
    "placement_of",
    "reply_branch",
    "ui_id_of_user",
]

logger = logging.getLogger("django_llmchat.api")

UI_MESSAGE_ID = "ui_message_id"
"""The key of a user message's ``raw`` holding the id its AI SDK client gave it."""


def ui_id_of_user(pk: int, raw: Any) -> str:
    """A user message's UI id: the id its client gave it, else ``msg-<id>``."""
    client_id = raw.get(UI_MESSAGE_ID) if isinstance(raw, dict) else None
    return client_id if isinstance(client_id, str) else f"msg-{pk}"


@dataclass
class UINode:
    """One UI message of the stored tree: a user message, or the messages a run stored
    (a reply without a run: its consecutive messages)."""

    id: str
    role: str  # "user" or "assistant"
    first: int  # its first stored message: the one among its parent's children
    last: int  # its last stored message: what a message after it follows
    parent: int | None  # the stored message it follows
    on_path: bool
    messages: list[int] = field(default_factory=list)


class Tree:
    """A chat's stored messages as UI nodes (system messages and summaries are no UI
    messages), read in one query."""

    def __init__(self, chat: Chat | int | None):
        self.nodes: list[UINode] = []
        self.node_of: dict[int, UINode] = {}  # stored message id -> its node
        self._run_of: dict[int, int | None] = {}  # a node's first message -> its run
        if chat is None:
            return
        tree = Message.objects.filter(
            chat=chat, summary_until__isnull=True, position__lt=QUEUED_POSITION
        ).exclude(role="system")
        # the client's ids are in the user messages' raw (a reply's raw, the provider's
        # whole answer, stays in the database)
        user_raw = Case(
            When(role="user", then=F("raw")),
            default=None,
            output_field=Message._meta.get_field("raw"),
        )
        rows = (
            tree.order_by("id")
            .annotate(user_raw=user_raw)
            .values_list("id", "role", "parent_id", "run_id", "on_path", "user_raw")
        )
        for pk, role, parent, run_id, on_path, raw in rows:
            above = self.node_of.get(parent) if parent is not None else None
            if role != "user" and above is not None and above.role == "assistant":
                if self._run_of.get(above.first) == run_id:  # the same reply goes on
                    above.last = pk
                    above.messages.append(pk)
                    self.node_of[pk] = above
                    continue
            if role == "user":
                node = UINode(ui_id_of_user(pk, raw), "user", pk, pk, parent, on_path, [pk])
            else:
                name = f"run-{run_id}" if run_id is not None else f"msg-{pk}"
                node = UINode(name, "assistant", pk, pk, parent, on_path, [pk])
            self._run_of[pk] = run_id
            self.nodes.append(node)
            self.node_of[pk] = node

    @classmethod
    def empty(cls) -> Tree:
        """The tree of a chat with no messages (one this request made), read from
        nothing."""
        return cls(None)

    def by_id(self, ui_id: str) -> UINode | None:
        """The node a client id names (the one on the active path, else the newest, when
        a retried message left two)."""
        found = [node for node in self.nodes if node.id == ui_id]
        if not found:
            return None
        on_path = [node for node in found if node.on_path]
        return (on_path or found)[-1]

    def path_to(self, node: UINode | None) -> list[UINode]:
        """The nodes from the root down to ``node`` (none for ``None``)."""
        out: list[UINode] = []
        seen: set[int] = set()
        while node is not None and node.first not in seen:
            seen.add(node.first)
            out.append(node)
            node = self.node_of.get(node.parent) if node.parent is not None else None
        return out[::-1]

    def active_path(self) -> list[UINode]:
        return [node for node in self.nodes if node.on_path]

    def siblings(self, node: UINode) -> list[UINode]:
        """``node`` and its alternatives: the nodes of its role following the same
        message, oldest first."""
        return [n for n in self.nodes if n.parent == node.parent and n.role == node.role]


def branch_of(tree: Tree, node: UINode) -> dict[str, Any] | None:
    """A UI message's ``metadata.branch`` (``None`` without alternatives): its ``index``
    among its ``siblings`` (their client ids, oldest first), their ``count`` and the
    ``storedMessageIds`` a switch takes."""
    siblings = tree.siblings(node)
    if len(siblings) < 2:
        return None
    return {
        "index": next(i for i, n in enumerate(siblings) if n.first == node.first),
        "count": len(siblings),
        "siblings": [n.id for n in siblings],
        "storedMessageIds": [n.first for n in siblings],
    }


def reply_branch(chat_id: int, run_id: Any) -> dict[str, Any]:
    """What a streamed reply's ``finish`` chunk adds to its metadata, so the client draws
    "< 2/2 >" without a reload: ``branch`` when the reply of run ``run_id`` has
    alternatives (a regenerated reply), ``promptBranch`` when the prompt it answers has
    (an edited prompt: the client's own copy of it has no metadata to carry it). ``{}``
    when neither has. One query."""
    out: dict[str, Any] = {}
    try:
        tree = Tree(chat_id)
        node = tree.by_id(f"run-{run_id}")
        if node is None:
            return out
        branch = branch_of(tree, node)
        if branch is not None:
            out["branch"] = branch
        prompt = tree.node_of.get(node.parent) if node.parent is not None else None
        if prompt is not None and prompt.role == "user":
            prompt_branch = branch_of(tree, prompt)
            if prompt_branch is not None:
                out["promptBranch"] = prompt_branch
    except Exception:  # the reply is whole without it: never fail the stream's end
        logger.exception("the alternatives of run %s of chat %s", run_id, chat_id)
        return {}
    return out


def _empty_runs(chat: Chat, tree: Tree) -> set[str]:
    """The UI ids of the chat's runs that stored no message of the tree."""
    ids = Run.objects.filter(chat=chat).values_list("pk", flat=True)
    return {f"run-{pk}" for pk in ids} - {node.id for node in tree.nodes}


@dataclass
class Placement:
    """Where a request's new message (or regenerated reply) goes: after ``parent`` (a
    stored message's id; ``None``: at the root), and whether that is the chat's active
    path's end (``append``: the ordinary request)."""

    parent: int | None
    append: bool


def placement_of(
    chat: Chat,
    prefix: list[dict[str, Any]],
    *,
    regenerate: bool = False,
    field_name: str = "messages",
    tree: Tree | None = None,
) -> Placement:
    """Where a message sent after ``prefix`` (the client's messages before it) goes; with
    ``regenerate``, where a new reply to ``prefix`` goes (the ordinary regenerate when the
    active path ends with ``prefix`` and, maybe, a reply to it). Refuses (a 400 on
    ``field_name``) a prefix naming a message the chat does not have, or not in the order
    of one of its paths. ``tree``: the chat's, when the caller knows it (an empty one for
    a chat it just made)."""
    if tree is None:
        tree = Tree(chat)
    empty_runs: set[str] | None = None
    known: list[UINode] = []
    for index, message in enumerate(prefix):
        ui_id = message.get("id")
        node = tree.by_id(ui_id) if isinstance(ui_id, str) else None
        if node is None and message.get("role") == "assistant" and isinstance(ui_id, str):
            # runs that stored no message (failed before their first step) are UI
            # messages the client kept: they stand for nothing on the path (read once,
            # only for a reply the tree does not have)
            if empty_runs is None:
                empty_runs = _empty_runs(chat, tree)
            if ui_id in empty_runs:
                continue
        if node is None:
            raise ValidationError(
                {
                    field_name: [
                        f"message {index} ({ui_id!r}) is not a message of the chat: only "
                        "the last message may be new"
                    ]
                }
            )
        known.append(node)
    end = known[-1] if known else None
    path = tree.path_to(end)
    if [node.first for node in path] != [node.first for node in known]:
        raise ValidationError(
            {
                field_name: [
                    "the messages before the last are not a path of the chat (send them as "
                    "GET ui/chat/{id}/messages gives them)"
                ]
            }
        )
    active = [node.first for node in tree.active_path()]
    mine = [node.first for node in path]
    if regenerate and active[: len(mine)] == mine and len(active) - len(mine) == 1:
        active = active[:-1]  # the reply to regenerate
    append = active == mine
    return Placement(parent=end.last if end is not None else None, append=append)
