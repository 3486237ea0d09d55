"""Every input rule against every entry path (``django_llmchat.inputs``): REST messages
(JSON and multipart), the same route streamed inline, ``ui/chat``, and ``chats/`` create
and update where the rule applies. A refused request is a 400 naming the field, and
nothing is stored or sent: no message, run or attachment file, no request to the
provider."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from django_llmchat.models import Attachment, Chat, LLMModel, Message, Run

from .conftest import url

pytestmark = pytest.mark.django_db

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
EXE = b"MZ\x90\x00\x03" + b"\x00" * 40


@dataclass(frozen=True)
class File:
    name: str
    data: bytes
    declared: str


# -- the paths a prompt takes ---------------------------------------------------------------
def rest(api, chat, text, files, *, sse=False, multipart=False):
    extra = {"HTTP_ACCEPT": "text/event-stream"} if sse else {}
    if multipart or files:
        body = {"content": text}
        if files:
            body["attachments"] = [
                SimpleUploadedFile(f.name, f.data, content_type=f.declared) for f in files
            ]
        return api.post(url("chat-messages", pk=chat.pk), body, format="multipart", **extra)
    return api.post(url("chat-messages", pk=chat.pk), {"content": text}, format="json", **extra)


def ui_chat(api, chat, text, files):
    parts = [
        {
            "type": "file",
            "mediaType": f.declared,
            "filename": f.name,
            "url": f"data:{f.declared};base64,{base64.b64encode(f.data).decode()}",
        }
        for f in files
    ]
    parts.append({"type": "text", "text": text})
    body = {"id": "new-chat", "messages": [{"id": "u1", "role": "user", "parts": parts}]}
    # the API's JSON refusal (without Accept, the AI SDK gets the same as text)
    return api.post(url("ui-chat"), body, format="json", HTTP_ACCEPT="application/json")


PROMPT_PATHS = {
    "rest-json": lambda api, chat, text, files: rest(api, chat, text, files),
    "rest-multipart": lambda api, chat, text, files: rest(api, chat, text, files, multipart=True),
    "sse-json": lambda api, chat, text, files: rest(api, chat, text, files, sse=True),
    "sse-multipart": lambda api, chat, text, files: rest(
        api, chat, text, files, sse=True, multipart=True
    ),
    "ui-chat": ui_chat,
}
# where each path reports a refused text or file
TEXT_FIELD = {"ui-chat": "messages"}
FILES_FIELD = {"ui-chat": "messages"}

# rule id -> (LLMCHAT overrides, text, files, "text" or "files", the reason's words)
PROMPT_RULES = {
    "a million characters": ({}, "x" * 1_000_000, [], "text", "is too long"),
    "text of whitespace": ({}, "  \n ", [], "text", "must not be empty"),
    "null characters": ({}, "a\x00b", [], "text", "null characters"),
    "forty files": (
        {},
        "see",
        [File(f"{i}.png", PNG, "image/png") for i in range(40)],
        "files",
        "too many files (40; at most 10)",
    ),
    "an empty file": ({}, "see", [File("e.txt", b"", "text/plain")], "files", "is empty"),
    "evil.html": (
        {},
        "see",
        [File("evil.html", b"<script>alert(1)</script>", "text/html")],
        "files",
        "type text/html is not allowed",
    ),
    "an EXE declared image/png": (
        {},
        "see",
        [File("cat.png", EXE, "image/png")],
        "files",
        "the content is not image/png",
    ),
    "a zip named .pdf": (
        {},
        "see",
        [File("doc.pdf", b"PK\x03\x04rest", "application/pdf")],
        "files",
        "type application/zip is not allowed",
    ),
    "a file too large": (
        {"MAX_ATTACHMENT_SIZE": 16},
        "see",
        [File("big.png", PNG, "image/png")],
        "files",
        "too large",
    ),
    "a file type left out of the allowlist": (
        {"ALLOWED_ATTACHMENT_TYPES": ["image/png"]},
        "see",
        [File("notes.txt", b"plain words", "text/plain")],
        "files",
        "type text/plain is not allowed",
    ),
}


def _files_on_disk(settings) -> list[Path]:
    root = Path(settings.MEDIA_ROOT)
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def assert_nothing_happened(fake_llm, settings, chats_before: int):
    assert not Message.objects.exists()
    assert not Run.objects.exists()
    assert not Attachment.objects.exists()
    assert _files_on_disk(settings) == []
    assert Chat.objects.count() == chats_before
    assert fake_llm.requests == []


@pytest.fixture
def configured(fake_llm, monkeypatch):
    """The fake provider as every built-in provider (``ONLY``: as these alone); a run a
    refusal let through would reach it (in the request: no broker, tasks inline)."""
    for env in ("OLLAMA_BASE_URL", "OLLAMA_HOST", "OLLAMA_API_KEY"):
        monkeypatch.delenv(env, raising=False)

    def configure(ONLY=None, **llmchat):  # noqa: N803 - beside the LLMCHAT keys
        if ONLY is not None:
            llmchat["PROVIDERS"] = {k: v for k, v in fake_llm.settings().items() if k in ONLY}
        fake_llm.configure("openai", "gpt-4.1-mini", TASKS_EAGER_WITHOUT_BROKER="inline", **llmchat)
        fake_llm.script(*["Answered."] * 4)

    return configure


@pytest.mark.parametrize(
    "rule, path",
    [
        (rule, path)
        for rule in sorted(PROMPT_RULES)
        for path in sorted(PROMPT_PATHS)
        # files need a multipart body (a JSON body with attachments is refused)
        if not (PROMPT_RULES[rule][2] and path.endswith("-json"))
    ],
)
def test_every_prompt_rule_on_every_path(api, chat, configured, fake_llm, settings, path, rule):
    overrides, text, files, kind, reason = PROMPT_RULES[rule]
    configured(**overrides)
    chats_before = Chat.objects.count()
    response = PROMPT_PATHS[path](api, chat, text, files)
    assert response.status_code == 400, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    fields = TEXT_FIELD if kind == "text" else FILES_FIELD
    field = fields.get(path, "content" if kind == "text" else "attachments")
    body = response.json()
    assert list(body) == [field], body
    assert reason.lower() in " ".join(body[field]).lower(), body
    assert_nothing_happened(fake_llm, settings, chats_before)


@pytest.mark.parametrize("path", ["rest-multipart", "sse-multipart", "ui-chat"])
def test_an_svg_holding_text_is_stored_as_text_on_every_path(api, chat, configured, path):
    configured()
    evil = File("evil.svg", b"<svg onload=alert(1)>", "image/svg+xml")
    response = PROMPT_PATHS[path](api, chat, "see", [evil])
    assert response.status_code in (200, 202), response.content[:500]
    if response.streaming:
        b"".join(response.streaming_content)
    attachment = Attachment.objects.get()
    assert (attachment.filename, attachment.mime_type) == ("evil.txt", "text/plain")
    assert attachment.file.name.endswith("/evil.txt")


@pytest.mark.parametrize("path", ["rest-multipart", "sse-multipart", "ui-chat"])
def test_a_png_sent_as_octet_stream_is_stored_as_a_png_on_every_path(api, chat, configured, path):
    configured()
    response = PROMPT_PATHS[path](api, chat, "see", [File("cat", PNG, "application/octet-stream")])
    assert response.status_code in (200, 202), response.content[:500]
    if response.streaming:
        b"".join(response.streaming_content)
    attachment = Attachment.objects.get()
    assert (attachment.filename, attachment.mime_type) == ("cat.png", "image/png")


def test_ui_chat_makes_no_chat_on_an_unconfigured_default_provider(
    api, fake_llm, settings, monkeypatch
):
    for env in ("OLLAMA_BASE_URL", "OLLAMA_HOST", "OLLAMA_API_KEY"):
        monkeypatch.delenv(env, raising=False)
    openai = fake_llm.settings()["openai"]
    settings.LLMCHAT = {
        "PROVIDERS": {"openai": openai},
        "DEFAULT_PROVIDER": "ollama",  # its default URL is this server's localhost
        "DEFAULT_MODEL": "llama3",
        "TASKS_EAGER_WITHOUT_BROKER": "inline",
    }
    response = ui_chat(api, None, "hello", [])
    assert response.status_code == 400, response.content
    (reason,) = response.json()["id"]
    assert 'LLMCHAT["DEFAULT_PROVIDER"]' in reason and "not configured" in reason
    assert "ollama" not in reason and "localhost" not in reason
    assert_nothing_happened(fake_llm, settings, 0)
    # an existing chat of the user is found by its id as before
    chat = Chat.objects.create(user=api.user, provider="openai", model_id="gpt-4.1-mini")
    fake_llm.script("Hi.")
    body = {"id": str(chat.pk), "messages": [{"id": "u", "role": "user", "parts": []}]}
    body["messages"][0]["parts"] = [{"type": "text", "text": "hello"}]
    ok = api.post(url("ui-chat"), body, format="json")
    assert ok.status_code == 200
    b"".join(ok.streaming_content)
    assert chat.messages.filter(role="assistant").exists()


def test_ui_chat_makes_no_chat_on_a_default_model_left_out_of_allowed_models(
    api, configured, fake_llm, settings
):
    configured(ALLOWED_MODELS=["openai/gpt-4.1"])
    response = ui_chat(api, None, "hello", [])
    assert response.status_code == 400, response.content
    assert 'LLMCHAT["DEFAULT_MODEL"]' in response.json()["id"][0]
    assert_nothing_happened(fake_llm, settings, 0)


# -- chats: create and update ---------------------------------------------------------------
SMALL = {"provider": "openai", "model_id": "small-model"}
# rule id -> (LLMCHAT overrides, body, field, the reason's words)
CHAT_RULES = {
    "history builtins.print": ({}, {"history": "builtins.print"}, "history", "dotted path"),
    "history strategy builtins.print": (
        {},
        {"history": {"strategy": "builtins.print"}},
        "history.strategy",
        "dotted path",
    ),
    "history estimator builtins.print": (
        {},
        {"history": {"estimator": "builtins.print"}},
        "history.estimator",
        "dotted path",
    ),
    "history unknown name": ({}, {"history": "keep_recent"}, "history", "not registered"),
    "history unknown estimator": (
        {},
        {"history": {"estimator": "tiktoken"}},
        "history.estimator",
        "not registered",
    ),
    "history unconfigured summary_provider": (
        {"ONLY": ["openai"]},
        {"history": {"strategy": "summarize", "summary_provider": "ollama"}},
        "history.summary_provider",
        "not configured",
    ),
    "history summary_model outside ALLOWED_MODELS": (
        {"ALLOWED_MODELS": ["openai/gpt-4.1-mini"]},
        {"history": {"strategy": "summarize", "summary_model": "o3-pro"}},
        "history.summary_model",
        "not allowed",
    ),
    "history summary_provider outside ALLOWED_MODELS": (
        {"ALLOWED_MODELS": ["openai/*"]},
        {"history": {"summary_provider": "anthropic", "summary_model": "claude-opus-4-1"}},
        "history.summary_provider",
        "not configured",
    ),
    "history bad option type": ({}, {"history": {"keep": "half"}}, "history.keep", "keep must"),
    "history unknown option": ({}, {"history": {"size": 3}}, "history.size", "unknown option"),
    "history null characters": (
        {},
        {"history": {"summary_prompt": "a\x00b"}},
        "history",
        "NUL",
    ),
    "unconfigured provider": (
        {"ONLY": ["openai"]},
        {"provider": "ollama"},
        "provider",
        "not configured",
    ),
    "model outside ALLOWED_MODELS": (
        {"ALLOWED_MODELS": ["openai/gpt-4.1-mini"]},
        {"model_id": "o3-pro"},
        "model_id",
        "not allowed",
    ),
    "a vendor option the library owns": (
        {},
        {"params": {"openai": {"model": "gpt-evil"}}},
        "params",
        "openai.model is set by the library",
    ),
    "max_tokens above the model's output": (
        {},
        {**SMALL, "params": {"max_tokens": 8000}},
        "params",
        "max_tokens must be at most 4096 for small-model",
    ),
    "reserved context keys": ({}, {"context": {"skills": 1}}, "context", "reserved keys"),
    "unregistered tools": ({}, {"tools": ["os.system"]}, "tools", "unknown tools"),
}
CHAT_PATHS = ["POST chats/", "PUT chats/{id}/", "PATCH chats/{id}/"]


def send_chat(api, chat, path, body):
    if path == "POST chats/":
        return api.post(url("chat-list"), body, format="json")
    method = api.put if path.startswith("PUT") else api.patch
    return method(url("chat-detail", pk=chat.pk), body, format="json")


def chat_row(chat) -> tuple:
    chat.refresh_from_db()
    return (chat.provider, chat.model_id, chat.params, chat.history, chat.tools, chat.context)


@pytest.fixture
def small_model(db):
    return LLMModel.objects.create(
        provider="openai", model_id="small-model", name="Small", max_output_tokens=4096
    )


@pytest.mark.parametrize("path", CHAT_PATHS)
@pytest.mark.parametrize("rule", sorted(CHAT_RULES))
def test_every_chat_rule_on_every_path(
    api, chat, configured, fake_llm, settings, small_model, path, rule
):
    overrides, body, field, reason = CHAT_RULES[rule]
    configured(**overrides)
    before = chat_row(chat)
    response = send_chat(api, chat, path, body)
    assert response.status_code == 400, response.content
    errors = response.json()
    assert list(errors) == [field], errors
    assert reason.lower() in " ".join(errors[field]).lower(), errors
    assert Chat.objects.count() == 1 and chat_row(chat) == before
    assert fake_llm.requests == [] and not Run.objects.exists()


@pytest.mark.parametrize("change", [{"model_id": "small-model"}, SMALL])
def test_a_model_switch_re_caps_max_tokens(api, chat, configured, small_model, change):
    configured()
    chat.params = {"max_tokens": 8000}
    chat.save()
    for send in (api.patch, api.put):
        response = send(url("chat-detail", pk=chat.pk), change, format="json")
        assert response.status_code == 400, response.content
        (reason,) = response.json()["params"]
        assert reason.startswith("max_tokens must be at most 4096 for small-model")
        chat.refresh_from_db()
        assert chat.model_id == "gpt-4.1-mini"
    # the switch with a max_tokens that fits goes through
    ok = api.patch(
        url("chat-detail", pk=chat.pk), {**change, "params": {"max_tokens": 4096}}, format="json"
    )
    assert ok.status_code == 200, ok.content
    chat.refresh_from_db()
    assert (chat.model_id, chat.params) == ("small-model", {"max_tokens": 4096})


def test_a_provider_switch_re_checks_the_summary_model(api, chat, configured):
    # the summary model was allowed beside the chat's provider, not beside the new one
    configured(ALLOWED_MODELS=["openai/*", "openrouter/cheap-model"])
    ok = api.patch(
        url("chat-detail", pk=chat.pk),
        {"history": {"strategy": "summarize", "summary_model": "anthropic/claude-opus-4-1"}},
        format="json",
    )
    assert ok.status_code == 200, ok.content
    switch = {"provider": "openrouter", "model_id": "cheap-model"}
    refused = api.patch(url("chat-detail", pk=chat.pk), switch, format="json")
    assert refused.status_code == 400, refused.content
    assert "not allowed" in refused.json()["history.summary_model"][0]
    chat.refresh_from_db()
    assert chat.provider == "openai"
