"""Retention of transcripts: ``LLMCHAT["RETENTION"]`` deletes or anonymises the chats
whose last message is older than their retention. The usage ledger stays.

``LLMCHAT["RETENTION"] = {"days": 90, "action": "delete"}`` (or ``"anonymise"``);
``None`` (the default) keeps everything. A user's own policy comes from
``LLMCHAT["RETENTION_FOR"]`` (a callable or its dotted path, ``user -> {"days", "action"}``
or ``None`` for the default), a chat's own number of days from ``chat.retention_days``.
``"days": None`` keeps the chats with no days of their own.

A chat's age is the time since its last change (``updated_at``: a new message, an edit).
A chat with a run queued, running or awaiting approval is never touched (it waits for the
next pass), nor is one already anonymised by an anonymising policy.

:func:`apply_retention` does it (the periodic task ``django_llmchat.tasks.apply_retention``
and ``manage.py llmchat_retention``); :func:`due` only says what it would do.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone
from django.utils.module_loading import import_string

from ..conf import settings
from ..models import Chat
from .lifecycle import anonymise_chats, idle, purge_chats

__all__ = ["ACTIONS", "Due", "Policy", "apply_retention", "due", "policy_for", "validate_setting"]

DELETE, ANONYMISE = "delete", "anonymise"
ACTIONS = (DELETE, ANONYMISE)
_CHUNK = 500


@dataclass(frozen=True)
class Policy:
    """How long transcripts are kept (``days``, ``None``: for ever) and what happens
    then (``action``: ``"delete"`` or ``"anonymise"``)."""

    days: int | None
    action: str = DELETE


@dataclass(frozen=True)
class Due:
    """A chat the retention deletes or anonymises."""

    chat_id: int
    user_id: Any
    title: str
    updated_at: datetime
    days: int
    action: str


def _policy(value: dict[str, Any] | None, base: Policy) -> Policy:
    if not value:
        return base
    return Policy(
        days=value["days"] if "days" in value else base.days,
        action=value.get("action") or base.action,
    )


def default_policy() -> Policy | None:
    """``LLMCHAT["RETENTION"]`` as a :class:`Policy`; ``None``: retention is off."""
    config = settings.RETENTION
    return None if config is None else _policy(config, Policy(days=None))


def _resolver():
    resolver = settings.RETENTION_FOR
    if isinstance(resolver, str):
        resolver = import_string(resolver)
    return resolver


def policy_for(user: Any) -> Policy | None:
    """The policy of ``user``'s chats: the default, then ``RETENTION_FOR(user)``."""
    base = default_policy()
    resolver = _resolver()
    if base is None or resolver is None or user is None:
        return base
    return _policy(resolver(user), base)


def _policies(base: Policy) -> dict[Policy, list[Any] | None]:
    """The users of chats by their policy (``None`` in the default's list: no user; the
    list ``None``: every chat, there being no ``RETENTION_FOR``)."""
    resolver = _resolver()
    if resolver is None:  # one policy for all: no list of users (its time follows them)
        return {base: None}
    user_ids = list(
        Chat.objects.order_by().values_list("user_id", flat=True).distinct()
    )  # llmchat_chat_user_idx
    found: dict[Policy, list[Any]] = defaultdict(list)
    found[base]  # noqa: B018 (chats without a user follow the default)
    users = get_user_model()._default_manager
    for start in range(0, len(user_ids), _CHUNK):
        chunk = user_ids[start : start + _CHUNK]
        loaded = users.in_bulk([pk for pk in chunk if pk is not None])
        for pk in chunk:
            user = loaded.get(pk)
            found[_policy(resolver(user), base) if user is not None else base].append(pk)
    return found


def _user_chunks(user_ids: list[Any] | None):
    """The users' ids in chunks (``None``: one pass over every chat)."""
    if user_ids is None:
        yield None
        return
    for start in range(0, max(len(user_ids), 1), _CHUNK):
        yield user_ids[start : start + _CHUNK]


def due(now: datetime | None = None) -> list[Due]:
    """The chats the retention would delete or anonymise now, oldest first."""
    base = default_policy()
    if base is None:
        return []
    now = now or timezone.now()
    found: list[Due] = []
    columns = ("pk", "user_id", "title", "updated_at", "retention_days")
    for policy, user_ids in _policies(base).items():
        for chunk in _user_chunks(user_ids):
            if chunk is None:
                of_users = Chat.objects.all()
            else:
                of_users = Chat.objects.filter(user_id__in=[pk for pk in chunk if pk is not None])
                if None in chunk:
                    of_users = of_users | Chat.objects.filter(user__isnull=True)
            if policy.action == ANONYMISE:
                of_users = of_users.filter(anonymised_at__isnull=True)
            of_users = idle(of_users).order_by()
            # chats with days of their own (few: llmchat_chat_own_days_idx), then the
            # others by the policy's days (llmchat_chat_updated_idx)
            candidates = list(of_users.filter(retention_days__isnull=False).values_list(*columns))
            if policy.days is not None:
                candidates += of_users.filter(
                    retention_days__isnull=True, updated_at__lt=now - timedelta(days=policy.days)
                ).values_list(*columns)
            for pk, user_id, title, updated_at, own in candidates:
                days = own if own is not None else policy.days
                if updated_at < now - timedelta(days=days):
                    found.append(Due(pk, user_id, title, updated_at, days, policy.action))
    found.sort(key=lambda d: (d.updated_at, d.chat_id))
    return found


def apply_retention(
    now: datetime | None = None, *, dry_run: bool = False
) -> tuple[list[Due], dict[str, int]]:
    """Delete or anonymise the chats :func:`due` lists; returns them and how many chats
    each action changed (``dry_run``: nothing is changed, the counts are 0). A chat
    that became busy or changed since it was listed is left for the next pass."""
    now = now or timezone.now()
    found = due(now)
    done = {DELETE: 0, ANONYMISE: 0}
    if dry_run:
        return found, done
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for item in found:
        groups[(item.action, item.days)].append(item.chat_id)
    for (action, days), chat_ids in groups.items():
        for start in range(0, len(chat_ids), _CHUNK):
            chats = idle(
                Chat.objects.filter(
                    pk__in=chat_ids[start : start + _CHUNK],
                    updated_at__lt=now - timedelta(days=days),
                )
            )
            if action == ANONYMISE:
                done[action] += anonymise_chats(chats.filter(anonymised_at__isnull=True)).chats
            else:
                done[action] += purge_chats(chats).chats
    return found, done


def validate_setting(value: Any) -> list[str]:
    """Problems of a ``LLMCHAT["RETENTION"]`` value, as sentences naming the key."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return ['LLMCHAT["RETENTION"] must be None or a dict such as {"days": 90}']
    problems = [
        f'LLMCHAT["RETENTION"] has an unknown key {key!r} (known: "days", "action")'
        for key in value
        if key not in ("days", "action")
    ]
    days = value.get("days")
    if days is not None and (isinstance(days, bool) or not isinstance(days, int) or days < 0):
        problems.append(
            f'LLMCHAT["RETENTION"]["days"] must be a whole number of days (0 or more) or '
            f"None, got {days!r}"
        )
    action = value.get("action", DELETE)
    if action not in ACTIONS:
        problems.append(
            f'LLMCHAT["RETENTION"]["action"] must be "delete" or "anonymise", got {action!r}'
        )
    return problems
