"""Checks of the rules a chat's stored state keeps after any sequence of operations, for
tests (this project's and its users'): call them after each step.

::

    from django_llmchat.testing.invariants import assert_one_path

    chat.branch_from(reply, "And Italy?")
    assert_one_path(chat)
"""

from __future__ import annotations

from typing import Any

from ..models import Message
from ..models.message import QUEUED_POSITION

__all__ = ["assert_one_path", "path_problems"]


def path_problems(chat: Any) -> list[str]:
    """What is wrong with the active path of ``chat`` (a Chat or its id), one sentence
    each; empty when the path is ONE chain from a root to the active leaf: exactly one
    message without a parent on it, every other one's parent on it, no message with two
    children on it, read in the transcript's order each after its parent, and each
    summary on it only while the message it covers is. Prompts still queued behind a run
    are not part of the tree and are left out. One query."""
    chat_id = getattr(chat, "pk", chat)
    rows = list(
        Message.objects.filter(chat_id=chat_id, position__lt=QUEUED_POSITION)
        .order_by("position", "id")
        .values_list("pk", "parent_id", "on_path", "role", "summary_until_id")
    )
    tree = [r for r in rows if r[3] != "system"]
    on = {r[0] for r in tree if r[2]}
    problems = []
    roots = [r[0] for r in tree if r[2] and r[1] is None]
    if on and len(roots) != 1:
        problems.append(f"the path has {len(roots)} messages without a parent: {roots}")
    children: dict[int, list[int]] = {}
    for pk, parent, on_path, _role, _until in tree:
        if not on_path or parent is None:
            continue
        if parent not in on:
            problems.append(f"message {pk} is on the path, its parent {parent} is not")
        children.setdefault(parent, []).append(pk)
    for parent, kids in children.items():
        if len(kids) > 1:
            problems.append(f"message {parent} has {len(kids)} children on the path: {kids}")
    chain = [pk for pk, parent, *_ in tree if pk in on]
    parent_of = {r[0]: r[1] for r in tree}
    for before, after in zip(chain, chain[1:], strict=False):
        if parent_of[after] != before:
            problems.append(
                f"message {after} follows message {before} on the path but its parent is "
                f"{parent_of[after]}"
            )
            break
    for pk, _parent, on_path, role, until in rows:
        if role != "system" or until is None:
            continue
        if on_path != (until in on):
            state = "on" if on_path else "off"
            covered = "on" if until in on else "off"
            problems.append(
                f"summary {pk} is {state} the path while message {until} it covers is {covered}"
            )
    return problems


def assert_one_path(chat: Any) -> None:
    """``AssertionError`` naming every problem :func:`path_problems` finds."""
    problems = path_problems(chat)
    assert not problems, f"chat {getattr(chat, 'pk', chat)}: " + "; ".join(problems)
