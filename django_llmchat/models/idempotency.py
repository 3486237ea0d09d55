from __future__ import annotations

from django.conf import settings as django_settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from ..conf import settings
from .protected import ProtectedJSONField

# RFC 9110's visible ASCII (0x21-0x7E) and the space inside, as a header value carries it
KEY_PATTERN = r"\A[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?\Z"
KEY_MAX_LENGTH = 255


class AbstractIdempotencyKey(models.Model):
    """One ``Idempotency-Key`` a user sent with a request on a chat that starts (or stops)
    a run: what a retry with the same key on that chat gets back instead of a second run.

    ``scope`` is the route (``messages``, ``ui-chat``, ``approve``, ``deny``,
    ``cancel``); ``request_hash`` the HMAC-SHA256 (keyed with ``SECRET_KEY``) of the
    canonical request (the route, the chat, the body), so the same key with another body
    is told apart and nothing in it can confirm a guess of the prompt.
    ``response_status`` and ``response_body`` are the first answer (the message and the
    run as the API showed them: encrypted with ``LLMCHAT["ENCRYPTION_KEYS"]`` like a
    message's content, see :mod:`django_llmchat.models.protected`); ``None`` while the
    first request is still answering, and for a streamed answer the body says where its
    run's events begin."""

    scope = models.CharField(max_length=32)
    key = models.CharField(
        max_length=KEY_MAX_LENGTH,
        validators=[RegexValidator(KEY_PATTERN, "printable ASCII, at most 255 characters")],
    )
    request_hash = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # the answer shows the prompt: encrypted as the message is (not redacted again)
    response_body = ProtectedJSONField(null=True, blank=True, redacted=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.scope} {self.key!r}"


class IdempotencyKey(AbstractIdempotencyKey):
    user = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="llmchat_idempotency_keys",
        db_index=False,  # the unique constraint starts with it
    )
    chat = models.ForeignKey(
        "django_llmchat.Chat",
        on_delete=models.CASCADE,
        related_name="idempotency_keys",
        help_text="The chat the request was on.",
    )
    run = models.ForeignKey(
        "django_llmchat.Run",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="idempotency_keys",
    )

    class Meta(AbstractIdempotencyKey.Meta):
        db_table = "llmchat_idempotency_key"
        verbose_name = "idempotency key"
        constraints = [
            # a key names one request of one user on one chat: the same key on another
            # chat (a client numbering its messages per chat) is another request's
            models.UniqueConstraint(
                fields=["user", "chat", "scope", "key"], name="llmchat_idempotency_key_chat"
            )
        ]


def expired_before():
    """Keys created before this moment are past ``LLMCHAT["IDEMPOTENCY_TTL"]``."""
    from datetime import timedelta

    return timezone.now() - timedelta(seconds=float(settings.IDEMPOTENCY_TTL))


def purge_expired_keys() -> int:
    """Delete the idempotency keys older than ``LLMCHAT["IDEMPOTENCY_TTL"]`` (a retry
    ignores them anyway); returns how many."""
    deleted, _ = IdempotencyKey.objects.filter(created_at__lt=expired_before()).delete()
    return deleted
