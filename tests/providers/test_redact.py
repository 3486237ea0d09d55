"""``LLMCHAT["REDACT"]``: no secret leaves on any wire protocol (what the fake server
received is what a vendor would have), and ``REDACT_STORED`` decides what is stored."""

from __future__ import annotations

import base64
import binascii
import json
import re

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from django_llmchat.models import Chat, Message, ToolCall
from django_llmchat.providers.redact import redact_request
from django_llmchat.providers.types import (
    AttachmentData,
    ProviderMessage,
    ProviderRequest,
    ToolCallData,
)
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as WireCall
from django_llmchat.tools import tool
from django_llmchat.values import Thinking

pytestmark = pytest.mark.django_db(transaction=True)

EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
CARD = re.compile(r"\b(?:\d[ -]?){12,15}\d\b")
SECRETS = (
    "alice@example.com",
    "4111 1111 1111 1111",
    "5500-0000-0000-0004",
    "bob@example.org",
    "carol@example.net",
    "dave@example.com",
)
SEEN: list[tuple[str, object]] = []


def mask(text: str, *, field: str, chat=None) -> str:
    """The docs' example: e-mail addresses and card numbers masked."""
    SEEN.append((field, chat))
    return CARD.sub("[card]", EMAIL.sub("[email]", text))


@tool
def rd_lookup(email: str, n: int = 1) -> str:
    """Looks up a customer's payment method"""
    return f"{email} pays with card 5500-0000-0000-0004 ({n})"


PROTOCOLS = [
    pytest.param("openai", "gpt-4.1-mini", id="openai-responses"),
    pytest.param("ollama", "llama3.2", id="chat-completions"),
    pytest.param("anthropic", "claude-haiku-4-5", id="anthropic"),
    pytest.param("gemini", "gemini-2.5-flash", id="gemini"),
]


def sent_text(raw_body: bytes) -> str:
    """Everything a request carries as text: the body, and every base64 string in it
    decoded (Gemini sends text attachments as inline data)."""
    body = raw_body.decode("utf-8")
    found = [body]

    def walk(value):
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str) and len(value) >= 8:
            try:
                found.append(base64.b64decode(value, validate=True).decode("utf-8"))
            except (binascii.Error, ValueError):
                pass

    walk(json.loads(body))
    return "\n".join(found)


def converse(fake_llm, provider: str, model: str, **llmchat) -> Chat:
    """A chat whose second request carries every kind of text: instructions, an earlier
    assistant answer, the prompt, a text attachment, a tool call's arguments, its
    result."""
    fake_llm.configure(provider, model, REDACT=mask, **llmchat)
    fake_llm.script(
        Reply(tool_calls=[WireCall("rd_lookup", {"email": "bob@example.org", "n": 2})]),
        Reply("Done: carol@example.net is next."),
    )
    chat = Chat.objects.create(provider=provider, model_id=model, tools=["rd_lookup"])
    chat.add_message(role="system", content="The customer is alice@example.com.")
    chat.add_message(role="user", content="Hello")
    chat.add_message(role="assistant", content="Your card 4111 1111 1111 1111 is on file.")
    SEEN.clear()
    chat.ask(
        "Which card does alice@example.com use?",
        attachments=[("notes.txt", b"Backup contact: dave@example.com\n", "text/plain")],
    )
    return chat


@pytest.mark.parametrize(("provider", "model"), PROTOCOLS)
def test_no_secret_leaves_on_any_protocol(fake_llm, provider, model):
    chat = converse(fake_llm, provider, model)

    requests = fake_llm.requests
    assert len(requests) == 2
    for request in requests:
        text = sent_text(request.raw_body)
        for secret in SECRETS:
            assert secret not in text, (request.format, secret)
    second = sent_text(requests[1].raw_body)
    assert "[email]" in second and "[card]" in second
    assert "Backup contact: [email]" in second  # the attachment, redacted, still sent
    fields = {field for field, _chat in SEEN}
    assert {
        "system",
        "user",
        "assistant",
        "attachment",
        "filename",
        "tool_arguments",
        "tool_result",
    } <= fields
    assert all(seen.pk == chat.pk for _field, seen in SEEN)

    # egress only: the transcript keeps what was said
    stored = [m.content for m in chat.transcript()]
    assert "Which card does alice@example.com use?" in stored
    assert any("5500-0000-0000-0004" in c for c in stored), stored
    assert ToolCall.objects.get(chat=chat).arguments == {"email": "bob@example.org", "n": 2}


