"""Model fallback (``LLMCHAT["FALLBACKS"]``): a call whose model keeps failing with a
retryable error moves on to the models the setting names, over real loopback HTTP to the
fake provider server, on every path (Python, REST, inline SSE, ui/chat, the task)."""

from __future__ import annotations

import json
import logging
from decimal import Decimal

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from django_llmchat import signals
from django_llmchat.errors import AuthenticationError, ProviderError
from django_llmchat.events import StepFinished
from django_llmchat.loop.fallbacks import Target, fallbacks_for, falls_back, parse, setting_errors
from django_llmchat.models import Chat, Message, Run, Usage
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing import ToolCall as ScriptedCall
from django_llmchat.tools import tool

from ..api.conftest import sse_frames, url

pytestmark = pytest.mark.django_db

FALLBACKS = {"gpt-4.1": ["gpt-4.1-mini", "anthropic/claude-sonnet-4-5"]}


@pytest.fixture
def configure(fake_llm):
    def configure(**llmchat):
        llmchat.setdefault("FALLBACKS", FALLBACKS)
        llmchat.setdefault("MAX_RETRIES", 0)
        return fake_llm.configure("openai", "gpt-4.1", **llmchat)

    return configure


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("fallback-user", password="pw")


@pytest.fixture
def chat(user):
    return Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1")


def ledger(chat):
    return list(
        Usage.objects.filter(chat=chat)
        .order_by("id")
        .values_list("status", "provider", "model_id", "message_id")
    )


def models_asked(fake_llm):
    return [(r.format, r.model) for r in fake_llm.requests]


# -- the setting -----------------------------------------------------------------------------
def test_entries_name_a_model_of_the_same_provider_or_provider_slash_model(settings):
    settings.LLMCHAT = {
        "FALLBACKS": {
            "gpt-4.1": ["gpt-4.1-mini", "gpt-4.1", "anthropic/claude-sonnet-4-5", "gpt-4.1-mini"],
            "openrouter/openai/gpt-4.1": ["openrouter/anthropic/claude-sonnet-4.5"],
            "llama3.1:8b": ["qwen3:8b"],
        }
    }
    assert fallbacks_for("openai", "gpt-4.1") == [
        Target("openai", "gpt-4.1-mini"),  # the model itself and repeats left out
        Target("anthropic", "claude-sonnet-4-5"),
    ]
    # a bare key matches the model on any provider; "provider/model" only that provider
    assert fallbacks_for("azure_like", "gpt-4.1") == [
        Target("azure_like", "gpt-4.1-mini"),
        Target("anthropic", "claude-sonnet-4-5"),
    ]
    assert fallbacks_for("openrouter", "openai/gpt-4.1") == [
        Target("openrouter", "anthropic/claude-sonnet-4.5")
    ]
    assert fallbacks_for("ollama", "llama3.1:8b") == [Target("ollama", "qwen3:8b")]
    assert fallbacks_for("openai", "gpt-4.1-mini") == []
    # "openai/..." is a provider's name; an unknown head is part of the model id
    assert parse("openai/gpt-4o", "openrouter") == Target("openai", "gpt-4o")
    assert parse("meta-llama/llama-3", "openrouter") == Target("openrouter", "meta-llama/llama-3")
    assert str(Target("anthropic", "claude-sonnet-4-5")) == "anthropic/claude-sonnet-4-5"


def test_only_retryable_provider_errors_fall_back():
    assert falls_back(ProviderError("busy", status=503))
    assert falls_back(ProviderError("slow down", status=429))
    assert falls_back(ProviderError("overloaded", retryable=True))
    assert not falls_back(ProviderError("bad request", status=400))
    assert not falls_back(AuthenticationError("no", status=401))
    assert not falls_back(ValueError("ours"))


