from __future__ import annotations

from django.conf import settings as django_settings
from django.db import models
from django.db.models import Sum

from ..catalog.pricing import price
from ..values import COST_FIELDS, TOKEN_FIELDS, Cost, Tokens

MONEY = {"max_digits": 16, "decimal_places": 10, "null": True, "blank": True}

USAGE_COST_COLUMNS = {
    "input": "input_cost",
    "output": "output_cost",
    "cache_read": "cache_read_cost",
    "cache_write": "cache_write_cost",
    "thinking": "thinking_cost",
    "total": "total_cost",
}


class UsageQuerySet(models.QuerySet):
    def tokens(self) -> Tokens:
        """Token totals over these rows, in one query."""
        sums = self.aggregate(**{n: Sum(n) for n in TOKEN_FIELDS})
        return Tokens(**sums)

    def cost(self) -> Cost:
        """Cost totals over these rows, in one query (``None`` parts: no known price)."""
        sums = self.aggregate(**{part: Sum(col) for part, col in USAGE_COST_COLUMNS.items()})
        return Cost(**sums)

    def succeeded(self):
        return self.filter(status=AbstractUsage.SUCCEEDED)


class AbstractUsage(models.Model):
    """One provider attempt (retries, failures and cancellations included) with its
    token counts and costs frozen when the attempt ended.

    ``estimated``: the counts are ours, not the vendor's: the estimate written before the
    call (a ``pending`` attempt, a ``lost`` one), or, for an attempt stopped or broken off
    before the vendor reported them or answered by a vendor that reports no usage, the
    estimated input and the output weighed from what streamed or was answered (see
    :mod:`django_llmchat.loop.attempts`)."""

    PENDING, SUCCEEDED, FAILED, CANCELLED = "pending", "succeeded", "failed", "cancelled"
    LOST = "lost"
    """The process making the attempt died before it ended (marked by the recovery)."""
    STATUSES = (PENDING, SUCCEEDED, FAILED, CANCELLED, LOST)

    operation = models.CharField(max_length=32, default="chat")
    provider = models.CharField(max_length=64, blank=True)
    model_id = models.CharField(max_length=255, blank=True)
    status = models.CharField(max_length=16, default=PENDING)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_read_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_write_tokens = models.PositiveIntegerField(null=True, blank=True)
    thinking_tokens = models.PositiveIntegerField(null=True, blank=True)
    input_cost = models.DecimalField(**MONEY)
    output_cost = models.DecimalField(**MONEY)
    cache_read_cost = models.DecimalField(**MONEY)
    cache_write_cost = models.DecimalField(**MONEY)
    thinking_cost = models.DecimalField(**MONEY)
    total_cost = models.DecimalField(**MONEY)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    first_token_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    estimated = models.BooleanField(
        default=False,
        help_text="The tokens and cost are the estimate written before the provider call "
        "(the attempt is pending, or its process died before the vendor reported them).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = UsageQuerySet.as_manager()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.provider}/{self.model_id} {self.status}"

    @property
    def tokens(self) -> Tokens:
        return Tokens.from_object(self)

    @tokens.setter
    def tokens(self, value: Tokens) -> None:
        for name in TOKEN_FIELDS:
            setattr(self, name, getattr(value, name))

    @property
    def cost(self) -> Cost:
        return Cost(*(getattr(self, USAGE_COST_COLUMNS[p]) for p in COST_FIELDS))

    @cost.setter
    def cost(self, value: Cost) -> None:
        for part in COST_FIELDS:
            setattr(self, USAGE_COST_COLUMNS[part], getattr(value, part))

    def freeze_cost(self) -> Cost:
        """Price this attempt's tokens now and store the result on the row (unsaved)."""
        tokens = self.tokens
        cost = price(tokens, self.model_id, self.provider) if not tokens.is_empty else Cost()
        self.cost = cost
        return cost


class Usage(AbstractUsage):
    # The ledger: a row outlives its chat and its user. ``chat_id`` and ``user_id`` are
    # plain values (no database constraint, nothing done on delete), so deleting a chat or
    # a user never lowers the spend the limits and the dashboard sum by them; the chat's
    # title is copied into ``chat_title`` when the chat is deleted. ``usage.chat`` and
    # ``usage.user`` raise DoesNotExist once their row is gone: read ``chat_label``.
    # indexed by llmchat_usage_chat_idx and llmchat_usage_msg_idx
    chat = models.ForeignKey(
        "django_llmchat.Chat",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="usages",
        db_index=False,
    )
    chat_title = models.CharField(
        max_length=255,
        blank=True,
        editable=False,
        help_text="The chat's title, kept here when the chat is deleted (blank while it "
        "exists, and once the user's data is erased).",
    )
    message = models.ForeignKey(
        "django_llmchat.Message",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="usages",
        db_index=False,
    )
    run = models.ForeignKey(
        "django_llmchat.Run",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="usages",
        db_index=False,  # llmchat_usage_run_idx
    )
    # the chat's user, copied when the row is written: the spending limits sum a user's
    # rows of a day or a month with one range scan of llmchat_usage_user_idx
    user = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="llmchat_usages",
        db_index=False,  # llmchat_usage_user_idx
        editable=False,
    )

    class Meta(AbstractUsage.Meta):
        db_table = "llmchat_usage"
        ordering = ("created_at", "id")
        verbose_name_plural = "usage"
        indexes = [
            models.Index(fields=["chat", "created_at"], name="llmchat_usage_chat_idx"),
            models.Index(fields=["message"], name="llmchat_usage_msg_idx"),
            models.Index(fields=["run"], name="llmchat_usage_run_idx"),
            models.Index(fields=["provider", "model_id"], name="llmchat_usage_model_idx"),
            # the usage dashboard's date range
            models.Index(fields=["created_at"], name="llmchat_usage_created_idx"),
            models.Index(fields=["user", "created_at"], name="llmchat_usage_user_idx"),
        ]

    def save(self, *args, **kwargs):
        if self.user_id is None and self.chat_id is not None:
            field = type(self).chat
            if field.is_cached(self) and self.chat is not None:
                self.user_id = self.chat.user_id
            else:
                chats = field.field.related_model._default_manager.filter(pk=self.chat_id)
                self.user_id = chats.values_list("user_id", flat=True).first()
        super().save(*args, **kwargs)

    @property
    def chat_exists(self) -> bool:
        """Whether the row's chat is still there (reads it unless it was selected)."""
        if self.chat_id is None:
            return False
        try:
            self.chat  # noqa: B018
        except models.ObjectDoesNotExist:
            return False
        return self.chat is not None

    @property
    def chat_label(self) -> str:
        """The chat's title, the one kept when it was deleted, or ``Chat <id>``."""
        if self.chat_exists:
            return str(self.chat)
        if self.chat_title:
            return f"{self.chat_title} (deleted)"
        return f"Chat {self.chat_id} (deleted)" if self.chat_id else "(no chat)"


class UsageDashboard(Usage):
    """No table of its own: the admin's usage dashboard, listed beside the other models."""

    class Meta:
        proxy = True
        verbose_name = "usage dashboard"
        verbose_name_plural = "usage dashboard"
