"""``LLMCHAT["ENCRYPTION_KEYS"]``: content and tool arguments are ciphertext in the
database, plain text through the Python API, REST and the admin; keys rotate."""

from __future__ import annotations

import io

import pytest
from cryptography.fernet import Fernet
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from django_llmchat.models import Chat, Message, ToolCall
from django_llmchat.models.protected import MARKER
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as WireCall
from django_llmchat.tools import tool

pytestmark = pytest.mark.django_db(transaction=True)

K1 = Fernet.generate_key().decode()
K2 = Fernet.generate_key().decode()
SECRET = "the vault code is 7731"


@tool
def enc_vault(room: str) -> str:
    """Opens a vault"""
    return f"{SECRET} for {room}"


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


@pytest.fixture
def keyed(fake_llm):
    fake_llm.configure("anthropic", "claude-haiku-4-5", ENCRYPTION_KEYS=[K1])
    return fake_llm


@pytest.fixture
def conversation(keyed, django_user_model):
    user = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    keyed.script(
        Reply(
            tool_calls=[WireCall("enc_vault", {"room": "room 101"})],
            thinking="I should open room 101.",
            thinking_signature="sig-1",
        ),
        Reply("Opened: " + SECRET),
    )
    chat = Chat.objects.create(
        user=user, provider="anthropic", model_id="claude-haiku-4-5", tools=["enc_vault"]
    )
    answer = chat.ask("Open room 101 and tell me the code")
    assert answer.content == "Opened: " + SECRET
    return chat, user


def test_the_database_holds_ciphertext_only(conversation, keyed):
    messages, calls = stored_rows()
    assert len(messages) == 4 and len(calls) == 1
    assert [content == "" for content, *_ in messages] == [False, True, False, False]
    for content, thinking, raw in messages:
        assert content == "" or encrypted(content)
        assert thinking == "" or encrypted(thinking)
        assert raw is None or encrypted(raw)
        for value in (content, thinking, raw or ""):
            assert SECRET not in value and "room 101" not in value
    assert encrypted(calls[0][0]) and "room 101" not in calls[0][0]
    # the second request was built from the stored (encrypted) transcript, in plain text
    second = keyed.requests[1].raw_body.decode()
    assert SECRET in second and "room 101" in second


def test_python_api_reads_plain_text(conversation):
    chat, _user = conversation
    roles = [(m.role, m.content) for m in chat.transcript()]
    assert roles[0] == ("user", "Open room 101 and tell me the code")
    assert roles[2] == ("tool", f"{SECRET} for room 101")
    assert roles[3] == ("assistant", "Opened: " + SECRET)
    call = ToolCall.objects.get()
    assert call.arguments == {"room": "room 101"}
    assert Message.objects.get(role="assistant", content="").thinking.text == (
        "I should open room 101."
    )
    assert list(Message.objects.filter(role="tool").values_list("content", flat=True)) == [
        f"{SECRET} for room 101"
    ]
    # the cost: the database compares ciphertext (empty values are stored as they are)
    assert not Message.objects.filter(content__icontains="vault").exists()
    assert Message.objects.filter(content="").count() == 1


def test_rest_and_admin_read_plain_text(conversation):
    chat, user = conversation
    api = APIClient()
    api.force_authenticate(user)
    body = api.get(reverse("llmchat-api:chat-messages", kwargs={"pk": chat.pk})).json()
    contents = [m["content"] for m in body["results"]]
    assert "Opened: " + SECRET in contents
    call = next(m for m in body["results"] if m["tool_calls"])
    assert call["tool_calls"][0]["arguments"] == {"room": "room 101"}
    assert call["tool_calls"][0]["result"]["content"] == f"{SECRET} for room 101"

    admin = APIClient()
    admin.force_login(user)
    html = admin.get(reverse("admin:django_llmchat_chat_change", args=[chat.pk])).content.decode()
    assert "Opened: " + SECRET in html and "room 101" in html
    assert MARKER not in html


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


def test_a_bad_key_is_a_check_error_that_never_shows_it():
    bad = "not-a-fernet-key-but-a-secret-value"
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K1, bad]}):
        errors = [e for e in run_checks() if e.id == "llmchat.E062"]
    assert len(errors) == 1
    assert "LLMCHAT['ENCRYPTION_KEYS'][1]" in errors[0].msg
    assert bad not in errors[0].msg + (errors[0].hint or "")
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": {"a": K1}}):
        assert [e for e in run_checks() if e.id == "llmchat.E062"]
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K2, K1]}):
        assert not [e for e in run_checks() if e.id == "llmchat.E062"]


def test_a_ui_chat_reload_keeps_the_clients_message_ids(keyed, django_user_model):
    """The client's message id lives in the (encrypted) ``raw``: a reload still names the
    user message as the client did, and a retry with that id is still one request."""
    user = django_user_model.objects.create_user("reloader", password="pw")
    api = APIClient()
    api.force_authenticate(user)
    body = {
        "id": "enc-chat",
        "messages": [{"id": "u-1", "role": "user", "parts": [{"type": "text", "text": SECRET}]}],
        "trigger": "submit-message",
    }
    keyed.script("Noted.")
    response = api.post(reverse("llmchat-api:ui-chat"), body, format="json")
    assert response.status_code == 200, response.content
    b"".join(response.streaming_content)
    chat = Chat.objects.get(user=user)
    (raw,) = [r for (r,) in _raw_of(chat)]
    assert encrypted(raw)
    reloaded = api.get(reverse("llmchat-api:ui-chat-messages", kwargs={"id": str(chat.pk)}))
    assert [m["id"] for m in reloaded.json()][0] == "u-1"
    again = api.post(reverse("llmchat-api:ui-chat"), body, format="json")
    assert again.status_code == 200  # the first request's outcome (no stream to replay here)
    assert Message.objects.filter(chat=chat, role="user").count() == 1


def _raw_of(chat):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT raw FROM llmchat_message WHERE chat_id = %s AND role = 'user'", [chat.pk]
        )
        return cursor.fetchall()
