"""``LLMCHAT["ENCRYPTION_KEYS"]``: content and tool arguments are ciphertext in the
database, plain text through the Python API, REST and the admin; keys rotate."""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test import override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from django_llmchat.loop import transcript
from django_llmchat.loop.transcript import forget_history
from django_llmchat.models import Chat, LLMModel, Message, ToolCall
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


def test_a_bad_key_is_a_check_error_that_never_shows_it():
    bad = "not-a-fernet-key-but-a-secret-value"
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K1, bad]}):
        errors = [e for e in run_checks(databases=[]) if e.id == "llmchat.E062"]
    assert len(errors) == 1
    assert "LLMCHAT['ENCRYPTION_KEYS'][1]" in errors[0].msg
    assert bad not in errors[0].msg + (errors[0].hint or "")
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": {"a": K1}}):
        assert [e for e in run_checks(databases=[]) if e.id == "llmchat.E062"]
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K2, K1]}):
        assert not [e for e in run_checks(databases=[]) if e.id == "llmchat.E062"]


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


# -- what the model is sent: plain text on every path that reads the stored rows --------------
WORDS = ("plainword alpha", "plainword beta", "plainword gamma")


def plain_request(request, *words: str) -> str:
    """The recorded request body, checked: ``words`` in it, no ciphertext."""
    body = request.raw_body.decode()
    assert MARKER not in body and "gAAAAA" not in body
    for word in words:
        assert word in body, (word, body)
    return body


def new_chat(provider="anthropic", model="claude-haiku-4-5", **fields):
    return Chat.objects.create(provider=provider, model_id=model, **fields)


def test_a_second_ask_in_the_same_process_sends_plain_text(keyed):
    keyed.script("Reply one.", "Reply two.")
    chat = new_chat()
    chat.ask(WORDS[0])
    chat.ask(WORDS[1])
    plain_request(keyed.requests[0], WORDS[0])
    plain_request(keyed.requests[1], WORDS[0], "Reply one.", WORDS[1])
    assert encrypted(stored_rows()[0][0][0])


def test_a_cold_read_of_the_history_sends_plain_text(keyed):
    keyed.script("Reply one.", "Reply two.")
    chat = new_chat()
    chat.ask(WORDS[0])
    forget_history()  # a new process: the history is read from the rows
    chat.ask(WORDS[1])
    plain_request(keyed.requests[1], WORDS[0], "Reply one.", WORDS[1])


def test_a_history_answered_last_by_another_process_sends_plain_text(keyed):
    keyed.script("Reply one.", "Reply two.", "Reply three.")
    chat = new_chat()
    chat.ask(WORDS[0])
    # another process answers the second prompt: this one keeps what it built before
    kept = dict(transcript._built)
    chat.ask(WORDS[1])
    transcript._built.clear()
    transcript._built.update(kept)
    chat.ask(WORDS[2])
    plain_request(keyed.requests[2], WORDS[0], "Reply one.", WORDS[1], "Reply two.", WORDS[2])


def test_a_row_written_without_a_key_and_one_with_a_key_both_send_plain_text(keyed):
    keyed.script("Reply one.")
    chat = new_chat()
    with override_settings(LLMCHAT={**keyed.server.llmchat_settings("anthropic")}):
        chat.add_message(role="user", content=WORDS[0])  # stored before encryption
        chat.add_message(role="assistant", content="Old reply.")
    forget_history()
    chat.ask(WORDS[1])
    plain_request(keyed.requests[0], WORDS[0], "Old reply.", WORDS[1])


def test_tool_calls_results_and_thinking_come_back_plain_after_a_cold_read(conversation, keyed):
    chat, _user = conversation
    keyed.script("Still " + SECRET)
    forget_history()
    chat.ask("Again?")
    body = plain_request(keyed.requests[2], "room 101", SECRET, "I should open room 101.")
    assert "sig-1" in body  # the thinking block replayed with its signature
    assert json.loads(body)["messages"][1]["content"][1]["input"] == {"room": "room 101"}


