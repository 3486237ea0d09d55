"""``manage.py llmchat_rotate_keys``: plain rows still read, and a rotation rewrites every
encrypted column, the idempotency answers too."""

from __future__ import annotations

import io

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

from django_llmchat.models import Chat, Message
from django_llmchat.models.protected import MARKER

pytestmark = pytest.mark.django_db(transaction=True)


K1 = Fernet.generate_key().decode()


K2 = Fernet.generate_key().decode()


SECRET = "the vault code is 7731"


def stored_rows() -> tuple[list[tuple], list[tuple]]:
    """The columns as the database holds them (no field conversion)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT content, thinking_text, raw FROM llmchat_message ORDER BY id")
        messages = cursor.fetchall()
        cursor.execute("SELECT arguments FROM llmchat_tool_call ORDER BY id")
        calls = cursor.fetchall()
    return messages, calls


def encrypted(value) -> bool:
    text = value if isinstance(value, str) else ""
    return text.startswith(MARKER) or text.startswith('"' + MARKER)


def test_plain_rows_still_read_and_rotation_rewrites_everything(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    old = chat.add_message(role="user", content="written before encryption")
    assert stored_rows()[0][0][0] == "written before encryption"

    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K1]}):
        assert Message.objects.get(pk=old.pk).content == "written before encryption"
        new = chat.add_message(role="assistant", content="written with K1")
        k1_token = stored_rows()[0][1][0]
        assert encrypted(k1_token)

    # a new key first, the old one kept: both read; rotation rewrites with the new one
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K2, K1]}):
        assert Message.objects.get(pk=new.pk).content == "written with K1"
        out = io.StringIO()
        call_command("llmchat_rotate_keys", stdout=out, batch_size=1)
        assert "django_llmchat.Message: 2 rows re-encrypted" in out.getvalue()
        rows = stored_rows()[0]
        assert all(encrypted(content) for content, *_ in rows)
        assert rows[1][0] != k1_token

    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K2]}):  # K1 retired
        assert [m.content for m in chat.transcript()] == [
            "written before encryption",
            "written with K1",
        ]

    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K1]}):  # the wrong key
        with pytest.raises(ImproperlyConfigured) as excinfo:
            list(chat.transcript())
    assert "cannot be decrypted" in str(excinfo.value)
    assert K1 not in str(excinfo.value) and K2 not in str(excinfo.value)

    with pytest.raises(ImproperlyConfigured, match="ENCRYPTION_KEYS'] is empty"):
        Message.objects.get(pk=new.pk)


def test_rotation_rewrites_the_idempotency_answers_too(django_user_model):
    from django_llmchat.models import IdempotencyKey

    user = django_user_model.objects.create_user("rotating", password="pw")
    chat = Chat.objects.create(user=user)
    answer = {"message": {"content": SECRET}}
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K1]}):
        IdempotencyKey.objects.create(
            user=user,
            chat=chat,
            scope="messages",
            key="k",
            request_hash="0" * 64,
            response_status=202,
            response_body=answer,
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT response_body FROM llmchat_idempotency_key")
        (stored,) = cursor.fetchone()
    assert encrypted(stored) and SECRET not in stored
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K2, K1]}):
        out = io.StringIO()
        call_command("llmchat_rotate_keys", stdout=out)
    assert "django_llmchat.IdempotencyKey: 1 rows re-encrypted" in out.getvalue()
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K2]}):
        assert IdempotencyKey.objects.get().response_body == answer
