"""Feedback on replies: a thumbs up or down (``rating`` +1 / -1) and a comment, one per
user per assistant message (a repeat updates it). ``Message.rate()`` writes it."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.db import models, transaction

from ..errors import ArgumentError
from .protected import ProtectedTextField

RATINGS = (1, -1)
"""The ratings a reply takes: ``1`` (thumbs up) and ``-1`` (thumbs down)."""

COMMENT_MAX_LENGTH = 2000
"""The longest comment, in characters (checked by ``rate()`` and the REST API; the column
is a text column, so the bound is not the schema's)."""


def _refused(field: str, reason: str) -> ArgumentError:
    error = ArgumentError(f"{field} {reason}")
    error.field = field  # the REST API's 400 names it
    return error


def check_feedback(message: Any, rating: Any, comment: Any) -> str:
    """Refuse a rating on anything but a stored assistant reply, a rating other than +1
    or -1, or a comment that is no string, holds a NUL character or is too long
    (:class:`~django_llmchat.errors.ArgumentError` naming the argument; its ``field``
    says which). Returns the comment, stripped."""
    if getattr(message, "pk", None) is None:
        raise _refused("message", "must be a stored message")
    if message.role != "assistant":
        raise _refused("message", f"must be an assistant reply, not a {message.role} message")
    if isinstance(rating, bool) or not isinstance(rating, int) or rating not in RATINGS:
        raise _refused("rating", f"must be 1 or -1, got {rating!r}")
    if comment is None:
        comment = ""
    if not isinstance(comment, str):
        raise _refused("comment", f"must be a string, got {type(comment).__name__}")
    if "\x00" in comment:
        raise _refused("comment", "must not contain null characters")
    comment = comment.strip()
    if len(comment) > COMMENT_MAX_LENGTH:
        raise _refused(
            "comment", f"must be at most {COMMENT_MAX_LENGTH} characters, got {len(comment)}"
        )
    return comment


class FeedbackQuerySet(models.QuerySet):
    def rate(self, message: Any, rating: int, comment: str = "", *, user: Any = None):
        """Store ``user``'s feedback on ``message`` (an assistant reply): created, or the
        earlier one of the same user updated. ``user=None`` is feedback without a user
        (``rate()`` keeps one per message too). Returns the row."""
        comment = check_feedback(message, rating, comment)
        user_id = getattr(user, "pk", user)
        values = {"rating": int(rating), "comment": comment}
        if user_id is None:
            # no unique index without a user (an anonymised chat keeps its ratings, each
            # unlinked from its user): the oldest one is the one to update
            with transaction.atomic():
                row = (
                    self.select_for_update()
                    .filter(message=message, user__isnull=True)
                    .order_by("id")
                    .first()
                )
                if row is None:
                    return self.create(message=message, user=None, **values)
                for name, value in values.items():
                    setattr(row, name, value)
                row.save(update_fields=[*values, "updated_at"])
                return row
        # race-safe: get_or_create under it reads the winner's row after an IntegrityError
        row, _created = self.update_or_create(message=message, user_id=user_id, defaults=values)
        return row

    def of(self, message: Any, user: Any = None):
        """``user``'s feedback on ``message`` (``user=None``: the feedback without a user),
        or ``None``."""
        user_id = getattr(user, "pk", user)
        return self.filter(message=message, user_id=user_id).order_by("id").first()

    def withdraw(self, message: Any, user: Any = None) -> bool:
        """Delete ``user``'s feedback on ``message``: whether there was one."""
        deleted, _ = self.filter(message=message, user_id=getattr(user, "pk", user)).delete()
        return bool(deleted)


class AbstractFeedback(models.Model):
    """A user's rating of an assistant reply (+1 / -1) with an optional comment."""

    RATINGS = RATINGS
    COMMENT_MAX_LENGTH = COMMENT_MAX_LENGTH

    rating = models.SmallIntegerField(help_text="1: thumbs up; -1: thumbs down.")
    comment = ProtectedTextField(
        blank=True,
        default="",
        redact_as="user",
        help_text=f"What the user said about the reply (at most {COMMENT_MAX_LENGTH} characters).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = FeedbackQuerySet.as_manager()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        thumb = "+1" if self.rating == 1 else "-1"
        return f"{thumb} on message {self.message_id}"

    @property
    def is_positive(self) -> bool:
        return self.rating == 1

    @property
    def is_negative(self) -> bool:
        return self.rating == -1

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message_id, "rating": self.rating}
        if self.comment:
            out["comment"] = self.comment
        if self.user_id is not None:
            out["user"] = self.user_id
        out["created_at"] = self.created_at.isoformat() if self.created_at else None
        out["updated_at"] = self.updated_at.isoformat() if self.updated_at else None
        return out


class Feedback(AbstractFeedback):
    message = models.ForeignKey(
        "django_llmchat.Message",
        on_delete=models.CASCADE,
        related_name="feedback",
        db_index=False,  # llmchat_feedback_one_per_user starts with it
    )
    user = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # llmchat_feedback_user_idx
    )

    class Meta(AbstractFeedback.Meta):
        db_table = "llmchat_feedback"
        verbose_name_plural = "feedback"
        ordering = ("message_id", "id")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(rating__in=RATINGS), name="llmchat_feedback_rating_ck"
            ),
            models.UniqueConstraint(
                fields=["message", "user"], name="llmchat_feedback_one_per_user"
            ),
        ]
        indexes = [
            models.Index(
                fields=["user"],
                name="llmchat_feedback_user_idx",
                condition=models.Q(user__isnull=False),
            ),
            models.Index(fields=["rating"], name="llmchat_feedback_rating_idx"),
        ]
