"""The spending limits of a run, checked before each of its provider calls."""

from __future__ import annotations

from collections.abc import Generator

from ..errors import BudgetExceededError
from ..events import BudgetWarning
from ..models import Chat
from ..runs import limits

__all__ = ["RunBudget"]


class RunBudget:
    """The user's spending limits as one run of ``chat`` meets them: the check that
    admitted the run (:attr:`admitted`) serves its first call; a soft limit warns once
    per run."""

    def __init__(self, chat: Chat):
        self.chat = chat
        self.admitted: limits.Verdict | None = None
        """The admission's verdict, used by the first check (then read again)."""
        self.warned: set[str] = set()

    def check(self) -> Generator[BudgetWarning, None, BudgetExceededError | None]:
        """The user's spending limits before a provider call (one query): returns the
        :class:`BudgetExceededError` over a hard limit; yields a ``BudgetWarning`` once per
        run and limit past the soft fraction."""
        verdict, self.admitted = self.admitted, None
        try:
            if verdict is None:
                verdict = limits.check(self.chat)
        except BudgetExceededError as exc:
            return exc
        for warning in verdict.warnings if verdict is not None else []:
            if warning.limit in self.warned:
                continue
            self.warned.add(warning.limit)
            limits.warn(self.chat, warning)
            yield BudgetWarning(
                limit=warning.limit,
                used=str(warning.used),
                allowed=str(warning.allowed),
                resets_at=warning.resets_at.isoformat() if warning.resets_at else None,
            )
        return None