def test_openai_item_ids_come_back_after_a_cold_read(fake_llm):
    """``raw`` (encrypted) holds the vendor's item ids: a cold read replays them as the run
    that stored them did."""
    fake_llm.configure("openai", "gpt-4.1-mini", ENCRYPTION_KEYS=[K1])
    fake_llm.script(
        Reply(tool_calls=[WireCall("enc_vault", {"room": "room 7"})], thinking="Think 7."),
        Reply("Opened."),
        Reply("Again."),
        Reply("Once more."),
    )
    chat = new_chat("openai", "gpt-4.1-mini", tools=["enc_vault"])
    chat.ask("Open room 7")
    warm = fake_llm.requests[1].body["input"]
    chat.ask("And now?")
    kept = fake_llm.requests[2].body["input"]
    forget_history()
    chat.ask("And then?")
    cold = fake_llm.requests[3].body["input"]
    replayed = [i for i in warm if i.get("type") == "function_call"]
    assert len(replayed) == 1 and replayed[0]["id"].startswith("fc_")
    assert [i for i in kept if i in replayed] == replayed
    assert [i for i in cold if i in replayed] == replayed
    assert cold[: len(kept)] == kept
    plain_request(fake_llm.requests[3], "room 7", SECRET, "Opened.", "Again.")


def test_a_summary_and_what_it_summarizes_are_sent_plain(fake_llm):
    from tests.loop.test_history import OUTPUT, WINDOW, fill, vendor

    fake_llm.configure("anthropic", "claude-haiku-4-5", ENCRYPTION_KEYS=[K1])
    LLMModel.objects.create(
        provider="anthropic",
        model_id="claude-haiku-4-5",
        name="claude-haiku-4-5",
        context_window=WINDOW,
        max_output_tokens=OUTPUT,
    )
    chat = new_chat()
    fill(chat, 200)
    chat.with_history("summarize")
    fake_llm.server.responder = vendor()
    forget_history()
    chat.ask("Turn 0: what now?")
    summary = Message.objects.get(chat=chat, summary_until__isnull=False)
    assert encrypted(_content_of(summary.pk))
    summarizing = [r for r in fake_llm.requests if "compact a conversation" in str(r.body)]
    assert len(summarizing) == 1
    plain_request(summarizing[0], "tell me about it", "it is so", "[result of lookup] result")
    forget_history()  # the next run reads the stored summary back
    chat.ask("Turn 1: and then?")
    plain_request(fake_llm.requests[-1], summary.content, "Reference document", "Turn 1")


def _content_of(pk):
    with connection.cursor() as cursor:
        cursor.execute("SELECT content FROM llmchat_message WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def test_export_rest_page_and_ui_reload_show_plain_text(conversation):
    from django_llmchat.chats.export import finetune_lines, transcripts_json

    chat, user = conversation
    lines = "".join(finetune_lines(Chat.objects.filter(pk=chat.pk)))
    exported = "".join(transcripts_json(Chat.objects.filter(pk=chat.pk)))
    for text in (lines, exported):
        assert MARKER not in text and SECRET in text and "room 101" in text
    api = APIClient()
    api.force_authenticate(user)
    page = api.get(reverse("llmchat-api:chat-messages", kwargs={"pk": chat.pk}))
    reload = api.get(reverse("llmchat-api:ui-chat-messages", kwargs={"id": str(chat.pk)}))
    for response in (page, reload):
        text = response.content.decode()
        assert response.status_code == 200
        assert MARKER not in text and SECRET in text and "room 101" in text
        assert "I should open room 101." in text


def test_without_the_key_a_stored_ciphertext_is_an_error_and_nothing_is_sent(keyed):
    keyed.script("Reply one.", "Reply two.")
    chat = new_chat()
    chat.ask(WORDS[0])
    forget_history()
    with override_settings(LLMCHAT={**keyed.server.llmchat_settings("anthropic")}):
        with pytest.raises(ImproperlyConfigured, match="Message.content is encrypted"):
            chat.ask(WORDS[1])
    assert len(keyed.requests) == 1
