"""Signals for alerts on spending limits (see the Limits page).

``budget_warning``: a user's use passed the soft fraction of a limit (sent once per run and
limit, and when a run is queued). ``budget_exceeded``: a hard limit refused a run or
stopped one between two steps. Both send ``chat``, ``user_id``, ``limit`` (its name),
``used``, ``allowed`` and ``resets_at``; ``sender`` is the chat's class.
"""

from django.dispatch import Signal

__all__ = ["budget_exceeded", "budget_warning"]

budget_warning = Signal()
budget_exceeded = Signal()
