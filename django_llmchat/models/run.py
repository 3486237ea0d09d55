from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import models
from django.db.models import Count, Q, Sum

from ..values import COST_FIELDS, TOKEN_FIELDS, Cost, Tokens
from .usage import USAGE_COST_COLUMNS


class RunQuerySet(models.QuerySet):
    def unfinished(self):
        """Runs still to answer or answering: queued, running or awaiting approval."""
        return self.filter(status__in=AbstractRun.UNFINISHED)

    def finished(self):
        return self.filter(status__in=AbstractRun.FINISHED)

    def with_totals(self):
        """Annotate each run's token and cost sums over its usage rows (one query): read
        them as ``run.tokens`` and ``run.cost()`` without further queries."""
        sums = {f"_sum_{name}": Sum(f"usages__{name}") for name in TOKEN_FIELDS}
        sums.update({f"_sum_{col}": Sum(f"usages__{col}") for col in USAGE_COST_COLUMNS.values()})
        sums["_estimated"] = Count("usages", filter=Q(usages__estimated=True))
        return self.annotate(**sums)


class AbstractRun(models.Model):
    """One answer to one prompt (or one continuation of the saved history): its status,
    the safe error it ended with, its attempts and steps, who works on it and until when.

    Every change of status goes through :mod:`django_llmchat.runs` with conditional
    UPDATEs, so two processes never both win; read runs anywhere, write them nowhere
    else."""

    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    STATUSES = (QUEUED, RUNNING, AWAITING_APPROVAL, SUCCEEDED, FAILED, CANCELLED, INTERRUPTED)
    UNFINISHED = (QUEUED, RUNNING, AWAITING_APPROVAL)
    FINISHED = (SUCCEEDED, FAILED, CANCELLED, INTERRUPTED)

    status = models.CharField(
        max_length=24, default=QUEUED, choices=[(s, s.replace("_", " ")) for s in STATUSES]
    )
    error = models.TextField(blank=True, help_text="Why the run failed, in words safe to show.")
    error_type = models.CharField(max_length=64, blank=True)
    interrupt_reason = models.CharField(max_length=255, blank=True)
    cancel_requested = models.BooleanField(default=False)
    attempt = models.PositiveIntegerField(
        default=0, help_text="How many times a process took the run on (1 unless recovered)."
    )
    steps = models.PositiveIntegerField(default=0, help_text="Provider responses stored.")
    task_id = models.CharField(max_length=255, blank=True)
    worker = models.CharField(max_length=255, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    reserved_cost = models.DecimalField(
        max_digits=16,
        decimal_places=10,
        default=Decimal(0),
        editable=False,
        help_text="USD the run's admission reserved: its first request's expected cost, "
        "counted by the spending limits while the run is unfinished.",
    )

    objects = RunQuerySet.as_manager()

    class Meta:
        abstract = True
        ordering = ("created_at", "id")

    def __str__(self) -> str:
        return f"Run {self.pk} ({self.status})"

    # What the call that ran it saw (set by ``chat.ask()``/``chat.stream()`` in this
    # process; ``None`` on a run read from the database).
    message: Any = None
    interrupt: Any = None
    tripwire: Any = None
    events: list | None = None

    @property
    def is_finished(self) -> bool:
        """Ended: succeeded, failed, cancelled or interrupted."""
        return self.status in self.FINISHED

    @property
    def is_unfinished(self) -> bool:
        """Still to answer or answering: queued, running or awaiting approval."""
        return self.status in self.UNFINISHED

    @property
    def is_queued(self) -> bool:
        """Waiting for its turn, a worker, or a retry: no process works on it."""
        return self.status == self.QUEUED

    @property
    def is_working(self) -> bool:
        """A process works on it now (``running``); a queued run or one waiting for a
        tool-call decision is not working (see :attr:`is_unfinished`)."""
        return self.status == self.RUNNING

    @property
    def is_awaiting_approval(self) -> bool:
        """Paused until every waiting tool call is approved or denied."""
        return self.status == self.AWAITING_APPROVAL

    @property
    def tokens(self) -> Tokens:
        """Tokens over the run's provider attempts."""
        if f"_sum_{TOKEN_FIELDS[0]}" in self.__dict__:
            return Tokens(**{n: self.__dict__[f"_sum_{n}"] for n in TOKEN_FIELDS})
        if not self.pk or not self.attempt:  # never taken on: no provider was called
            return Tokens()
        return self.usages.all().tokens()

    @property
    def estimated(self) -> bool:
        """Whether some of :attr:`tokens` and :meth:`cost` are our estimate: an attempt
        stopped before the vendor reported its counts (or still pending, or lost)."""
        if "_estimated" in self.__dict__:
            return bool(self.__dict__["_estimated"])
        if not self.pk or not self.attempt:
            return False
        return self.usages.filter(estimated=True).exists()

    def cost(self) -> Cost:
        """USD over the run's provider attempts (``None`` parts: no known price)."""
        if "_sum_total_cost" in self.__dict__:
            return Cost(*(self.__dict__[f"_sum_{USAGE_COST_COLUMNS[p]}"] for p in COST_FIELDS))
        if not self.pk or not self.attempt:
            return Cost()
        return self.usages.all().cost()


class Run(AbstractRun):
    chat = models.ForeignKey(
        "django_llmchat.Chat", on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    prompt = models.ForeignKey(
        "django_llmchat.Message",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="prompted_runs",
        help_text="The user message the run answers (empty for a continuation).",
    )

    class Meta(AbstractRun.Meta):
        db_table = "llmchat_run"
        indexes = [
            models.Index(fields=["chat", "created_at", "id"], name="llmchat_run_chat_idx"),
            models.Index(fields=["status", "lease_expires_at"], name="llmchat_run_lease_idx"),
            # the concurrent-runs limit counts a user's open runs (django_llmchat.runs.limits)
            models.Index(
                fields=["chat"],
                condition=models.Q(status__in=["queued", "running"]),
                name="llmchat_run_open_idx",
            ),
        ]
