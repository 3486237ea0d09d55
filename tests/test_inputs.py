"""``django_llmchat.inputs``, called directly (as a project's own view does), and the
registries of history processors and token estimators: names from API users, resolved at
run time; dotted paths from settings, agents and Python code. The same rules on every
API path: ``tests/api/test_input_paths.py``."""

from __future__ import annotations

import pickle

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from django_llmchat import inputs
from django_llmchat.errors import ArgumentError, InputError
from django_llmchat.models import Chat, LLMModel
from django_llmchat.testing import Reply

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
CALLS: list[str] = []


def keep_recent(messages, window):
    """A history processor: the system messages and the last two others."""
    CALLS.append("keep_recent")
    system = [m for m in messages if m.role == "system"]
    return system + [m for m in messages if m.role != "system"][-2:]


def words(message) -> int:
    CALLS.append("words")
    return len(message.content.split()) + 4


REGISTERED = {
    "HISTORY_PROCESSORS": {"recent": f"{__name__}.keep_recent"},
    "TOKEN_ESTIMATORS": {"words": f"{__name__}.words", "chars": lambda m: len(m.content)},
}


@pytest.fixture(autouse=True)
def _forget_calls():
    CALLS.clear()


def refused(call, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as caught:
        call(*args, **kwargs)
    return caught.value


# -- the error ------------------------------------------------------------------------------
def test_input_error_carries_the_field_and_the_reasons():
    exc = InputError("params", "temperature must be a number", "stop must be a string")
    assert isinstance(exc, ArgumentError) and isinstance(exc, ValueError)
    assert (exc.field, exc.reason) == ("params", "temperature must be a number")
    assert exc.to_dict() == {"params": ["temperature must be a number", "stop must be a string"]}
    assert str(exc) == "params: temperature must be a number; stop must be a string"
    again = pickle.loads(pickle.dumps(exc))
    assert (again.field, again.reasons) == (exc.field, exc.reasons)


# -- prompts --------------------------------------------------------------------------------
def test_text(settings):
    settings.LLMCHAT = {"MAX_CONTENT_LENGTH": 5}
    assert inputs.check_text("hello") == "hello"
    assert refused(inputs.check_text, "hello!").to_dict() == {
        "content": ["is too long (6 characters; at most 5)"]
    }
    assert refused(inputs.check_text, " \n").reason == "must not be empty"
    assert inputs.check_text("", required=False) == ""
    assert refused(inputs.check_text, "a\x00", field="q").field == "q"
    assert refused(inputs.check_text, 42).reason == "must be a string"


def test_files_as_uploads_or_tuples(settings):
    upload = SimpleUploadedFile("cat.svg", PNG, content_type="image/svg+xml")
    assert inputs.check_attachment(upload) == ("cat.png", PNG, "image/png")
    assert inputs.check_attachment(("notes", b"plain words")) == (
        "notes.txt",
        b"plain words",
        "text/plain",
    )
    assert inputs.check_attachment(("../../etc/evil.html", b"<b>", "text/plain"))[0] == "evil.txt"
    exe = refused(inputs.check_attachment, ("cat.png", b"MZ\x90\x00" + b"\x00" * 9, "image/png"))
    assert exe.to_dict() == {"attachments": ["cat.png: the content is not image/png"]}
    assert "is empty" in refused(inputs.check_attachment, ("e.txt", b"")).reason
    settings.LLMCHAT = {"MAX_ATTACHMENTS": 1, "MAX_ATTACHMENT_SIZE": 8}
    assert (
        "too many files (2; at most 1)"
        in refused(inputs.check_attachments, [("a", b"a"), ("b", b"b")]).reason
    )
    big = SimpleUploadedFile("big.png", PNG, content_type="image/png")
    assert refused(inputs.check_attachments, [big]).reason == (
        f"big.png: too large ({len(PNG)} bytes; at most 8)"
    )


def test_a_prompt_for_a_custom_view():
    text, files = inputs.check_prompt("What is this?", [("cat", PNG, "application/octet-stream")])
    assert (text, files) == ("What is this?", [("cat.png", PNG, "image/png")])
    assert refused(inputs.check_prompt, "", [], text_field="q").field == "q"


# -- providers, models, params --------------------------------------------------------------
PROVIDERS = {"PROVIDERS": {"openai": {"api_key": "k"}, "anthropic": {"api_key": "k"}}}


def test_providers_and_models(settings, monkeypatch):
    monkeypatch.delenv("OLLAMA_BASE_URL", raising=False)
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    settings.LLMCHAT = {**PROVIDERS, "ALLOWED_MODELS": ["openai/gpt-4.1-mini", "anthropic/*"]}
    assert inputs.configured_providers() == ["anthropic", "openai"]
    assert inputs.check_provider("openai") == "openai"
    assert refused(inputs.check_provider, "ollama").to_dict() == {
        "provider": ["provider 'ollama' is not configured; one of: anthropic, openai"]
    }
    inputs.check_model("anthropic", "claude-opus-4-1")
    assert refused(inputs.check_model, "openai", "o3-pro").to_dict() == {
        "model_id": ["model 'o3-pro' of 'openai' is not allowed"]
    }
    assert refused(inputs.check_model, "ollama", "llama3").reason == (
        "provider 'ollama' is not configured"
    )


def test_the_defaults_of_a_chat_made_for_an_api_user(settings):
    settings.LLMCHAT = {**PROVIDERS, "DEFAULT_PROVIDER": "gemini"}
    reason = refused(inputs.check_default_model).reason
    assert 'LLMCHAT["DEFAULT_PROVIDER"]' in reason and "gemini" not in reason
    settings.LLMCHAT = {**PROVIDERS, "ALLOWED_MODELS": ["openai/gpt-4.1"]}
    assert 'LLMCHAT["DEFAULT_MODEL"]' in refused(inputs.check_default_model).reason
    settings.LLMCHAT = PROVIDERS
    inputs.check_default_model()


def test_params_report_every_problem():
    exc = refused(inputs.check_params, {"temperature": 9, "stop": [1]})
    assert exc.reasons == (
        "temperature must be a number between 0 and 2",
        "stop must be a string or a list of strings",
    )
    owned = refused(inputs.check_params, {"openai": {"model": "x"}})
    assert owned.reason.startswith("openai.model is set by the library")
    assert inputs.check_params({"openai": {"reasoning": {"effort": "low"}}})


@pytest.mark.django_db
def test_max_tokens_within_the_models_output():
    LLMModel.objects.create(provider="openai", model_id="m", name="M", max_output_tokens=100)
    inputs.check_max_tokens({"max_tokens": 100}, "openai", "m")
    inputs.check_max_tokens({"max_tokens": 10**6}, "openai", "unknown-model")
    assert refused(inputs.check_max_tokens, {"max_tokens": 101}, "openai", "m").reason == (
        "max_tokens must be at most 100 for m"
    )
    kept = refused(inputs.check_max_tokens, {"max_tokens": 101}, "openai", "m", kept=True)
    assert "the chat's is 101" in kept.reason


@pytest.mark.django_db
def test_a_whole_chat(settings):
    settings.LLMCHAT = PROVIDERS
    LLMModel.objects.create(provider="openai", model_id="small", name="S", max_output_tokens=10)
    values = {"title": "Trip", "model_id": "small", "params": {"max_tokens": 10}}
    assert inputs.check_chat(values) == values
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1", params={"max_tokens": 50})
    assert refused(inputs.check_chat, {"model_id": "small"}, chat).field == "params"
    assert refused(inputs.check_chat, {"role": "system"}).to_dict() == {"role": ["unknown field"]}
    assert refused(inputs.check_chat, {"tools": ["os.system"]}).field == "tools"
    assert refused(inputs.check_chat, {"context": {"skills": 1}}).field == "context"


# -- history: names from the API ------------------------------------------------------------
@pytest.mark.parametrize(
    "value, field, words_",
    [
        ("builtins.print", "history", "dotted paths are not accepted"),
        ({"strategy": "os.system"}, "history.strategy", "dotted paths are not accepted"),
        ({"estimator": "builtins.len"}, "history.estimator", "dotted paths are not accepted"),
        ("keep_recent", "history", "'keep_recent' is not registered"),
        ({"estimator": "tiktoken"}, "history.estimator", "is not registered"),
        ({"strategy": "summarize", "keep": 2}, "history.keep", "keep must be"),
        (["window"], "history", "must be a strategy or an object"),
    ],
)
def test_history_from_the_api_is_names(settings, value, field, words_):
    settings.LLMCHAT = {**PROVIDERS, **REGISTERED}
    exc = refused(inputs.check_history, value)
    assert exc.field == field and words_ in exc.reason, exc


def test_registered_names_and_built_in_strategies_pass(settings):
    settings.LLMCHAT = {**PROVIDERS, **REGISTERED}
    for value in ("window", "summarize", "all", "recent", {"strategy": "recent"}, None):
        assert inputs.check_history(value) == value
    assert inputs.check_history({"strategy": "summarize", "estimator": "words", "keep": 0.3})
    # the registered names are listed for the client
    assert "one of: all, window, summarize, recent" in refused(inputs.check_history, "x.y").reason


def test_nothing_a_client_names_is_imported(settings, monkeypatch):
    settings.LLMCHAT = PROVIDERS
    imported = []
    monkeypatch.setattr(
        "django_llmchat.loop.history_policy.import_string", lambda path: imported.append(path)
    )
    for value in ("antigravity.fly", {"estimator": "this.x"}, {"strategy": "os.system"}):
        refused(inputs.check_history, value)
    assert imported == []


def test_the_summary_model_obeys_the_model_rules(settings, monkeypatch):
    monkeypatch.delenv("OLLAMA_BASE_URL", raising=False)
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    settings.LLMCHAT = {**PROVIDERS, "ALLOWED_MODELS": ["openai/gpt-4.1-mini", "anthropic/*"]}
    exc = refused(inputs.check_history, {"summary_provider": "ollama"})
    assert exc.field == "history.summary_provider" and "not configured" in exc.reason
    exc = refused(inputs.check_history, {"summary_model": "gpt-4.5"}, provider="openai")
    assert exc.to_dict() == {
        "history.summary_model": ["model 'gpt-4.5' of 'openai' is not allowed"]
    }
    # the chat's model on another provider
    exc = refused(
        inputs.check_history,
        {"summary_provider": "openai"},
        provider="anthropic",
        model_id="claude-haiku-4-5",
    )
    assert exc.field == "history.summary_provider"
    assert inputs.check_history(
        {"summary_provider": "anthropic", "summary_model": "claude-haiku-4-5"}, provider="openai"
    )
    # no summary choice: the chat's own model is the chat's business
    assert inputs.check_history({"strategy": "summarize"}, provider="openai", model_id="o3")


# -- history at run time --------------------------------------------------------------------
@pytest.mark.django_db
def test_a_policy_of_registered_names_set_over_the_api_runs(
    settings, fake_llm, django_capture_on_commit_callbacks
):
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    fake_llm.configure("openai", "gpt-4.1-mini", **REGISTERED, TASKS_EAGER_WITHOUT_BROKER="inline")
    LLMModel.objects.create(
        provider="openai", model_id="gpt-4.1-mini", name="G", context_window=100_000
    )
    user = get_user_model().objects.create_user("ada")
    api = APIClient()
    api.force_authenticate(user)
    chat = Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")
    policy = {"strategy": "recent", "estimator": "words"}
    patched = api.patch(f"/api/chats/{chat.pk}/", {"history": policy}, format="json")
    assert patched.status_code == 200, patched.content
    chat.refresh_from_db()
    assert chat.history == policy
    for n in range(3):
        chat.add_message(role="user", content=f"Question {n}")
        chat.add_message(role="assistant", content=f"Answer {n}")
    fake_llm.script(Reply("Done."))
    with django_capture_on_commit_callbacks(execute=True):
        sent = api.post(f"/api/chats/{chat.pk}/messages/", {"content": "Last?"}, format="json")
    assert sent.status_code == 202
    chat.refresh_from_db()
    assert chat.last_run.status == "succeeded"
    assert "keep_recent" in CALLS and "words" in CALLS
    body = str(fake_llm.last_request.body)
    assert "Last?" in body and "Question 0" not in body


def test_tools_of_configured_mcp_servers_are_accepted_by_name(settings):
    """``mcp:<server>`` names a server the project configured; any other server, or a
    malformed tool list, is refused as an unknown tool."""
    import pytest as _pytest

    from django_llmchat.errors import InputError
    from django_llmchat.inputs import check_tools

    settings.LLMCHAT = {"MCP_SERVERS": {"files": {"url": "http://127.0.0.1:9/mcp"}}}
    assert check_tools(["mcp:files", "mcp:files/read_file,stat"]) == [
        "mcp:files",
        "mcp:files/read_file,stat",
    ]
    for bad in ("mcp:other", "mcp:files/read file", "mcp:", "mcp:files/"):
        with _pytest.raises(InputError, match="unknown tools"):
            check_tools([bad])
