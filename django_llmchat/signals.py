"""Signals for alerts: spending limits (see the Limits page) and the run lifecycle (see
the Observability page).

``budget_warning``: a user's use passed the soft fraction of a limit (sent once per run and
limit, and when a run is queued). ``budget_exceeded``: a hard limit refused a run or
stopped one between two steps. Both send ``chat``, ``user_id``, ``limit`` (its name),
``used``, ``allowed`` and ``resets_at``; ``sender`` is the chat's class.

The run lifecycle signals are sent once the change is committed, with ``sender`` the
``Run`` class and ``run_id``, ``chat_id``:

- ``run_failed``: a run ended ``failed`` (also ``error_type`` and ``error``, the safe
  text), wherever it ran, a run given up after its workers died included;
- ``run_lost``: the process working on a run found it taken over (its lease ran out);
- ``run_recovered``: a run whose process died was taken over, to resume from its last
  stored step (also ``attempt``, the new attempt's number, and ``previous_worker``).

A receiver that raises is logged and never stops a run.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.dispatch import Signal

__all__ = ["budget_exceeded", "budget_warning", "run_failed", "run_lost", "run_recovered"]

logger = logging.getLogger("django_llmchat.signals")

budget_warning = Signal()
budget_exceeded = Signal()
run_failed = Signal()
run_lost = Signal()
run_recovered = Signal()


def send_after_commit(signal: Signal, **kwargs: Any) -> None:
    """Send a run lifecycle signal once the current transaction commits (at once outside
    one); receivers' errors are logged."""
    from .models import Run

    def send() -> None:
        for receiver, result in signal.send_robust(sender=Run, **kwargs):
            if isinstance(result, Exception):
                logger.error("%r, a receiver of a run signal, failed", receiver, exc_info=result)

    transaction.on_commit(send)