@pytest.mark.parametrize(
    ("value", "check_id", "words"),
    [
        (["gpt-4.1-mini"], "llmchat.E074", "must be a dict"),
        ({"gpt-4.1": "gpt-4.1-mini"}, "llmchat.E074", "must be a list of model ids"),
        ({"gpt-4.1": [None]}, "llmchat.E074", "not a model id"),
        ({"gpt-4.1": [""]}, "llmchat.E074", "not a model id"),
        ({3: ["gpt-4.1-mini"]}, "llmchat.E074", "key that is not a model id"),
        ({"gpt-4.1": ["gpt-4.1"]}, "llmchat.E074", "falls back to itself"),
        ({"openai/gpt-4.1": ["gpt-4.1"]}, "llmchat.E074", "falls back to itself"),
        ({"gpt-4.1": ["anthropic/claude-nonexistent-9"]}, "llmchat.E075", "claude-nonexistent"),
        ({"openai/gpt-nonexistent-9": ["gpt-4.1"]}, "llmchat.E075", "gpt-nonexistent-9"),
    ],
)
def test_a_malformed_setting_is_a_system_check_error(value, check_id, words):
    with override_settings(LLMCHAT={"FALLBACKS": value}):
        errors = [e for e in run_checks(databases=[]) if e.id in ("llmchat.E074", "llmchat.E075")]
    assert [e.id for e in errors] == [check_id], errors
    assert "LLMCHAT['FALLBACKS']" in errors[0].msg and words in errors[0].msg
    assert "LLMCHAT['FALLBACKS']" in errors[0].hint


def test_a_well_formed_setting_passes_the_checks():
    assert setting_errors(None) == [] and setting_errors({}) == []
    assert setting_errors(FALLBACKS) == []
    # models the registry cannot tell about (local, OpenAI-compatible servers) pass
    assert setting_errors({"ollama/llama3.1:8b": ["qwen3:8b"], "my-model": ["other"]}) == []


# -- Python ----------------------------------------------------------------------------------
def test_a_503_after_its_retries_falls_back_and_every_attempt_is_billed(configure, chat, fake_llm):
    configure(MAX_RETRIES=1)
    fake_llm.script(Fault(status=503), Fault(status=503), Reply("From the mini model."))
    reply = chat.ask("Hello?")
    assert reply.content == "From the mini model."
    # the retries first, then the fallback; the reply records the model that answered
    assert [r.model for r in fake_llm.requests] == ["gpt-4.1", "gpt-4.1", "gpt-4.1-mini"]
    assert (reply.provider, reply.model_id) == ("openai", "gpt-4.1-mini")
    assert ledger(chat) == [
        ("failed", "openai", "gpt-4.1", reply.pk),
        ("failed", "openai", "gpt-4.1", reply.pk),
        ("succeeded", "openai", "gpt-4.1-mini", reply.pk),
    ]
    priced = Usage.objects.get(chat=chat, status="succeeded")
    assert priced.total_cost is not None and priced.total_cost > 0
    run = chat.last_run
    run.refresh_from_db()
    assert run.status == Run.SUCCEEDED
    chat.refresh_from_db()
    assert (chat.provider, chat.model_id, chat.status) == ("openai", "gpt-4.1", "idle")
    # the next prompt asks the chat's own model first again
    fake_llm.script(Reply("Back on the big one."))
    assert chat.ask("Again?").model_id == "gpt-4.1"
    assert fake_llm.requests[-1].model == "gpt-4.1"


def test_a_streamed_429_falls_back_to_another_provider_and_says_which_answered(
    configure, chat, fake_llm
):
    configure()
    fake_llm.script(
        Fault(status=429),  # gpt-4.1
        Fault(status=529),  # gpt-4.1-mini: overloaded
        Reply("Claude here.", usage={"input_tokens": 7, "output_tokens": 3}),
    )
    events = list(chat.stream("Anyone there?"))
    assert models_asked(fake_llm) == [
        ("responses", "gpt-4.1"),
        ("responses", "gpt-4.1-mini"),
        ("anthropic", "claude-sonnet-4-5"),
    ]
    # the whole history went to the fallback, in its own wire format
    assert fake_llm.requests[-1].last_user_text == "Anyone there?"
    text = "".join(e.content for e in events if e.type == "text_delta")
    assert text == "Claude here."
    [step] = [e for e in events if isinstance(e, StepFinished)]
    assert (step.provider, step.model_id) == ("anthropic", "claude-sonnet-4-5")
    assert step.to_dict()["model_id"] == "claude-sonnet-4-5"
    reply = chat.messages.get(role="assistant")
    assert (reply.provider, reply.model_id) == ("anthropic", "claude-sonnet-4-5")
    assert ledger(chat) == [
        ("failed", "openai", "gpt-4.1", reply.pk),
        ("failed", "openai", "gpt-4.1-mini", reply.pk),
        ("succeeded", "anthropic", "claude-sonnet-4-5", reply.pk),
    ]
    assert [e.type for e in events][-1] == "run_finished"
    assert events[-1].status == "succeeded"