@pytest.mark.parametrize(("provider", "model"), PROTOCOLS)
def test_redact_stored_keeps_secrets_out_of_the_database(fake_llm, provider, model):
    chat = converse(fake_llm, provider, model, REDACT_STORED=True)

    for request in fake_llm.requests:
        text = sent_text(request.raw_body)
        assert not any(secret in text for secret in SECRETS)
    messages = list(Message.objects.filter(chat=chat))
    dumped = json.dumps(
        [[m.content, m.thinking_text, m.raw] for m in messages]
        + [tc.arguments for tc in ToolCall.objects.filter(chat=chat)],
        ensure_ascii=False,
    )
    for secret in SECRETS:
        assert secret not in dumped, secret
    assert "Which card does [email] use?" in [m.content for m in messages]
    assert ToolCall.objects.get(chat=chat).arguments == {"email": "[email]", "n": 2}


def test_arguments_are_redacted_per_string_value_keys_kept():
    request = ProviderRequest(
        model_id="m",
        messages=[
            ProviderMessage(
                role="assistant",
                tool_calls=[
                    ToolCallData(
                        "c1",
                        "send",
                        {"to": ["a@b.co", {"cc": "c@d.co"}], "a@b.co": 1, "raw": None},
                    )
                ],
                thinking=Thinking("thought about a@b.co", "sig"),
            ),
            ProviderMessage(role="assistant", thinking=Thinking("unsigned a@b.co")),
            ProviderMessage(
                role="user",
                content="",
                attachments=[
                    AttachmentData("text/csv", b"x,a@b.co\n", "list.csv"),
                    AttachmentData("text/plain", b"\xff\xfe not utf-8 a@b.co"),
                    AttachmentData("image/png", b"a@b.co", "scan of a@b.co"),
                ],
            ),
        ],
    )
    out = redact_request(request, mask)
    call = out.messages[0].tool_calls[0]
    assert call.arguments == {"to": ["[email]", {"cc": "[email]"}], "a@b.co": 1, "raw": None}
    assert out.messages[0].thinking.text == "thought about a@b.co"  # signed: verbatim
    assert out.messages[1].thinking.text == "unsigned [email]"
    csv, not_text, image = out.messages[2].attachments
    assert csv.data == b"x,[email]\n"
    assert not_text.data == b"\xff\xfe not utf-8 a@b.co"  # not text: sent as it was
    assert image.data == b"a@b.co" and image.filename == "scan of [email]"
    # the request itself is untouched (it is also what the answer is parsed against)
    assert request.messages[0].tool_calls[0].arguments["to"][0] == "a@b.co"
    assert redact_request(request, None) is request  # no hook configured


def test_the_hook_must_return_text():
    request = ProviderRequest(model_id="m", messages=[ProviderMessage(role="user", content="x")])
    with pytest.raises(TypeError, match="must return a str"):
        redact_request(request, lambda text, **kw: None)


def test_dotted_path_and_checks():
    with override_settings(LLMCHAT={"REDACT": "tests.providers.test_redact.mask"}):
        request = ProviderRequest(
            model_id="m", messages=[ProviderMessage(role="user", content="mail a@b.co")]
        )
        assert redact_request(request).messages[0].content == "mail [email]"
        assert not [e for e in run_checks(databases=[]) if e.id.startswith("llmchat.E06")]
    with override_settings(LLMCHAT={"REDACT": "tests.providers.test_redact.nothing_here"}):
        errors = [e for e in run_checks(databases=[]) if e.id == "llmchat.E060"]
        assert errors and "LLMCHAT['REDACT']" in errors[0].msg
    with override_settings(LLMCHAT={"REDACT": 42}):
        assert [e for e in run_checks(databases=[]) if e.id == "llmchat.E060"]
    with override_settings(LLMCHAT={"REDACT_STORED": True}):
        errors = [e for e in run_checks(databases=[]) if e.id == "llmchat.E061"]
        assert errors and "LLMCHAT['REDACT']" in errors[0].msg
