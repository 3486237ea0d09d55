"""Tool-call ids that repeat or are empty, on every wire protocol, streamed and not.

Some servers and proxies send ids that repeat within one response (LiteLLM's proxy,
servers numbering calls ``call_0`` per response) or empty ones. Such calls must parse
without error, keep the id exactly as sent, and go back to the vendor exactly so on the
next turn, each result paired with its own call by position, never by id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from django_llmchat.events import ToolCallDone
from django_llmchat.providers.anthropic import AnthropicProvider
from django_llmchat.providers.gemini import GeminiProvider
from django_llmchat.providers.openai_chat import OllamaProvider, OpenAIChatProvider
from django_llmchat.providers.openai_responses import OpenAIResponsesProvider
from django_llmchat.providers.types import (
    ProviderMessage,
    ProviderRequest,
    ToolCallData,
    ToolSpec,
)
from django_llmchat.testing import Reply, ToolCall

from .replay import replay_transport


@dataclass(frozen=True)
class Protocol:
    id: str
    cls: type
    name: str
    """The provider name whose base URL the class is given."""
    format: str


PROTOCOLS = [
    Protocol("responses", OpenAIResponsesProvider, "openai", "responses"),
    Protocol("chat_completions", OpenAIChatProvider, "openai", "chat_completions"),
    Protocol("anthropic", AnthropicProvider, "anthropic", "anthropic"),
    Protocol("gemini", GeminiProvider, "gemini", "gemini"),
]

TOOLS = [
    ToolSpec("weather", "Weather in a city"),
    ToolSpec("clock", "Time in a zone"),
    ToolSpec("search", "Search the web"),
]

# Two calls sharing one id, then one with an empty id.
SCRIPTED = [
    ToolCall("weather", {"city": "Paris"}, call_id="call_0"),
    ToolCall("clock", {"zone": "UTC"}, call_id="call_0"),
    ToolCall("search", {"query": "tides"}, call_id=""),
]
EXPECTED = [(c.call_id, c.name, c.arguments) for c in SCRIPTED]
RESULTS = ['{"temp": 15}', "12:00", "High tide at 6."]
USER = ProviderMessage("user", "Weather, time and tides, please.")


@pytest.fixture(params=PROTOCOLS, ids=[p.id for p in PROTOCOLS])
def protocol(request):
    return request.param


@pytest.fixture
def provider(protocol, fake_llm):
    return protocol.cls(
        api_key="test-key", base_url=fake_llm.base_url(protocol.name), max_retries=0
    )


def ask(provider, messages, stream: bool):
    request = ProviderRequest("fake-model", list(messages), tools=TOOLS)
    if not stream:
        return provider.complete(request), []
    handle = provider.stream(request)
    events = list(handle)
    return handle.response, events


def history(provider, calls: list[ToolCallData]) -> list[ProviderMessage]:
    """The conversation after the calls: the assistant message, then a result for each
    call in the same order."""
    messages = [
        USER,
        ProviderMessage("assistant", "", tool_calls=list(calls), provider=provider.name),
    ]
    for call, result in zip(calls, RESULTS, strict=True):
        messages.append(
            ProviderMessage("tool", result, tool_call_id=call.call_id, tool_name=call.name)
        )
    return messages


def replayed(fmt: str, body: dict[str, Any]) -> tuple[list[tuple], list[tuple]]:
    """``(calls, results)`` as a follow-up request body carries them, in order:
    ``(id, name, arguments)`` per call and ``(id, result)`` per result (``None``: no id
    field at all)."""
    if fmt == "chat_completions":
        messages = body["messages"]
        [assistant] = [m for m in messages if m["role"] == "assistant"]
        calls = [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in assistant["tool_calls"]
        ]
        results = [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]
        return calls, results
    if fmt == "responses":
        items = body["input"]
        calls = [
            (i["call_id"], i["name"], json.loads(i["arguments"]))
            for i in items
            if i.get("type") == "function_call"
        ]
        results = [
            (i["call_id"], i["output"]) for i in items if i.get("type") == "function_call_output"
        ]
        return calls, results
    if fmt == "anthropic":
        blocks = [b for m in body["messages"] for b in m["content"]]
        calls = [(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
        results = [
            (b["tool_use_id"], "".join(p["text"] for p in b.get("content") or []))
            for b in blocks
            if b["type"] == "tool_result"
        ]
        return calls, results
    assert fmt == "gemini"
    parts = [p for c in body["contents"] for p in c["parts"]]
    calls = [
        (p["functionCall"].get("id"), p["functionCall"]["name"], p["functionCall"]["args"])
        for p in parts
        if "functionCall" in p
    ]
    results = [
        (p["functionResponse"].get("id"), p["functionResponse"]["name"], p["functionResponse"])
        for p in parts
        if "functionResponse" in p
    ]
    return calls, results


STREAM = [pytest.param(False, id="whole"), pytest.param(True, id="stream")]


@pytest.mark.parametrize("stream", STREAM)
def test_repeated_and_empty_ids_parse_exactly(fake_llm, protocol, provider, stream):
    fake_llm.script(Reply(tool_calls=SCRIPTED, chunk_size=4))
    response, events = ask(provider, [USER], stream)
    assert [(c.call_id, c.name, c.arguments) for c in response.tool_calls] == EXPECTED
    assert response.finish_reason == "tool_calls"
    if stream:
        done = [e for e in events if isinstance(e, ToolCallDone)]
        assert [(e.call_id, e.name, json.loads(e.arguments)) for e in done] == EXPECTED
    (sent,) = fake_llm.requests
    assert sent.format == protocol.format and sent.stream is stream


@pytest.mark.parametrize("stream", STREAM)
def test_repeated_and_empty_ids_replay_exactly(fake_llm, protocol, provider, stream):
    fake_llm.script(Reply(tool_calls=SCRIPTED, chunk_size=4), Reply("All done."))
    first, _ = ask(provider, [USER], stream)
    second, _ = ask(provider, history(provider, first.tool_calls), stream)
    assert second.content == "All done."

    calls, results = replayed(protocol.format, fake_llm.requests[1].body)
    if protocol.format == "gemini":
        # Gemini pairs results by name and order: an id goes back only when non-empty.
        assert calls == [
            ("call_0", "weather", {"city": "Paris"}),
            ("call_0", "clock", {"zone": "UTC"}),
            (None, "search", {"query": "tides"}),
        ]
        assert [(i, name) for i, name, _ in results] == [
            ("call_0", "weather"),
            ("call_0", "clock"),
            (None, "search"),
        ]
        assert [r["response"] for _, _, r in results] == [
            {"temp": 15},
            {"result": "12:00"},
            {"result": "High tide at 6."},
        ]
        return
    assert calls == EXPECTED
    assert results == [("call_0", RESULTS[0]), ("call_0", RESULTS[1]), ("", RESULTS[2])]
    if protocol.format == "responses":
        # The vendor's own item ids go back too, distinct although the call ids repeat.
        items = [i for i in fake_llm.requests[1].body["input"] if i.get("type") == "function_call"]
        assert [i["id"] for i in items] == [c.item_id for c in first.tool_calls]
        assert len({i["id"] for i in items}) == 3


# -- Chat Completions streams: fragments are joined by index, never by id -------------------


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return json.dumps({"id": "c1", "object": "chat.completion.chunk", "choices": choices})


def _chat_stream(*chunks: str, provider_cls=OllamaProvider):
    body = "".join(f"data: {c}\n\n" for c in chunks) + "data: [DONE]\n\n"
    response = {"status": 200, "headers": {"Content-Type": ["text/event-stream"]}, "body": body}
    request = {"method": "POST", "uri": "<BASE>/chat/completions", "body": ""}
    transport, _ = replay_transport([{"request": request, "response": response}])
    provider = provider_cls(api_key="k", transport=transport, max_retries=0)
    handle = provider.stream(ProviderRequest("m", [ProviderMessage("user", "hi")]))
    events = list(handle)
    return events, handle.response


def test_chat_stream_whole_calls_at_one_index_with_one_id_stay_separate():
    # Servers that number calls per response and send each whole call at index 0.
    def call(call_id, name, args):
        fn = {"name": name, "arguments": json.dumps(args)}
        return {"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": fn}]}

    events, response = _chat_stream(
        _chunk(call("call_0", "weather", {"city": "Paris"})),
        _chunk(call("call_0", "clock", {"zone": "UTC"})),
        _chunk(call("", "search", {"query": "tides"})),
        _chunk({}, "tool_calls"),
    )
    assert [(c.call_id, c.name, c.arguments) for c in response.tool_calls] == EXPECTED
    assert [e.call_id for e in events if isinstance(e, ToolCallDone)] == ["call_0", "call_0", ""]


def test_chat_stream_fragments_sharing_an_id_join_by_index():
    def start(index, call_id, name):
        fn = {"name": name, "arguments": ""}
        return {"tool_calls": [{"index": index, "id": call_id, "type": "function", "function": fn}]}

    def more(index, text):
        return {"tool_calls": [{"index": index, "function": {"arguments": text}}]}

    _, response = _chat_stream(
        _chunk(start(0, "call_0", "weather")),
        _chunk(start(1, "call_0", "clock")),
        _chunk(more(0, '{"city":')),
        _chunk(more(1, '{"zone":"UTC"}')),
        _chunk(more(0, '"Paris"}')),
        _chunk(start(2, "", "search")),
        _chunk(more(2, '{"query":"tides"}')),
        _chunk({}, "tool_calls"),
    )
    assert [(c.call_id, c.name, c.arguments) for c in response.tool_calls] == EXPECTED


def test_chat_ids_kept_exactly_and_made_up_only_when_absent():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "", "type": "function", "function": {"name": "a", "arguments": "{}"}},
            {"id": "x", "type": "function", "function": {"name": "b", "arguments": "{}"}},
            {"id": "x", "type": "function", "function": {"name": "c", "arguments": "{}"}},
            {"type": "function", "function": {"name": "d", "arguments": "{}"}},
        ],
    }
    data = {"choices": [{"message": message, "finish_reason": "tool_calls"}]}
    ids = [
        c.call_id
        for c in OllamaProvider().parse_response(data, ProviderRequest("m", [])).tool_calls
    ]
    assert ids[:3] == ["", "x", "x"]
    assert ids[3].startswith("call_")  # the server sent no id at all


# -- Gemini ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAM)
def test_gemini_signature_stays_with_its_call_when_ids_repeat(fake_llm, stream):
    provider = GeminiProvider(api_key="k", base_url=fake_llm.base_url("gemini"), max_retries=0)
    calls = [
        ToolCall("weather", {"city": "Paris"}, call_id="call_0"),
        ToolCall("clock", {"zone": "UTC"}, call_id="call_0", thought_signature="sig-2"),
        ToolCall("search", {"query": "tides"}, call_id=""),
    ]
    fake_llm.script(Reply(tool_calls=calls))
    response, _ = ask(provider, [ProviderMessage("user", "hi")], stream)
    assert [c.thought_signature for c in response.tool_calls] == [None, "sig-2", None]
    assert [c.item_id for c in response.tool_calls] == ["call_0", "call_0", None]


@pytest.mark.parametrize("stream", STREAM)
def test_gemini_absent_ids_are_made_up_and_never_sent(fake_llm, stream):
    provider = GeminiProvider(api_key="k", base_url=fake_llm.base_url("gemini"), max_retries=0)
    calls = [ToolCall("weather", {"city": "Paris"}), ToolCall("weather", {"city": "Rome"})]
    fake_llm.script(Reply(tool_calls=calls), Reply("ok"))
    first, _ = ask(provider, [ProviderMessage("user", "hi")], stream)
    ids = [c.call_id for c in first.tool_calls]
    assert all(i.startswith("call_") for i in ids) and len(set(ids)) == 2
    assert [c.item_id for c in first.tool_calls] == [None, None]
    messages = [
        ProviderMessage("user", "hi"),
        ProviderMessage("assistant", "", tool_calls=first.tool_calls, provider="gemini"),
        ProviderMessage("tool", "sunny", tool_call_id=ids[0], tool_name="weather"),
        ProviderMessage("tool", "rainy", tool_call_id=ids[1], tool_name="weather"),
    ]
    ask(provider, messages, stream)
    calls, results = replayed("gemini", fake_llm.requests[1].body)
    assert [c[0] for c in calls] == [None, None]
    assert [(r[0], r[2]["response"]) for r in results] == [
        (None, {"result": "sunny"}),
        (None, {"result": "rainy"}),
    ]


def test_gemini_results_pair_with_calls_by_position():
    calls = [
        ToolCallData("dup", "weather", {"city": "Paris"}, item_id="dup"),
        ToolCallData("dup", "clock", {}, item_id="dup"),
        ToolCallData("", "search", {}),
    ]
    messages = [
        ProviderMessage("user", "hi"),
        ProviderMessage("assistant", "", tool_calls=calls, provider="gemini"),
        # No tool names: each result takes the name of the call at its position.
        ProviderMessage("tool", "a", tool_call_id="dup"),
        ProviderMessage("tool", "b", tool_call_id="dup"),
        ProviderMessage("tool", "c", tool_call_id=""),
    ]
    body = GeminiProvider().build_payload(ProviderRequest("gemini-test", messages), stream=False)
    assert [p["functionResponse"] for p in body["contents"][2]["parts"]] == [
        {"name": "weather", "response": {"result": "a"}, "id": "dup"},
        {"name": "clock", "response": {"result": "b"}, "id": "dup"},
        {"name": "search", "response": {"result": "c"}},
    ]


def test_gemini_results_in_another_order_still_find_their_calls():
    calls = [
        ToolCallData("a1", "weather", {}, item_id="a1"),
        ToolCallData("b2", "clock", {}, item_id="b2"),
    ]
    messages = [
        ProviderMessage("user", "hi"),
        ProviderMessage("assistant", "", tool_calls=calls, provider="gemini"),
        ProviderMessage("tool", "t", tool_call_id="b2"),
        ProviderMessage("tool", "w", tool_call_id="a1"),
    ]
    body = GeminiProvider().build_payload(ProviderRequest("gemini-test", messages), stream=False)
    assert [
        (p["functionResponse"]["name"], p["functionResponse"]["id"])
        for p in body["contents"][2]["parts"]
    ] == [("clock", "b2"), ("weather", "a1")]


# -- the fake server ----------------------------------------------------------------------


@pytest.mark.parametrize("stream", STREAM)
def test_fake_server_sends_empty_and_repeated_ids(fake_llm, protocol, provider, stream):
    """The renderers put the scripted ids on the wire as given; ``None`` makes one up."""
    fake_llm.script(Reply(tool_calls=[*SCRIPTED, ToolCall("weather", {"city": "Rome"})]))
    response, _ = ask(provider, [ProviderMessage("user", "hi")], stream)
    ids = [c.call_id for c in response.tool_calls]
    assert ids[:3] == ["call_0", "call_0", ""]
    assert ids[3] and ids[3] not in ("call_0", "")
