"""The token estimate counts the wire's framing of tool calls (ids, types, names, JSON
punctuation, arguments escaped into a string), so the first request of an imported
tool-heavy chat, with no vendor report to calibrate on, fits its window by a count of the
whole body (four bytes a token, as ``django_llmchat.testing.demo`` counts) on every wire
protocol."""

from __future__ import annotations

import json

import pytest

from django_llmchat.loop.history import History
from django_llmchat.models import Chat, LLMModel, Message, ToolCall
from django_llmchat.providers import get_provider
from django_llmchat.providers.types import (
    ProviderMessage,
    ProviderRequest,
    ToolCallData,
    ToolSpec,
)
from django_llmchat.runs.estimates import _request_overhead
from django_llmchat.testing import Fault, Reply
from django_llmchat.tools import tool

WINDOW, OUTPUT = 2000, 200
LIMIT = WINDOW - OUTPUT
PROTOCOLS = [
    pytest.param("openai", "gpt-4.1-mini", {}, id="responses"),
    pytest.param("openai", "gpt-4.1-mini", {"api": "chat_completions"}, id="chat-completions"),
    pytest.param("anthropic", "claude-haiku-4-5", {}, id="anthropic"),
    pytest.param("gemini", "gemini-2.5-flash", {}, id="gemini"),
]
# shapes and sizes of the recorded multi-turn tool conversations (tests/fixtures/wire)
CITIES = [
    ("Berlin", "52.5200", "13.4050"),
    ("Paris", "48.8575", "2.3514"),
    ("Rome", "41.9028", "12.4964"),
    ("Madrid", "40.4168", "-3.7038"),
]
WEATHER = ToolSpec(
    name="weather",
    description="Gets current weather for a location",
    parameters={
        "type": "object",
        "properties": {
            "latitude": {"type": "string", "description": "Latitude (e.g., 52.5200)"},
            "longitude": {"type": "string", "description": "Longitude (e.g., 13.4050)"},
        },
        "required": ["latitude", "longitude"],
    },
)


def result_text(city: str, lat: str, lon: str) -> str:
    return json.dumps(
        {
            "location": {"name": city, "latitude": lat, "longitude": lon},
            "current": {"temperature_c": 15, "wind_kmh": 10, "conditions": "partly cloudy"},
            "note": f'Current weather at {lat}, {lon}: 15°C, "Wind": 10 km/h',
        }
    )


def turns(count: int):
    """``count`` turns: a prompt, a reply calling the tool for two cities at once, the two
    results, an answer. Yields ``(role, content, calls, answered call index)``."""
    for turn in range(count):
        pair = [CITIES[turn % 4], CITIES[(turn + 1) % 4]]
        yield "user", f"What's the weather in {pair[0][0]} and {pair[1][0]}? ({turn})", [], None
        calls = [
            (f"toolu_01MKSN7NHsBVKr7Jvw{turn:04d}{i}q", {"latitude": lat, "longitude": lon})
            for i, (_city, lat, lon) in enumerate(pair)
        ]
        yield "assistant", "", calls, None
        for i, (city, lat, lon) in enumerate(pair):
            yield "tool", result_text(city, lat, lon), [], i
        yield "assistant", f"In {pair[0][0]}: 15°C.\n- **Wind:** 10 km/h\n\nMild.", [], None


def provider_messages(count: int) -> list[ProviderMessage]:
    out, calls = [], []
    for role, content, new_calls, answered in turns(count):
        if role == "tool":
            call_id = calls[answered]
            out.append(ProviderMessage("tool", content, tool_call_id=call_id, tool_name="weather"))
            continue
        calls = [c for c, _args in new_calls] or calls
        out.append(
            ProviderMessage(
                role,
                content,
                tool_calls=[ToolCallData(c, "weather", args) for c, args in new_calls],
                provider="anthropic",
            )
        )
    return out


@tool
def weather_import(latitude: str, longitude: str) -> str:
    """Gets current weather for a location"""
    return result_text("here", latitude, longitude)


class _Chat:
    pk = None
    provider, model_id = "openai", "gpt-4.1-mini"
    history = None


@pytest.mark.parametrize(("provider", "model", "options"), PROTOCOLS)
def test_the_estimate_covers_every_dialects_body(provider, model, options, settings):
    settings.LLMCHAT = {"PROVIDERS": {provider: {"api_key": "k", **options}}}
    request = ProviderRequest(model_id=model, messages=provider_messages(12), tools=[WEATHER])
    body = get_provider(provider).request_body(request, stream=False)
    counted = len(body) // 4  # the server's own count
    # at least every dialect's body; the leanest (Gemini: results without ids) by less
    # than two fifths
    history = History(_Chat(), None, request.messages, None)
    estimated = history.raw_count(request.messages) + _request_overhead(request)
    assert counted <= estimated <= counted * 1.4, (counted, estimated)


def imported_chat(provider: str, model: str, count: int) -> Chat:
    """A chat stored in bulk as an import would: no usage rows, so nothing the vendor
    reported to calibrate the estimate on."""
    chat = Chat.objects.create(provider=provider, model_id=model, tools=["weather_import"])
    calls: list[ToolCall] = []
    for role, content, new_calls, answered in turns(count):
        message = Message.objects.create(
            chat=chat,
            role=role,
            content=content,
            parent_tool_call=calls[answered] if role == "tool" else None,
            provider=provider if role == "assistant" else "",
        )
        if new_calls:
            calls = [
                ToolCall.objects.create(
                    chat=chat, message=message, call_id=c, name="weather", arguments=args
                )
                for c, args in new_calls
            ]
    return chat


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("provider", "model", "options"), PROTOCOLS)
def test_an_imported_tool_heavy_chat_fits_its_window_on_the_first_request(
    provider, model, options, fake_llm
):
    providers = fake_llm.settings()
    providers[provider].update(options)
    fake_llm.configure(provider, model, PROVIDERS=providers)
    LLMModel.objects.create(
        provider=provider,
        model_id=model,
        name=model,
        context_window=WINDOW,
        max_output_tokens=OUTPUT,
    )
    chat = imported_chat(provider, model, 40)

    def vendor(request):
        tokens = len(request.raw_body) // 4
        if tokens > LIMIT:
            return Fault(status=400, body={"error": {"message": "prompt is too long"}})
        return Reply("Noted.", usage={"input_tokens": tokens, "output_tokens": 2})

    fake_llm.server.responder = vendor
    assert chat.ask("And in Lisbon?").content == "Noted."
    (request,) = fake_llm.requests  # fitted at once: no refusal, no second try
    assert len(request.raw_body) // 4 <= LIMIT
    assert "And in Lisbon?" in request.raw_body.decode()