def test_an_overloaded_event_before_any_text_falls_back(fake_llm, user):
    fake_llm.configure(
        "anthropic",
        "claude-sonnet-4-5",
        MAX_RETRIES=0,
        FALLBACKS={"claude-sonnet-4-5": ["claude-3-5-haiku-latest"]},
    )
    chat = Chat.objects.create(user=user, provider="anthropic", model_id="claude-sonnet-4-5")
    fake_llm.script(
        Fault(error_event=0, error_type="overloaded_error", error_message="Overloaded"),
        Reply("Haiku answers."),
    )
    events = list(chat.stream("Hi"))
    assert "".join(e.content for e in events if e.type == "text_delta") == "Haiku answers."
    reply = chat.messages.get(role="assistant")
    assert reply.model_id == "claude-3-5-haiku-latest"
    assert [row[:3] for row in ledger(chat)] == [
        ("failed", "anthropic", "claude-sonnet-4-5"),
        ("succeeded", "anthropic", "claude-3-5-haiku-latest"),
    ]


def test_an_error_after_text_was_shown_does_not_fall_back(configure, chat, fake_llm):
    configure()
    fake_llm.script(
        Fault(error_event=8, reply=Reply("Half a sentence and then", chunk_size=2)),
        Reply("A second voice."),
    )
    seen = []
    with pytest.raises(ProviderError):
        for event in chat.stream("Go"):
            seen.append(event)
    assert any(e.type == "text_delta" for e in seen)  # model A's text was shown
    assert len(fake_llm.requests) == 1  # so no other model speaks after it
    assert [row[:3] for row in ledger(chat)] == [("failed", "openai", "gpt-4.1")]


@pytest.mark.parametrize("status", [400, 401, 404])
def test_a_non_retryable_error_does_not_fall_back(configure, chat, fake_llm, status):
    configure()
    fake_llm.script(Fault(status=status))
    with pytest.raises(ProviderError) as caught:
        chat.ask("Hello?")
    assert caught.value.status == status
    assert len(fake_llm.requests) == 1
    assert ledger(chat) == [("failed", "openai", "gpt-4.1", None)]
    assert [m.role for m in chat.transcript()] == ["user"]
    assert chat.last_run.status == Run.FAILED


def test_a_model_allowed_models_leaves_out_is_skipped_with_a_logged_reason(
    configure, chat, fake_llm, caplog
):
    configure(
        ALLOWED_MODELS=["openai/gpt-4.1", "anthropic/*"],
        FALLBACKS={"gpt-4.1": ["gpt-4.1-mini", "anthropic/claude-3-5-haiku-latest"]},
    )
    fake_llm.script(Fault(status=503), Reply("Haiku."))
    with caplog.at_level(logging.WARNING, logger="django_llmchat.loop.runner"):
        reply = chat.ask("Hi")
    assert reply.model_id == "claude-3-5-haiku-latest"
    assert [r.model for r in fake_llm.requests] == ["gpt-4.1", "claude-3-5-haiku-latest"]
    assert "fallback openai/gpt-4.1-mini skipped: not in LLMCHAT['ALLOWED_MODELS']" in caplog.text
    assert "test-key" not in caplog.text


