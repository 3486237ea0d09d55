"""Idempotency keys' rows (``models/idempotency.py``): a key is printable ASCII without
surrounding spaces, unique per user, chat, route and key, and purged after
``LLMCHAT["IDEMPOTENCY_TTL"]``."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from django_llmchat.models import Chat, IdempotencyKey
from django_llmchat.models.idempotency import KEY_PATTERN, expired_before, purge_expired_keys

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "key, valid",
    [
        ("a", True),
        ("abc-123_~!", True),
        ("two words", True),
        (" lead", False),
        ("trail ", False),
        ("", False),
        ("tab\tin", False),
        ("é", False),
        ("x" * 255, True),
    ],
)
def test_key_pattern(key, valid):
    assert bool(re.match(KEY_PATTERN, key)) is valid


def test_a_key_is_validated_and_unique_per_user_chat_and_route(django_user_model):
    user = django_user_model.objects.create_user("k")
    chat, other = Chat.objects.create(user=user), Chat.objects.create(user=user)
    row = IdempotencyKey(user=user, chat=chat, scope="messages", key="k1", request_hash="h")
    row.full_clean(exclude=["run"])
    row.save()
    assert str(row) == "messages 'k1'"
    with pytest.raises(ValidationError):
        IdempotencyKey(
            user=user, chat=chat, scope="messages", key=" k", request_hash="h"
        ).full_clean()
    IdempotencyKey.objects.create(
        user=user, chat=other, scope="messages", key="k1", request_hash="h"
    )
    IdempotencyKey.objects.create(user=user, chat=chat, scope="cancel", key="k1", request_hash="h")
    with pytest.raises(IntegrityError), transaction.atomic():
        IdempotencyKey.objects.create(
            user=user, chat=chat, scope="messages", key="k1", request_hash="h2"
        )


def test_expired_keys_are_purged(django_user_model, settings):
    settings.LLMCHAT = {"IDEMPOTENCY_TTL": 3600}
    user = django_user_model.objects.create_user("k")
    chat = Chat.objects.create(user=user)
    old, new = (
        IdempotencyKey.objects.create(
            user=user, chat=chat, scope="messages", key=k, request_hash="h"
        )
        for k in ("old", "new")
    )
    IdempotencyKey.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=2))
    assert abs(expired_before() - (timezone.now() - timedelta(hours=1))) < timedelta(seconds=5)
    assert purge_expired_keys() == 1
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["new"]
    assert purge_expired_keys() == 0
