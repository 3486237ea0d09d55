"""The offline demo model (``django_llmchat.testing.demo``) and how the example project
picks it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings

from django_llmchat.events import ReasoningDelta, TextDelta, TokenUsageDone, ToolCallDone
from django_llmchat.models import Chat
from django_llmchat.providers import get_provider
from django_llmchat.testing import demo
from django_llmchat.testing.demo import DEMO_TOOLS, DemoProvider

ROOT = Path(__file__).resolve().parent.parent
DEMO = {
    "DEFAULT_PROVIDER": "demo",
    "DEFAULT_MODEL": "demo-model",
    "PROVIDERS": {"demo": {"class": "django_llmchat.testing.demo.DemoProvider"}},
}

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def demo_settings():
    with override_settings(LLMCHAT=DEMO):
        yield


def test_streams_a_made_up_answer_with_thinking_and_usage(demo_settings):
    chat = Chat.objects.create()
    events = list(chat.stream("Tell me about tides, please?"))

    deltas = [e.content for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 10  # chunked, so it visibly streams
    text = "".join(deltas)
    assert "offline demo model" in text
    assert "Tell me about tides, please?" in text
    assert any(isinstance(e, ReasoningDelta) for e in events)
    usage = [e.token_usage for e in events if isinstance(e, TokenUsageDone)][0]
    assert usage.input_tokens > 0 and usage.output_tokens > 0 and usage.thinking_tokens > 0
    reply = chat.transcript().last()
    assert (reply.role, reply.model_id, reply.content) == ("assistant", "demo-model", text)
    assert reply.thinking.text.startswith("The user wrote 5 words")


def test_calls_the_demo_tools_when_asked(demo_settings):
    chat = Chat.objects.create().with_tools(*DEMO_TOOLS)
    events = list(chat.stream("What's the weather in Buenos Aires?"))
    calls = [e for e in events if isinstance(e, ToolCallDone)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("demo_weather", {"city": "Buenos Aires"})
    ]
    assert "in Buenos Aires right now (made-up demo data)" in chat.transcript().last().content

    reply = chat.ask("What time is it in JST?")
    call = chat.tool_calls.get(name="demo_clock")
    assert call.arguments == {"timezone_name": "JST"}
    assert "in JST on" in reply.content


def test_booking_waits_for_approval(demo_settings):
    chat = Chat.objects.create().with_tools(*DEMO_TOOLS)
    chat.ask("Book a table at Chez Nous for 3")
    call = chat.tool_calls.get()
    assert (call.name, call.arguments) == (
        "demo_book_table",
        {"restaurant": "Chez Nous", "people": 3},
    )
    assert call.get_result() is None
    reply = chat.deny(call.call_id)
    assert reply.content == "You declined that, so I did nothing."


def test_no_tool_offered_means_a_plain_answer(demo_settings):
    chat = Chat.objects.create()
    reply = chat.ask("weather in Rome?")
    assert not chat.tool_calls.exists()
    assert "offline demo model" in reply.content


def test_one_lazily_started_server_per_process(demo_settings):
    demo.stop_demo_server()
    provider = DemoProvider()
    server = demo.demo_server()
    assert provider.base_url == server.base_url("openai")
    assert demo.demo_server() is server
    assert get_provider("demo").base_url == provider.base_url
    # a configured base_url wins (for instance a test's own fake server)
    assert DemoProvider(base_url="http://127.0.0.1:9/v1").base_url == "http://127.0.0.1:9/v1"


def _example_settings(*names: str, **env: str) -> list:
    """The example project's settings ``names``, imported in a fresh process with ``env``
    (and none of the variables it reads besides)."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "LLMCHAT_PROVIDER")
        and k not in ("LLMCHAT_MODEL", "OLLAMA_BASE_URL", "DJANGO_SETTINGS_MODULE")
        and k not in ("DJANGO_DEBUG", "DJANGO_ALLOWED_HOSTS")
    }
    clean["OLLAMA_BASE_URL"] = "http://127.0.0.1:9"  # nothing listens there
    clean.update(env)
    code = (
        "import json, sys; from example_project import settings as s; "
        "print(json.dumps([getattr(s, name) for name in sys.argv[1:]]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *names], cwd=ROOT, env=clean, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _example_llmchat(**env: str) -> list:
    return _example_settings("LLMCHAT", "EXAMPLE_PROVIDERS", "DEMO_MODE", **env)


def test_example_project_debug_is_off_unless_the_environment_turns_it_on():
    debug, hosts = _example_settings("DEBUG", "ALLOWED_HOSTS")
    assert debug is False
    assert hosts == ["127.0.0.1", "localhost", "[::1]"]  # this machine, no "*"
    for value in ("0", "", "true", "yes"):
        assert _example_settings("DEBUG", DJANGO_DEBUG=value) == [False], value
    assert _example_settings("DEBUG", DJANGO_DEBUG="1") == [True]
    hosts = _example_settings(
        "ALLOWED_HOSTS", DJANGO_ALLOWED_HOSTS="chat.example.com, .example.org"
    )
    assert hosts == [["chat.example.com", ".example.org"]]


def test_make_run_serves_in_debug_mode():
    """With DEBUG off ``runserver`` serves no static file: the chat page's styles and
    scripts, the API docs' assets."""
    makefile = (ROOT / "Makefile").read_text()
    run = makefile.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert "DJANGO_DEBUG=$(DJANGO_DEBUG) $(BIN)/python manage.py runserver" in run
    assert "\nDJANGO_DEBUG ?= 1\n" in makefile


def test_example_project_uses_the_demo_without_keys():
    llmchat, offered, demo_mode = _example_llmchat()
    assert (llmchat["DEFAULT_PROVIDER"], llmchat["DEFAULT_MODEL"]) == ("demo", "demo-model")
    assert llmchat["PROVIDERS"]["demo"]["class"] == "django_llmchat.testing.demo.DemoProvider"
    assert offered == {"demo": "demo-model"}
    assert demo_mode is True


def test_example_project_prefers_a_real_key():
    llmchat, offered, demo_mode = _example_llmchat(ANTHROPIC_API_KEY="sk-test")
    assert (llmchat["DEFAULT_PROVIDER"], llmchat["DEFAULT_MODEL"]) == (
        "anthropic",
        "claude-haiku-4-5",
    )
    assert list(offered) == ["anthropic", "demo"]  # the demo stays selectable
    assert demo_mode is False
    llmchat, _, _ = _example_llmchat(LLMCHAT_PROVIDER="openai", LLMCHAT_MODEL="gpt-4.1")
    assert (llmchat["DEFAULT_PROVIDER"], llmchat["DEFAULT_MODEL"]) == ("openai", "gpt-4.1")


def test_a_demo_reply_costs_usd_from_the_bundled_prices(demo_settings, django_user_model):
    """The demo model is priced in the bundled registry data: its usage rows, the message,
    the chat and the REST API all show a USD cost (made-up prices, as its answers are)."""
    from decimal import Decimal

    from rest_framework.test import APIClient

    from django_llmchat.catalog.pricing import model_pricing
    from django_llmchat.catalog.registry import sync_models

    sync_models()
    user = django_user_model.objects.create_user("demo-user")
    chat = Chat.objects.create(user=user)
    reply = chat.ask("How much does this cost?")
    [row] = reply.usages.all()
    table = model_pricing("demo-model", "demo")
    expected = (
        row.input_tokens * Decimal(table["input_mtok"])
        + row.output_tokens * Decimal(table["output_mtok"])
    ) / 1_000_000
    assert row.total_cost == expected and row.total_cost > 0
    assert reply.cost().total == expected
    assert chat.cost().total == expected

    api = APIClient()
    api.force_authenticate(user)
    body = api.get(f"/api/chats/{chat.pk}/messages/").json()
    [assistant] = [m for m in body["results"] if m["role"] == "assistant"]
    assert Decimal(str(assistant["cost"]["total"])) == expected