def test_with_no_fallback_left_the_run_fails_with_the_original_error(
    configure, chat, fake_llm, caplog
):
    configure(
        ALLOWED_MODELS=["openai/gpt-4.1"],
        PROVIDERS={**fake_llm.settings(), "unconfigured": {"class": "no.such.Provider"}},
        FALLBACKS={"gpt-4.1": ["gpt-4.1-mini", "unconfigured/model-x"]},
    )
    fake_llm.script(Fault(status=503))
    with caplog.at_level(logging.WARNING, logger="django_llmchat.loop.runner"):
        with pytest.raises(ProviderError) as caught:
            chat.ask("Hi")
    assert caught.value.status == 503
    assert len(fake_llm.requests) == 1
    assert "fallback openai/gpt-4.1-mini skipped" in caplog.text
    assert "fallback unconfigured/model-x skipped" in caplog.text
    assert ledger(chat) == [("failed", "openai", "gpt-4.1", None)]
    run = Run.objects.get(pk=chat.last_run.pk)
    assert (run.status, run.error_type) == (Run.FAILED, "provider_error")
    assert [m.role for m in chat.transcript()] == ["user"]  # the prompt stays
    assert Chat.objects.get(pk=chat.pk).status == "idle"


def test_every_fallback_failing_ends_on_the_last_attempts_error(configure, chat, fake_llm):
    configure()
    fake_llm.script(Fault(status=503), Fault(status=502), Fault(status=500))
    with pytest.raises(ProviderError) as caught:
        chat.ask("Hi")
    assert caught.value.status == 500
    assert [row[:3] for row in ledger(chat)] == [
        ("failed", "openai", "gpt-4.1"),
        ("failed", "openai", "gpt-4.1-mini"),
        ("failed", "anthropic", "claude-sonnet-4-5"),
    ]
    assert [m.role for m in chat.transcript()] == ["user"]


_limits = {"tight": False}


def tightening_limits(user):
    """A user's limits, lowered to nothing once the first attempt was made (as an admin
    lowering a limit while a run is under way, or other chats spending the rest)."""
    return {"usd_per_day": "0" if _limits["tight"] else "100"}


def test_a_budget_refusing_the_fallback_fails_the_run_with_the_original_error(
    configure, chat, fake_llm, caplog
):
    _limits["tight"] = False

    def busy(request):
        _limits["tight"] = True
        return Fault(status=503)

    configure(LIMITS={"default": {}}, LIMITS_FOR="tests.loop.test_fallbacks.tightening_limits")
    fake_llm.script(busy)
    seen = []
    signals.budget_exceeded.connect(lambda sender, **kw: seen.append(kw["limit"]), weak=False)
    try:
        with caplog.at_level(logging.WARNING, logger="django_llmchat.loop.runner"):
            with pytest.raises(ProviderError) as caught:
                chat.ask("Hi")
    finally:
        signals.budget_exceeded.receivers.clear()
        _limits["tight"] = False
    assert caught.value.status == 503
    assert len(fake_llm.requests) == 1  # the fallback was never called
    assert seen == ["usd_per_day"]  # the limits' own check refused it
    assert "no fallback after" in caplog.text
    assert ledger(chat) == [("failed", "openai", "gpt-4.1", None)]
    assert Run.objects.get(pk=chat.last_run.pk).status == Run.FAILED


@tool
def fallback_lookup(city: str) -> str:
    """Looks a city up"""
    return f"{city}: sunny"


def test_each_step_tries_the_chats_model_first(configure, chat, fake_llm):
    configure()
    chat.with_tools(fallback_lookup)
    fake_llm.script(
        Fault(status=503),
        Reply(tool_calls=[ScriptedCall("fallback_lookup", {"city": "Oslo"})]),
        Reply("Sunny in Oslo."),
    )
    reply = chat.ask("Weather in Oslo?")
    assert reply.content == "Sunny in Oslo." and reply.model_id == "gpt-4.1"
    assert [r.model for r in fake_llm.requests] == ["gpt-4.1", "gpt-4.1-mini", "gpt-4.1"]
    called = Message.objects.get(chat=chat, role="assistant", tool_calls__isnull=False)
    assert called.model_id == "gpt-4.1-mini"
    # the second step's request carries the first step's call and its result
    second = json.dumps(fake_llm.requests[2].body)
    assert "fallback_lookup" in second and "Oslo: sunny" in second


