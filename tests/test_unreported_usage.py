"""A reply whose vendor reported no usage (an OpenAI-compatible server or an Ollama
configuration that leaves it out, a Chat Completions stream without
``stream_options.include_usage``) is billed like a stopped attempt: its usage row keeps
the request's estimated input tokens and the output tokens weighed from the reply, priced,
marked ``estimated``; never NULL. A vendor's counts, when they come, stay the vendor's.

The statements of such a reply on PostgreSQL are in tests/runs/test_pg.py."""

from __future__ import annotations

import json

import pytest

from django_llmchat import providers
from django_llmchat.events import StepFinished
from django_llmchat.models import Chat, Usage
from django_llmchat.providers.openai_chat import OllamaProvider
from django_llmchat.providers.types import ProviderMessage
from django_llmchat.runs.estimates import estimate_tokens
from django_llmchat.testing import Reply, ToolCall
from django_llmchat.tools import tool
from tests.providers.replay import load_fixture, replay_transport

pytestmark = pytest.mark.django_db(transaction=True)

# one priced model per wire format: Responses, Anthropic, Gemini, Chat Completions (twice)
MODELS = [
    ("openai", "gpt-4.1-mini"),
    ("anthropic", "claude-haiku-4-5"),
    ("gemini", "gemini-2.5-flash"),
    ("deepseek", "deepseek-chat"),
    ("mistral", "mistral-small-latest"),
]
TEXT = "The capital of France is Paris, on the Seine."


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("payer", password="pw")


def weigh(text: str) -> int:
    return estimate_tokens(ProviderMessage(role="assistant", content=text))


def assert_estimated(row: Usage, *, output: int) -> None:
    assert row.status == Usage.SUCCEEDED
    assert row.estimated is True
    assert row.input_tokens is not None and row.input_tokens > 0
    assert row.output_tokens == output and output > 0
    assert row.input_cost > 0 and row.output_cost > 0
    assert row.total_cost is not None and row.total_cost > 0


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
@pytest.mark.parametrize(("provider", "model"), MODELS)
def test_a_reply_without_usage_is_billed_estimated(user, fake_llm, provider, model, stream):
    fake_llm.configure(provider, model)
    chat = Chat.objects.create(user=user, provider=provider, model_id=model)
    fake_llm.script(Reply(TEXT, usage=False))
    if stream:
        events = list(chat.stream("The capital of France?"))
        finished = [e for e in events if isinstance(e, StepFinished)][-1]
        assert finished.estimated is True
        assert finished.token_usage.output_tokens == weigh(TEXT)
    else:
        chat.ask("The capital of France?")
    reply = chat.messages.get(role="assistant")
    assert reply.content == TEXT
    row = Usage.objects.get(chat=chat)
    assert row.message_id == reply.pk
    assert_estimated(row, output=weigh(TEXT))
    run = chat.last_run
    assert run.status == "succeeded" and run.estimated
    assert run.tokens.output_tokens == weigh(TEXT)
    assert reply.is_estimated


def test_a_chat_completions_stream_without_include_usage_is_billed_estimated(user, fake_llm):
    """Ollama's OpenAI-compatible endpoint, streamed: the request asks for usage; the
    server answering without it is billed by the estimate."""
    fake_llm.configure("ollama", "qwen3")
    chat = Chat.objects.create(user=user, provider="ollama", model_id="qwen3")
    fake_llm.script(Reply(TEXT, usage=False))
    list(chat.stream("The capital of France?"))
    assert fake_llm.last_request.body["stream_options"] == {"include_usage": True}
    row = Usage.objects.get(chat=chat)
    assert row.status == Usage.SUCCEEDED and row.estimated is True
    assert row.input_tokens > 0 and row.output_tokens == weigh(TEXT)  # a local model: no price


def _without_usage(name: str) -> tuple[dict, str]:
    """A recorded Ollama exchange with its usage taken out (the answer a server sends
    when it leaves usage out, byte for byte otherwise), and the recorded reply's text."""
    fixture = load_fixture(name)
    response = fixture["interactions"][0]["response"]
    body = response["body"]
    if body.lstrip().startswith("{"):  # one JSON body
        data = json.loads(body)
        assert data.pop("usage")["completion_tokens"] > 0
        response["body"] = json.dumps(data)
        return fixture, data["choices"][0]["message"]["content"]
    frames = [frame for frame in body.split("\n\n") if frame.strip()]
    kept = [frame for frame in frames if '"usage"' not in frame]
    assert len(kept) == len(frames) - 1  # the one usage chunk (include_usage)
    response["body"] = "\n\n".join(kept) + "\n\n"
    text = "".join(
        choice["delta"].get("content") or ""
        for frame in kept
        if frame.startswith("data: {")
        for choice in json.loads(frame[len("data: ") :])["choices"]
    )
    return fixture, text


@pytest.mark.parametrize(
    ("name", "stream"),
    [
        ("chat_basic_chat_functionality_ollama_qwen3_can_have_a_basic_conversation", False),
        ("chat_streaming_responses_ollama_qwen3_supports_streaming_responses", True),
    ],
    ids=["complete", "stream"],
)
def test_a_recorded_ollama_answer_without_usage_is_billed_estimated(
    user, fake_llm, monkeypatch, name, stream
):
    """Ollama's recorded answers replayed through the HTTP transport, their usage
    removed: the reply is the recorded one, its row our estimate."""
    fake_llm.configure("ollama", "qwen3")
    fixture, text = _without_usage(name)
    transport, sent = replay_transport(fixture)
    monkeypatch.setitem(providers._instances, "ollama", OllamaProvider(transport=transport))
    chat = Chat.objects.create(user=user, provider="ollama", model_id="qwen3")
    if stream:
        list(chat.stream("Count to three"))
    else:
        chat.ask("Hello")
    assert len(sent) == 1
    reply = chat.messages.get(role="assistant")
    assert reply.content == text and text
    row = Usage.objects.get(chat=chat)
    assert row.message_id == reply.pk
    assert (row.status, row.estimated) == (Usage.SUCCEEDED, True)
    assert row.input_tokens > 0 and row.output_tokens >= weigh(text) > 0


def test_the_steps_of_a_tool_call_without_usage_are_each_billed(user, fake_llm):
    """The tool-calling step (its arguments weighed) and the reply after it: two rows,
    each estimated, neither NULL."""

    @tool
    def billing_forecast(city: str) -> str:
        """Gets the weather"""
        return f"sunny in {city}"

    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")
    chat.with_tools(billing_forecast)
    fake_llm.script(
        Reply(tool_calls=[ToolCall("billing_forecast", {"city": "Paris"})], usage=False),
        Reply("Sunny.", usage=False),
    )
    chat.ask("Weather in Paris?")
    rows = list(Usage.objects.filter(chat=chat).order_by("id"))
    assert [row.status for row in rows] == [Usage.SUCCEEDED] * 2
    assert all(row.estimated for row in rows)
    assert all(row.input_tokens > 0 and row.output_tokens > 0 for row in rows)
    assert all(row.total_cost > 0 for row in rows)
    assert rows[0].output_tokens > weigh("")  # the call's name and arguments weighed


def test_a_vendors_usage_stays_the_vendors(user, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")
    fake_llm.script(Reply(TEXT, usage={"input_tokens": 7, "output_tokens": 3}))
    chat.ask("The capital of France?")
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated, row.input_tokens, row.output_tokens) == (
        Usage.SUCCEEDED,
        False,
        7,
        3,
    )
    assert not chat.last_run.estimated
