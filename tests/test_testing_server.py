"""The loopback fake provider server, driven with plain httpx.

The recorded exchanges in ``tests/fixtures/wire`` are the reference for each format's
framing, event order and field names.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from django_llmchat.testing import (
    FakeProviderServer,
    Fault,
    RecordedRequest,
    Reply,
    ToolCall,
    echo,
)
from django_llmchat.values import Tokens
from tests.waiting import wait_until

pytest_plugins = ["django_llmchat.testing.pytest_plugin"]

WIRE = Path(__file__).parent / "fixtures" / "wire"

USAGE = {"input_tokens": 10, "cache_read_tokens": 4, "output_tokens": 5, "thinking_tokens": 2}

PATHS = {
    "chat_completions": "/v1/chat/completions",
    "responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/gemini-2.5-flash:generateContent",
}
STREAM_PATHS = {**PATHS, "gemini": "/v1beta/models/gemini-2.5-flash:streamGenerateContent"}


# -- helpers ----------------------------------------------------------------------------


def parse_sse(text: str) -> list[tuple[str | None, str]]:
    """``(event, data)`` pairs of an SSE body (``\\n\\n`` or ``\\r\\n\\r\\n`` separated)."""
    out = []
    text = text.replace("\r\n", "\n")
    for block in text.split("\n\n"):
        event, data = None, []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
        if data:
            out.append((event, "\n".join(data)))
    return out


def recorded(name: str, index: int = 0) -> dict:
    return json.loads((WIRE / name).read_text())["interactions"][index]


def collapse(seq: list) -> list:
    """Consecutive repeats folded into one (delta runs become one entry)."""
    out: list = []
    for item in seq:
        if not out or out[-1] != item:
            out.append(item)
    return out


_http: httpx.Client | None = None


@pytest.fixture(scope="module", autouse=True)
def _shared_client():
    """One pooled client for the module (building an httpx.Client costs ~50 ms)."""
    global _http
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    with httpx.Client(timeout=20, limits=limits) as client:
        _http = client
        yield
    _http = None


def post(
    server: FakeProviderServer,
    fmt: str,
    *,
    stream: bool = False,
    client: httpx.Client | None = None,
    body: dict | None = None,
    query: str = "",
) -> httpx.Response:
    path = (STREAM_PATHS if stream else PATHS)[fmt]
    if fmt == "gemini":
        payload = {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}
        if stream and not query:
            query = "?alt=sse"
    else:
        payload = {"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}]}
        if stream:
            payload["stream"] = True
    payload.update(body or {})
    return (client or _http).post(server.url + path + query, json=payload)


def events(server, fmt, reply, **kw) -> list[tuple[str | None, dict | str]]:
    server.script(reply)
    response = post(server, fmt, stream=True, **kw)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    out = []
    for event, data in parse_sse(response.text):
        out.append((event, data if data == "[DONE]" else json.loads(data)))
    return out


@pytest.fixture
def server(fake_llm):
    return fake_llm.server


# -- routing, recording, defaults -----------------------------------------------------


def test_base_urls(server):
    assert server.url.startswith("http://127.0.0.1:")
    assert server.base_url("openai") == server.url + "/v1"
    assert server.base_url("ollama") == server.url + "/v1"
    assert server.base_url("anthropic") == server.url
    assert server.base_url("gemini") == server.url


@pytest.mark.parametrize(
    "path,fmt",
    [
        ("/v1/chat/completions", "chat_completions"),
        ("/chat/completions", "chat_completions"),
        ("/api/v1/chat/completions", "chat_completions"),
        ("/v1/responses", "responses"),
        ("/v1/messages", "anthropic"),
        ("/v1beta/models/gemini-2.5-flash:generateContent", "gemini"),
    ],
)
def test_routes(server, path, fmt):
    response = httpx.post(server.url + path, json={"model": "x"})
    assert response.status_code == 200
    assert server.last_request.format == fmt


def test_unknown_path_is_404(server):
    response = httpx.post(server.url + "/v2/whatever", json={})
    assert response.status_code == 404
    assert "no route" in response.json()["error"]["message"]


def test_requests_are_recorded(server):
    httpx.post(
        server.base_url("openai") + "/responses",
        json={"model": "gpt-x", "input": "Hello", "stream": False},
        headers={"Authorization": "Bearer test-key"},
    )
    httpx.post(
        server.url + "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        json={"contents": [{"role": "user", "parts": [{"text": "Bonjour"}]}]},
        headers={"x-goog-api-key": "k"},
    )
    first, second = server.requests
    assert isinstance(first, RecordedRequest)
    assert (first.method, first.path, first.format, first.model) == (
        "POST",
        "/v1/responses",
        "responses",
        "gpt-x",
    )
    assert first.headers["authorization"] == "Bearer test-key"
    assert first.body == {"model": "gpt-x", "input": "Hello", "stream": False}
    assert first.stream is False and first.last_user_text == "Hello"
    assert second.format == "gemini" and second.stream is True
    assert second.model == "gemini-2.5-flash"
    assert second.query == {"alt": "sse"}
    assert second.headers["x-goog-api-key"] == "k"
    assert second.last_user_text == "Bonjour"


def test_script_is_fifo_across_formats_then_default(server):
    server.script("first", Reply("second"))
    assert server.remaining == 2
    a = post(server, "anthropic").json()
    g = post(server, "gemini").json()
    c = post(server, "chat_completions").json()
    assert a["content"][0]["text"] == "first"
    assert g["candidates"][0]["content"]["parts"][0]["text"] == "second"
    assert c["choices"][0]["message"]["content"] == "ok"  # the default reply
    assert server.remaining == 0


def test_strict_server_answers_500_when_nothing_is_scripted():
    with FakeProviderServer(default=None) as strict:
        response = post(strict, "anthropic")
        assert response.status_code == 500
        body = response.json()
        assert body["type"] == "error"
        assert "no scripted reply" in body["error"]["message"]


def test_responder_answers_from_the_request(server):
    server.responder = echo
    body = post(server, "chat_completions").json()
    assert body["choices"][0]["message"]["content"] == "You said: Hi"
    server.script(lambda request: Reply(f"model was {request.model}"))
    body = post(server, "responses").json()
    assert body["output"][0]["content"][0]["text"] == "model was fake-model"


def test_a_failing_responder_becomes_a_500(server, caplog):
    def broken(request):
        raise KeyError("oops")

    server.script(broken)
    response = post(server, "chat_completions")
    assert response.status_code == 500
    assert "KeyError" in response.json()["error"]["message"]
    assert post(server, "chat_completions").status_code == 200


def test_custom_default_reply():
    with FakeProviderServer(default="fallback") as srv:
        assert post(srv, "anthropic").json()["content"][0]["text"] == "fallback"


def test_reset_forgets_script_and_requests(server):
    server.script("a", "b")
    post(server, "anthropic")
    server.responder = echo
    server.reset()
    assert server.remaining == 0 and server.requests == [] and server.responder is None


# -- Chat Completions -------------------------------------------------------------------


def test_chat_completions_stream_text_and_usage_chunk(server):
    frames = events(
        server,
        "chat_completions",
        Reply("Hello there, world", usage=USAGE, chunk_size=5),
        body={"stream_options": {"include_usage": True}},
    )
    assert frames[-1] == (None, "[DONE]")
    chunks = [data for _, data in frames[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "Hello there, world"
    # every chunk says "usage": null until one extra chunk with no choices carries it
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    usage = chunks[-1]["usage"]
    assert usage["prompt_tokens"] == 14 and usage["prompt_tokens_details"]["cached_tokens"] == 4
    assert usage["completion_tokens"] == 5
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 2


def test_chat_completions_stream_tool_call_fragments(server):
    reply = Reply(
        tool_calls=[
            ToolCall("weather", {"latitude": "52.5200", "longitude": "13.4050"}),
            ToolCall("clock", {"tz": "Europe/Berlin"}, call_id="call_fixed"),
        ],
        chunk_size=7,
    )
    frames = events(server, "chat_completions", reply)
    chunks = [data for _, data in frames[:-1]]
    fragments = [
        frag
        for c in chunks
        for frag in (c["choices"][0]["delta"].get("tool_calls") or [])
        if c["choices"]
    ]
    calls: dict[int, dict] = {}
    for frag in fragments:
        call = calls.setdefault(frag["index"], {"args": ""})
        if "id" in frag:
            assert "id" not in call, "only the first fragment carries the id"
            call.update(id=frag["id"], name=frag["function"]["name"])
        else:
            assert set(frag) == {"index", "function"} and set(frag["function"]) == {"arguments"}
        call["args"] += frag["function"]["arguments"]
    assert calls[0]["name"] == "weather" and calls[0]["id"].startswith("call_")
    assert json.loads(calls[0]["args"]) == {"latitude": "52.5200", "longitude": "13.4050"}
    assert calls[1]["id"] == "call_fixed"
    assert json.loads(calls[1]["args"]) == {"tz": "Europe/Berlin"}
    # without include_usage the usage rides on the finishing chunk
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["usage"]["completion_tokens"] > 0


def test_chat_completions_stream_matches_recording_shape(server):
    rec = recorded(
        "chat_function_calling_deepseek_deepseek-chat_can_use_tools_with_multi-turn_"
        "streaming_conversations.json"
    )
    rec_chunks = [json.loads(d) for _, d in parse_sse(rec["response"]["body"]) if d != "[DONE]"]
    frames = events(server, "chat_completions", Reply(tool_calls=[ToolCall("weather", {"a": 1})]))
    ours = [d for _, d in frames if d != "[DONE]"]
    rec_keys = set().union(*(c.keys() for c in rec_chunks))
    assert all(set(c) <= rec_keys for c in ours)
    rec_choice = set().union(*(c["choices"][0].keys() for c in rec_chunks))
    assert all(set(c["choices"][0]) <= rec_choice for c in ours)

    def shape(chunks):
        out = []
        for c in chunks:
            delta = c["choices"][0]["delta"]
            if "role" in delta:
                out.append("role")
            elif delta.get("tool_calls"):
                out.append("call_start" if "id" in delta["tool_calls"][0] else "args")
            else:
                out.append(("finish", c["choices"][0]["finish_reason"]))
        return collapse(out)

    assert shape(ours) == shape(rec_chunks)


def _usages(data) -> list:
    """Every non-null usage block in a JSON value (``usage``, Gemini's ``usageMetadata``)."""
    if isinstance(data, list):
        return [u for item in data for u in _usages(item)]
    if not isinstance(data, dict):
        return []
    found = [v for k, v in data.items() if k in ("usage", "usageMetadata") and v is not None]
    return found + [u for v in data.values() for u in _usages(v)]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("fmt", list(PATHS))
def test_a_reply_without_usage_reports_none(server, fmt, stream):
    """``usage=False``: no usage block in the answer, no usage chunk in the stream (even
    when the request asks for one with ``stream_options.include_usage``)."""
    reply = Reply("Hello there, world", usage=False, chunk_size=5)
    if stream:
        body = {"stream_options": {"include_usage": True}} if fmt == "chat_completions" else {}
        frames = events(server, fmt, reply, body=body)
        datas = [data for _, data in frames if data != "[DONE]"]
        text = json.dumps(datas)
        assert "Hello" in text and len(datas) > 2
    else:
        server.script(reply)
        datas = post(server, fmt).json()
        assert "Hello there, world" in json.dumps(datas)
    assert _usages(datas) == []
    server.script(Reply("Hello", usage=USAGE))
    assert _usages(post(server, fmt).json())  # the same route with usage reports it


def test_usage_true_is_refused():
    with pytest.raises(ValueError, match="usage=True"):
        Reply("x", usage=True).tokens  # noqa: B018 - the property raises


def test_chat_completions_whole_answer(server):
    server.script(
        Reply(
            tool_calls=[ToolCall("weather", {"lat": "1"})],
            thinking="Let me check.",
            usage=USAGE,
        )
    )
    body = post(server, "chat_completions").json()
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["reasoning"] == "Let me check."
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "weather"
    assert json.loads(call["function"]["arguments"]) == {"lat": "1"}
    assert body["usage"]["prompt_tokens"] == 14


def test_chat_completions_reasoning_field_is_configurable():
    with FakeProviderServer(reasoning_field="reasoning_content") as srv:
        frames = events(srv, "chat_completions", Reply("a", thinking="hmm"))
        assert any("reasoning_content" in d["choices"][0]["delta"] for _, d in frames[:-1])


def test_chat_completions_length_finish(server):
    frames = events(server, "chat_completions", Reply("cut", finish_reason="length"))
    assert frames[-2][1]["choices"][0]["finish_reason"] == "length"


# -- Responses --------------------------------------------------------------------------


def test_responses_stream_text_matches_recording(server):
    rec = recorded("chat_streaming_responses_openai_gpt-5-nano_supports_streaming_responses.json")
    rec_frames = [(e, json.loads(d)) for e, d in parse_sse(rec["response"]["body"])]
    # The recording starts with an encrypted reasoning item and no summary.
    frames = events(server, "responses", Reply("1, 2, 3", thinking_signature="gAAAA-enc"))
    assert collapse([e for e, _ in frames]) == collapse([e for e, _ in rec_frames])
    for event, data in frames:
        assert data["type"] == event
    assert [d["sequence_number"] for _, d in frames] == list(range(len(frames)))
    rec_keys: dict[str, set] = {}
    for event, data in rec_frames:
        rec_keys.setdefault(event, set()).update(data)
    for event, data in frames:
        assert set(data) <= rec_keys[event] | {"obfuscation"}, event
    final = frames[-1][1]["response"]
    assert final["status"] == "completed"
    assert final["output"][0]["encrypted_content"] == "gAAAA-enc"
    assert final["output"][1]["content"][0]["text"] == "1, 2, 3"
    text = "".join(d["delta"] for e, d in frames if e == "response.output_text.delta")
    assert text == "1, 2, 3"


def test_responses_stream_function_calls_and_usage(server):
    reply = Reply(
        tool_calls=[ToolCall("weather", {"latitude": "52.5200"}), ToolCall("clock", {})],
        usage=USAGE,
        chunk_size=4,
    )
    frames = events(server, "responses", reply)
    names = [e for e, _ in frames]
    assert names[0] == "response.created" and names[-1] == "response.completed"
    added = [d["item"] for e, d in frames if e == "response.output_item.added"]
    assert [(i["type"], i["name"]) for i in added] == [
        ("function_call", "weather"),
        ("function_call", "clock"),
    ]
    assert all(i["call_id"].startswith("call_") and i["arguments"] == "" for i in added)
    first_id = added[0]["id"]
    deltas = [
        d["delta"]
        for e, d in frames
        if e == "response.function_call_arguments.delta" and d["item_id"] == first_id
    ]
    assert len(deltas) > 1 and json.loads("".join(deltas)) == {"latitude": "52.5200"}
    done = [d for e, d in frames if e == "response.function_call_arguments.done"]
    assert "name" not in done[0]  # as recorded: take the name from output_item.added
    assert done[1]["arguments"] == "{}"
    usage = frames[-1][1]["response"]["usage"]
    assert usage["input_tokens"] == 14
    assert usage["input_tokens_details"]["cached_tokens"] == 4
    assert usage["output_tokens"] == 5
    assert usage["output_tokens_details"]["reasoning_tokens"] == 2


def test_responses_reasoning_summary_events(server):
    frames = events(server, "responses", Reply("Answer", thinking="Thinking hard", chunk_size=5))
    names = collapse([e for e, _ in frames])
    assert names[2:9] == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
    ]
    summary = "".join(d["delta"] for e, d in frames if e == "response.reasoning_summary_text.delta")
    assert summary == "Thinking hard"
    reasoning = frames[-1][1]["response"]["output"][0]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Thinking hard"}]