# -- REST, inline SSE, ui/chat ----------------------------------------------------------------
@pytest.fixture
def api(user):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def test_rest_a_posted_message_is_answered_by_the_fallback(
    configure, chat, fake_llm, api, django_capture_on_commit_callbacks
):
    configure(TASKS_EAGER_WITHOUT_BROKER="inline")
    fake_llm.script(Fault(status=503), Reply("Mini answers."))
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(url("chat-messages", pk=chat.pk), {"content": "Hi"}, format="json")
    assert response.status_code == 202, response.content
    listed = api.get(url("chat-messages", pk=chat.pk)).json()["results"]
    reply = [m for m in listed if m["role"] == "assistant"]
    assert [(m["content"], m["model_id"]) for m in reply] == [("Mini answers.", "gpt-4.1-mini")]
    usage = api.get(url("chat-usage", pk=chat.pk)).json()
    assert "gpt-4.1-mini" in json.dumps(usage) and "gpt-4.1" in json.dumps(usage)
    assert [row[:3] for row in ledger(chat)] == [
        ("failed", "openai", "gpt-4.1"),
        ("succeeded", "openai", "gpt-4.1-mini"),
    ]


def test_rest_inline_sse_names_the_answering_model_in_step_finished(configure, chat, fake_llm, api):
    configure()
    fake_llm.script(Fault(status=429), Reply("Mini streams."))
    response = api.post(
        url("chat-messages", pk=chat.pk),
        {"content": "Hi"},
        format="json",
        HTTP_ACCEPT="text/event-stream",
    )
    assert response.status_code == 200
    frames = sse_frames(b"".join(response.streaming_content).decode())
    [step] = [f for f in frames if f["event"] == "step_finished"]
    assert (step["data"]["provider"], step["data"]["model_id"]) == ("openai", "gpt-4.1-mini")
    assert frames[-1]["event"] == "run_finished"
    assert frames[-1]["data"]["status"] == "succeeded"
    assert "error" not in [f["event"] for f in frames]


def test_ui_chat_message_metadata_carries_the_answering_model(configure, chat, fake_llm, api):
    configure()
    fake_llm.script(Fault(status=503), Reply("Mini in the UI."))
    body = {
        "id": str(chat.pk),
        "messages": [{"id": "fb-u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}],
        "trigger": "submit-message",
    }
    response = api.post(url("ui-chat"), body, format="json")
    assert response.status_code == 200, response.content
    blocks = [b for b in b"".join(response.streaming_content).decode().split("\n\n") if b]
    got = [json.loads(b[6:]) for b in blocks[:-1]]
    [meta] = [c for c in got if c["type"] == "message-metadata"]
    assert meta["messageMetadata"]["modelId"] == "gpt-4.1-mini"
    assert meta["messageMetadata"]["provider"] == "openai"
    assert "".join(c["delta"] for c in got if c["type"] == "text-delta") == "Mini in the UI."
    # a reload shows the same model
    stored = api.get(url("ui-chat-messages", id=chat.pk)).json()
    assert stored[-1]["metadata"]["modelId"] == "gpt-4.1-mini"


# -- the Celery task ----------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_the_task_falls_back_before_it_retries_the_run(configure, fake_llm, user):
    configure(TASKS_EAGER_WITHOUT_BROKER="inline", TASK_RETRY_MAX_WAIT=0.0)
    chat = Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1")
    fake_llm.script(
        Fault(status=503),  # gpt-4.1
        Fault(status=503),  # gpt-4.1-mini
        Fault(status=503),  # claude: every model busy, the task retries the run
        Fault(status=503),  # the retried run: gpt-4.1 again
        Reply("Mini, second time."),
    )
    chat.ask_later("Busy day?")
    run = Run.objects.get(pk=chat.last_run.pk)
    assert (run.status, run.attempt) == (Run.SUCCEEDED, 2)
    reply = Message.objects.get(chat=chat, role="assistant")
    assert (reply.content, reply.model_id) == ("Mini, second time.", "gpt-4.1-mini")
    assert [r.model for r in fake_llm.requests] == [
        "gpt-4.1",
        "gpt-4.1-mini",
        "claude-sonnet-4-5",
        "gpt-4.1",
        "gpt-4.1-mini",
    ]
    rows = ledger(chat)
    assert [row[:3] for row in rows] == [
        ("failed", "openai", "gpt-4.1"),
        ("failed", "openai", "gpt-4.1-mini"),
        ("failed", "anthropic", "claude-sonnet-4-5"),
        ("failed", "openai", "gpt-4.1"),
        ("succeeded", "openai", "gpt-4.1-mini"),
    ]
    assert [row[3] for row in rows][-2:] == [reply.pk, reply.pk]
    assert all(r.run_id == run.pk for r in Usage.objects.filter(chat=chat))
    assert Usage.objects.filter(chat=chat, total_cost__gt=Decimal(0)).count() == 1
    assert Chat.objects.get(pk=chat.pk).status == "idle"


# -- the admin ------------------------------------------------------------------------------
def test_admin_shows_each_attempt_of_a_fallen_back_reply_with_its_model(
    configure, chat, fake_llm, client, django_user_model
):
    from django.urls import reverse

    configure(MAX_RETRIES=1)
    fake_llm.script(
        Fault(status=503),  # gpt-4.1
        Fault(status=503),  # gpt-4.1, its retry
        Fault(status=429),  # gpt-4.1-mini
        Fault(status=429),  # gpt-4.1-mini, its retry
        Reply("Claude."),  # anthropic/claude-sonnet-4-5
    )
    reply = chat.ask("Anyone?")
    assert (reply.provider, reply.model_id) == ("anthropic", "claude-sonnet-4-5")
    rows = list(Usage.objects.filter(chat=chat).order_by("id"))
    admin = django_user_model.objects.create_superuser("fallback-admin", password="pw")
    client.force_login(admin)

    # the chat's page: the reply under the model that answered, then each attempt linked
    page = client.get(reverse("admin:django_llmchat_chat_change", args=[chat.pk]))
    html = page.content.decode()
    article = html[html.index(f'id="message-{reply.pk}"') :].split("</article>")[0]
    assert '<span class="llmchat-meta">claude-sonnet-4-5</span>' in article
    shown = [
        f'<a href="{reverse("admin:django_llmchat_usage_change", args=[row.pk])}">'
        f"{row.provider}/{row.model_id}</a> {row.status}"
        for row in rows
    ]
    assert "5 attempts:" in article
    assert [article.index(s) for s in shown] == sorted(article.index(s) for s in shown)
    assert [s.split(">", 1)[1] for s in shown] == [
        "openai/gpt-4.1</a> failed",
        "openai/gpt-4.1</a> failed",
        "openai/gpt-4.1-mini</a> failed",
        "openai/gpt-4.1-mini</a> failed",
        "anthropic/claude-sonnet-4-5</a> succeeded",
    ]
    prompt = chat.messages.get(role="user")
    assert "attempts:" not in html[html.index(f'id="message-{prompt.pk}"') :].split("</article>")[0]

    # the usage list, the reply's rows: each attempt its own row, model and status
    listing = client.get(reverse("admin:django_llmchat_usage_changelist"), {"message": reply.pk})
    assert listing.status_code == 200
    listed = listing.context["cl"].result_list
    assert [(u.status, u.provider, u.model_id) for u in listed.order_by("id")] == [
        ("failed", "openai", "gpt-4.1"),
        ("failed", "openai", "gpt-4.1"),
        ("failed", "openai", "gpt-4.1-mini"),
        ("failed", "openai", "gpt-4.1-mini"),
        ("succeeded", "anthropic", "claude-sonnet-4-5"),
    ]
    text = listing.content.decode()
    assert "claude-sonnet-4-5" in text and "gpt-4.1-mini" in text
    by_chat = client.get(reverse("admin:django_llmchat_usage_changelist"), {"chat": chat.pk})
    assert by_chat.context["cl"].result_count == len(rows) == 5
    row = client.get(reverse("admin:django_llmchat_usage_change", args=[rows[2].pk]))
    assert "gpt-4.1-mini" in row.content.decode() and "failed" in row.content.decode()

    # staff who may view chats but not usage rows see the attempts, unlinked
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("fallback-viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_chat"))
    client.force_login(viewer)
    html = client.get(reverse("admin:django_llmchat_chat_change", args=[chat.pk])).content
    html = html.decode()
    assert "5 attempts: openai/gpt-4.1 failed · openai/gpt-4.1 failed" in html
    assert reverse("admin:django_llmchat_usage_change", args=[rows[0].pk]) not in html