def test_responses_length_is_incomplete(server):
    frames = events(server, "responses", Reply("Once upon", finish_reason="length"))
    event, data = frames[-1]
    assert event == "response.incomplete"
    assert data["response"]["status"] == "incomplete"
    assert data["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_responses_whole_answer_matches_recording_keys(server):
    rec = json.loads(
        recorded(
            "chat_basic_chat_functionality_openai_gpt-5-nano_can_have_a_basic_conversation.json"
        )["response"]["body"]
    )
    server.script(Reply("4", thinking_signature="enc"))
    body = post(server, "responses", body={"input": "2+2?"}).json()
    assert set(body) <= set(rec)
    assert [i["type"] for i in body["output"]] == [i["type"] for i in rec["output"]]
    assert set(body["usage"]) == set(rec["usage"])
    assert body["output"][1]["content"][0]["text"] == "4"


# -- Anthropic --------------------------------------------------------------------------


def test_anthropic_stream_text_matches_recording(server):
    rec = recorded(
        "chat_streaming_responses_anthropic_claude-haiku-4-5_supports_streaming_responses.json"
    )
    rec_frames = [(e, json.loads(d)) for e, d in parse_sse(rec["response"]["body"])]
    frames = events(server, "anthropic", Reply("1\n2\n3"))
    assert collapse([e for e, _ in frames]) == collapse([e for e, _ in rec_frames])
    for event, data in frames:
        assert data["type"] == event


def test_anthropic_stream_pads_json_with_spaces(server):
    server.script(Reply("hi"))
    response = post(server, "anthropic", stream=True)
    assert any(line.endswith(" }") for line in response.text.splitlines())


def test_anthropic_stream_thinking_text_and_tools(server):
    reply = Reply(
        "Let me look.",
        thinking="The user wants weather.",
        thinking_signature="sig-123",
        tool_calls=[ToolCall("weather", {"latitude": "52.52"}), ToolCall("noargs", {})],
        usage={**USAGE, "cache_write_tokens": 3},
    )
    frames = events(server, "anthropic", reply)
    names = [e for e, _ in frames]
    assert names[0] == "message_start" and names[-1] == "message_stop" and "ping" in names
    starts = [d["content_block"] for e, d in frames if e == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "text", "tool_use", "tool_use"]
    deltas = [d for e, d in frames if e == "content_block_delta"]
    thinking = "".join(d["delta"].get("thinking", "") for d in deltas if d["index"] == 0)
    assert thinking == "The user wants weather."
    # the signature arrives right before the thinking block stops
    idx = names.index("content_block_stop")
    assert frames[idx - 1][1]["delta"] == {"type": "signature_delta", "signature": "sig-123"}
    args = "".join(d["delta"].get("partial_json", "") for d in deltas if d["index"] == 2)
    assert json.loads(args) == {"latitude": "52.52"}
    assert starts[2]["id"].startswith("toolu_")
    assert not [d for d in deltas if d["index"] == 3]  # no deltas for a call without args
    message_delta = next(d for e, d in frames if e == "message_delta")
    assert message_delta["delta"]["stop_reason"] == "tool_use"
    usage = message_delta["usage"]
    # Anthropic: cache reads and writes are beside input_tokens, thinking inside output
    assert usage["input_tokens"] == 10
    assert usage["cache_read_input_tokens"] == 4
    assert usage["cache_creation_input_tokens"] == 3
    assert usage["output_tokens"] == 5
    assert usage["output_tokens_details"] == {"thinking_tokens": 2}


def test_anthropic_whole_answer_matches_recording(server):
    rec = json.loads(
        recorded("chat_function_calling_anthropic_claude-haiku-4-5_can_use_tools.json")["response"][
            "body"
        ]
    )
    server.script(Reply(tool_calls=[ToolCall("weather", {"latitude": "52.5200"})]))
    body = post(server, "anthropic").json()
    assert set(body) <= set(rec)
    assert body["stop_reason"] == "tool_use"
    (block,) = body["content"]
    assert set(block) <= set(rec["content"][0])
    assert block["input"] == {"latitude": "52.5200"}


def test_anthropic_length_finish(server):
    server.script(Reply("partial", finish_reason="length"))
    assert post(server, "anthropic").json()["stop_reason"] == "max_tokens"


# -- Gemini -----------------------------------------------------------------------------


def test_gemini_stream_chunks(server):
    reply = Reply(
        "The weather is fine.",
        thinking="Considering",
        tool_calls=[ToolCall("weather", {"latitude": "52.5"}), ToolCall("clock", {})],
        usage=USAGE,
        chunk_size=6,
    )
    server.script(reply)
    response = post(server, "gemini", stream=True)
    assert response.status_code == 200
    raw = response.text
    assert raw.endswith("\r\n\r\n") and "\n\n" not in raw.replace("\r\n\r\n", "")
    chunks = [json.loads(d) for _, d in parse_sse(raw)]
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    assert "".join(p["text"] for p in parts if p.get("thought")) == "Considering"
    assert "".join(p["text"] for p in parts if "text" in p and not p.get("thought")) == (
        "The weather is fine."
    )
    calls = [p for p in parts if "functionCall" in p]
    assert [c["functionCall"]["name"] for c in calls] == ["weather", "clock"]
    assert calls[0]["functionCall"]["args"] == {"latitude": "52.5"}
    assert calls[0]["thoughtSignature"]  # Gemini signs the first call of a turn
    assert [("finishReason" in c["candidates"][0]) for c in chunks] == [False] * (
        len(chunks) - 1
    ) + [True]
    # a tool-call turn still ends with STOP
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    usage = chunks[-1]["usageMetadata"]  # a snapshot: the last one counts
    # Gemini: cache reads inside the prompt count, thoughts beside the candidates
    assert usage["promptTokenCount"] == 14 and usage["cachedContentTokenCount"] == 4
    assert usage["candidatesTokenCount"] == 3 and usage["thoughtsTokenCount"] == 2


def test_gemini_stream_matches_recording(server):
    rec = recorded(
        "chat_function_calling_gemini_gemini-2_5-flash_can_use_tools_with_multi-turn_"
        "streaming_conversations.json",
        1,
    )
    rec_chunks = [json.loads(d) for _, d in parse_sse(rec["response"]["body"])]
    server.script(Reply("The weather in Berlin is 15°C.", chunk_size=20))
    ours = [json.loads(d) for _, d in parse_sse(post(server, "gemini", stream=True).text)]
    assert len(ours) == len(rec_chunks) == 2
    for mine, theirs in zip(ours, rec_chunks, strict=True):
        assert set(mine) <= set(theirs)
        assert set(mine["candidates"][0]) == set(theirs["candidates"][0])
        assert set(mine["usageMetadata"]) <= set(theirs["usageMetadata"]) | {
            "cachedContentTokenCount",
            "thoughtsTokenCount",
        }


def test_gemini_stream_without_alt_sse_is_a_json_array(server):
    server.script(Reply("Hello world", chunk_size=5))
    response = post(server, "gemini", stream=True, query="?x=1")
    chunks = json.loads(response.text)
    assert isinstance(chunks, list) and len(chunks) == 3
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"


def test_gemini_whole_answer(server):
    server.script(Reply(tool_calls=[ToolCall("weather", {"a": "b"}, thought_signature="sig")]))
    body = post(server, "gemini").json()
    (candidate,) = body["candidates"]
    assert candidate["finishReason"] == "STOP"
    (part,) = candidate["content"]["parts"]
    assert part == {
        "functionCall": {"name": "weather", "args": {"a": "b"}},
        "thoughtSignature": "sig",
    }


def test_gemini_length_finish(server):
    server.script(Reply("partial", finish_reason="length"))
    assert post(server, "gemini").json()["candidates"][0]["finishReason"] == "MAX_TOKENS"


# -- usage read back per vendor ---------------------------------------------------------


def read_usage(fmt: str, body: dict) -> Tokens:
    """What a correct parser makes of each vendor's counts."""
    if fmt == "chat_completions":
        u = body["usage"]
        cached = u["prompt_tokens_details"]["cached_tokens"]
        return Tokens(
            input_tokens=u["prompt_tokens"] - cached,
            output_tokens=u["completion_tokens"],
            cache_read_tokens=cached,
            thinking_tokens=u["completion_tokens_details"]["reasoning_tokens"],
        )
    if fmt == "responses":
        u = body["usage"]
        cached = u["input_tokens_details"]["cached_tokens"]
        return Tokens(
            input_tokens=u["input_tokens"] - cached,
            output_tokens=u["output_tokens"],
            cache_read_tokens=cached,
            thinking_tokens=u["output_tokens_details"]["reasoning_tokens"],
        )
    if fmt == "anthropic":
        u = body["usage"]
        return Tokens(
            input_tokens=u["input_tokens"],
            output_tokens=u["output_tokens"],
            cache_read_tokens=u["cache_read_input_tokens"],
            thinking_tokens=u["output_tokens_details"]["thinking_tokens"],
        )
    u = body["usageMetadata"]
    cached = u.get("cachedContentTokenCount", 0)
    return Tokens(
        input_tokens=u["promptTokenCount"] - cached,
        output_tokens=u["candidatesTokenCount"] + u.get("thoughtsTokenCount", 0),
        cache_read_tokens=cached,
        thinking_tokens=u.get("thoughtsTokenCount"),
    )


@pytest.mark.parametrize("fmt", list(PATHS))
def test_usage_reads_back_exactly(server, fmt):
    server.script(Reply("hello", usage=Tokens(**USAGE)))
    assert read_usage(fmt, post(server, fmt).json()) == Tokens(**USAGE)


# -- faults ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(PATHS))
def test_rate_limit_with_retry_after(server, fmt):
    server.script(Fault(status=429, retry_after=2, retry_after_ms=1500), Reply("after"))
    first = post(server, fmt)
    assert first.status_code == 429
    assert first.headers["retry-after"] == "2"
    assert first.headers["retry-after-ms"] == "1500"
    body = first.json()
    if fmt == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
    elif fmt == "gemini":
        assert body["error"]["status"] == "RESOURCE_EXHAUSTED"
        assert body["error"]["details"][0]["retryDelay"] == "2s"
    else:
        assert body["error"]["code"] == "rate_limit_exceeded"
    assert post(server, fmt).status_code == 200


def test_fault_with_custom_body_and_headers(server):
    server.script(Fault(status=401, body={"detail": "Invalid API Key"}, headers={"x-a": "b"}))
    response = post(server, "chat_completions")
    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid API Key"}
    assert response.headers["x-a"] == "b"


def test_overloaded_529(server):
    server.script(Fault(status=529))
    response = post(server, "anthropic")
    assert response.status_code == 529
    assert response.json()["error"]["type"] == "overloaded_error"


TERMINAL = {
    "chat_completions": lambda frames: frames and frames[-1][1] == "[DONE]",
    "responses": lambda frames: frames and frames[-1][0] == "response.completed",
    "anthropic": lambda frames: frames and frames[-1][0] == "message_stop",
    "gemini": lambda frames: (
        frames and "finishReason" in json.loads(frames[-1][1])["candidates"][0]
    ),
}


@pytest.mark.parametrize("fmt", list(PATHS))
def test_cut_off_stream_closes_without_terminal_event(server, fmt):
    server.script(Fault(cut_after=3, reply=Reply("a fairly long answer", chunk_size=2)))
    received = b""
    with httpx.Client(timeout=5) as client:
        path = STREAM_PATHS[fmt] + ("?alt=sse" if fmt == "gemini" else "")
        body = {"model": "m", "stream": True}
        with pytest.raises(httpx.RemoteProtocolError):
            with client.stream("POST", server.url + path, json=body) as response:
                assert response.status_code == 200
                for chunk in response.iter_bytes():
                    received += chunk
    frames = parse_sse(received.decode())
    assert len(frames) == 3
    assert not TERMINAL[fmt](frames)


def test_cut_cleanly_ends_the_body_early(server):
    server.script(Fault(cut_after=2, cut_cleanly=True, reply=Reply("abcdefghij", chunk_size=1)))
    response = post(server, "anthropic", stream=True)
    frames = parse_sse(response.text)
    assert [e for e, _ in frames] == ["message_start", "content_block_start"]
    assert post(server, "anthropic").status_code == 200


def test_cut_off_whole_answer(server):
    server.script(Fault(cut_after=0))
    with pytest.raises(httpx.RemoteProtocolError):
        post(server, "responses")


def test_drop_closes_without_answer(server):
    server.script(Fault(drop=True))
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        post(server, "chat_completions")
    assert post(server, "chat_completions").status_code == 200


def test_mid_stream_error_chat_completions(server):
    frames = events(server, "chat_completions", Fault(error_event=2, reply=Reply("abcdefghijk")))
    assert len(frames) == 3
    assert frames[-1][1]["error"]["type"] == "server_error"
    assert all(data != "[DONE]" for _, data in frames)


def test_mid_stream_error_responses(server):
    frames = events(server, "responses", Fault(error_event=3, error_message="boom"))
    assert [e for e, _ in frames[-2:]] == ["error", "response.failed"]
    assert frames[-2][1]["message"] == "boom"
    assert frames[-1][1]["response"]["status"] == "failed"
    assert frames[-1][1]["response"]["error"]["message"] == "boom"


def test_mid_stream_error_anthropic(server):
    frames = events(server, "anthropic", Fault(error_event=1))
    assert [e for e, _ in frames] == ["message_start", "error"]
    assert frames[-1][1]["error"]["type"] == "overloaded_error"


def test_mid_stream_error_gemini(server):
    server.script(Fault(error_event=1, reply=Reply("abcdefghijklmnop", chunk_size=4)))
    chunks = [json.loads(d) for _, d in parse_sse(post(server, "gemini", stream=True).text)]
    assert len(chunks) == 2
    assert "candidates" in chunks[0]
    assert set(chunks[1]) == {"error"} and chunks[1]["error"]["code"] == 503


def test_error_event_never_after_the_terminal_event(server):
    frames = events(server, "anthropic", Fault(error_event=999, reply=Reply("x")))
    assert [e for e, _ in frames][-2:] == ["message_delta", "error"]


def test_chunk_delay(server):
    server.script(Fault(chunk_delay=0.05, reply=Reply("abcdef", chunk_size=1)))
    start = time.monotonic()
    with httpx.Client(timeout=5) as client:
        with client.stream(
            "POST", server.url + "/v1/messages", json={"model": "m", "stream": True}
        ) as response:
            stamps = [time.monotonic() for _ in response.iter_lines()]
    elapsed = time.monotonic() - start
    frames = 12  # message_start, block start, ping, 6 deltas, stop, message_delta, stop
    assert elapsed >= 0.05 * (frames - 1) * 0.9
    assert stamps[-1] - stamps[0] >= 0.4  # frames really trickle in


def test_first_byte_delay(server):
    server.script(Fault(first_byte_delay=0.3))
    start = time.monotonic()
    assert post(server, "gemini").status_code == 200
    assert time.monotonic() - start >= 0.3


def test_server_wide_delays():
    with FakeProviderServer(chunk_delay=0.02) as srv:
        start = time.monotonic()
        srv.script(Reply("abcd", chunk_size=1))
        post(srv, "chat_completions", stream=True)
        assert time.monotonic() - start >= 0.02 * 6


def test_server_survives_client_disconnect_mid_stream():
    with FakeProviderServer() as server:
        server.script(Fault(chunk_delay=0.02, reply=Reply("x" * 200, chunk_size=1)))
        with httpx.Client(timeout=5) as client:
            with client.stream(
                "POST", server.url + "/v1/chat/completions", json={"model": "m", "stream": True}
            ) as response:
                next(response.iter_lines())
            # leaving the block closes the connection under the server's feet
        # the server saw the client leave: the stream's handler ended, its connection closed
        wait_until(lambda: not server._connections, timeout=10)
        server.script(Reply("still alive"))
        body = post(server, "chat_completions").json()
        assert body["choices"][0]["message"]["content"] == "still alive"


# -- connections and load ---------------------------------------------------------------


def test_keep_alive_reuses_the_connection(server):
    with httpx.Client(timeout=5) as client:
        post(server, "chat_completions", client=client)
        post(server, "anthropic", stream=True, client=client)
        post(server, "gemini", client=client)
    peers = {r.peer for r in server.requests}
    assert len(peers) == 1


def test_head_and_frames_go_out_without_nagle_stalls(server):
    """Without TCP_NODELAY each exchange would stall ~40 ms on Nagle and delayed ACKs: every
    connection the server holds has it set, checked on the server's own sockets."""
    seen = []

    def responder(request):
        with server._lock:
            seen.extend(
                conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                for conn in server._connections
            )
        return echo(request)

    server.responder = responder
    with httpx.Client(timeout=5) as client:
        for _ in range(3):
            post(server, "responses", stream=True, client=client)
            post(server, "chat_completions", client=client)
    assert len(seen) >= 6 and all(seen)


def test_fifty_concurrent_streams(server):
    server.chunk_delay = 0.01
    n = 50

    def one(i: int) -> str:
        response = post(
            server,
            "chat_completions",
            stream=True,
            body={"messages": [{"role": "user", "content": f"n{i}"}]},
        )
        frames = parse_sse(response.text)
        assert frames[-1][1] == "[DONE]"
        return "".join(
            json.loads(d)["choices"][0]["delta"].get("content") or ""
            for _, d in frames[:-1]
            if json.loads(d)["choices"]
        )

    # Every answer waits until all fifty requests are being answered at once: served one
    # after another, the barrier breaks and the requests get a 500.
    everyone = threading.Barrier(n)

    def together(request):
        everyone.wait(timeout=60)
        return echo(request)

    server.responder = together
    with ThreadPoolExecutor(max_workers=n) as pool:
        texts = list(pool.map(one, range(n)))
    assert sorted(texts) == sorted(f"You said: n{i}" for i in range(n))
    assert len(server.requests) == n


def test_stop_closes_idle_keep_alive_connections():
    srv = FakeProviderServer().start()
    url = srv.url
    with httpx.Client(timeout=2) as client:
        assert client.post(url + "/v1/messages", json={"model": "m"}).status_code == 200
        srv.stop()
        assert not srv.running
        with pytest.raises(httpx.TransportError):
            client.post(url + "/v1/messages", json={"model": "m"})


def test_http10_client_gets_close_delimited_stream(server):
    server.script(Reply("hi"))
    body = json.dumps({"model": "m", "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/messages HTTP/1.0\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    assert b"chunked" not in head.lower()
    assert [e for e, _ in parse_sse(payload.decode())][-1] == "message_stop"


def test_context_manager_and_threads_are_cleaned_up():
    before = threading.active_count()
    with FakeProviderServer() as srv:
        assert post(srv, "chat_completions").status_code == 200
    assert not srv.running
    # the server's threads end (each handler once its connection is shut)
    wait_until(lambda: threading.active_count() <= before + 1, timeout=10)


# -- pytest plugin ----------------------------------------------------------------------


def test_fake_llm_settings(fake_llm):
    providers = fake_llm.settings()
    assert providers["openai"] == {"api_key": "test-key", "base_url": fake_llm.url + "/v1"}
    assert providers["anthropic"]["base_url"] == fake_llm.url
    assert providers["gemini"]["base_url"] == fake_llm.url
    assert {"ollama", "openrouter", "deepseek", "mistral", "openai_compatible"} <= set(providers)
    chat = fake_llm.settings(provider="openai", api="chat_completions")
    assert chat["openai"]["api"] == "chat_completions"
    assert "api" not in chat["anthropic"]


def test_fake_llm_configure_overrides_llmchat(fake_llm):
    from django_llmchat.conf import settings as llmchat

    value = fake_llm.configure(provider="anthropic", model="claude-x")
    assert llmchat.DEFAULT_PROVIDER == "anthropic"
    assert llmchat.DEFAULT_MODEL == "claude-x"
    assert llmchat.PROVIDERS["anthropic"]["base_url"] == fake_llm.url
    assert value["PROVIDERS"] == llmchat.PROVIDERS


def test_fake_llm_configure_is_undone_after_the_test():
    from django_llmchat.conf import settings as llmchat

    assert llmchat.PROVIDERS == {}
