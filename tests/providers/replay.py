"""Replay recorded wire exchanges (``tests/fixtures/wire/``) through ``httpx.MockTransport``.

A fixture is ``{"source": ..., "interactions": [{"request": {...}, "response": {...}}]}``;
headers map a name to a list of values, bodies are text (SSE bodies included).

    transport, sent = replay_transport(load_fixture("chat_function_calling_..."))
    provider = SomeProvider(api_key="test", transport=transport)
    ...
    assert json.loads(sent[0].content)["messages"][0]["role"] == "user"

Interactions are served in order. Each request must use the recorded method and end with
the recorded path (``<OLLAMA_API_BASE>/chat/completions`` means the base URL was a
placeholder: only ``/chat/completions`` is compared); query strings are not compared.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from django_llmchat.events import (
    FinishReasonDone,
    ReasoningDelta,
    ReasoningDone,
    TextDelta,
    TextDone,
    TokenUsageDone,
    ToolCallDelta,
    ToolCallDone,
)
from django_llmchat.providers.types import ProviderResponse

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "wire"

# Headers describing the recorded transfer, not the decoded body we serve.
_DROPPED_HEADERS = {"content-length", "content-encoding", "transfer-encoding", "connection"}


def fixture_names(pattern: str = "*") -> list[str]:
    """Names (without ``.json``) of the recorded fixtures matching a glob pattern."""
    return sorted(p.stem for p in FIXTURES.glob(f"{pattern}.json"))


def load_fixture(name: str) -> dict[str, Any]:
    """Load one recorded fixture by name (``.json`` optional)."""
    if not name.endswith(".json"):
        name += ".json"
    with open(FIXTURES / name, encoding="utf-8") as f:
        return json.load(f)


def request_body(interaction: dict[str, Any]) -> dict[str, Any]:
    """The recorded request body of one interaction, parsed."""
    body = interaction["request"].get("body") or ""
    return json.loads(body) if body else {}


def response_body(interaction: dict[str, Any]) -> Any:
    """The recorded response body: parsed JSON when it is JSON, else the text."""
    body = interaction["response"].get("body") or ""
    try:
        return json.loads(body)
    except ValueError:
        return body


def recorded_path(uri: str) -> str:
    """The path a request must end with: after a ``<PLACEHOLDER>`` or the URL's path."""
    if uri.startswith("<"):
        uri = uri[uri.index(">") + 1 :]
        return uri.split("?", 1)[0]
    return urlsplit(uri).path


class _Chunks(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body served in fixed-size pieces, to exercise parsers across chunk boundaries."""

    def __init__(self, data: bytes, size: int):
        self.data = data
        self.size = size

    def __iter__(self) -> Iterator[bytes]:
        for i in range(0, len(self.data), self.size):
            yield self.data[i : i + self.size]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self:
            yield chunk


def recorded_response(
    interaction: dict[str, Any], request: httpx.Request | None = None, chunk_size: int | None = None
) -> httpx.Response:
    """An ``httpx.Response`` carrying one interaction's recorded status, headers and body."""
    rec = interaction["response"]
    headers = [
        (name, value)
        for name, values in (rec.get("headers") or {}).items()
        if name.lower() not in _DROPPED_HEADERS
        for value in (values if isinstance(values, list) else [values])
    ]
    data = (rec.get("body") or "").encode("utf-8")
    if chunk_size:
        return httpx.Response(
            rec["status"], headers=headers, stream=_Chunks(data, chunk_size), request=request
        )
    return httpx.Response(rec["status"], headers=headers, content=data, request=request)


def replay_transport(
    fixture_or_interactions: dict[str, Any] | Sequence[dict[str, Any]] | str,
    *,
    chunk_size: int | None = None,
    check_path: bool = True,
) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A transport serving the interactions in order, and the list of requests it got.

    Accepts a fixture dict, a list of interactions, or a fixture name. ``chunk_size``
    splits each body into pieces of that many bytes. A request beyond the recording, or
    one for another method or path, fails with ``AssertionError``.
    """
    if isinstance(fixture_or_interactions, str):
        fixture_or_interactions = load_fixture(fixture_or_interactions)
    if isinstance(fixture_or_interactions, dict):
        interactions = list(fixture_or_interactions["interactions"])
    else:
        interactions = list(fixture_or_interactions)
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        request.read()
        index = len(sent)
        sent.append(request)
        if index >= len(interactions):
            raise AssertionError(
                f"request {index + 1} ({request.method} {request.url}) but only "
                f"{len(interactions)} interaction(s) were recorded"
            )
        interaction = interactions[index]
        rec = interaction["request"]
        if check_path:
            method = rec.get("method", "POST").upper()
            path = recorded_path(rec["uri"])
            if request.method != method or not request.url.path.endswith(path):
                raise AssertionError(
                    f"request {index + 1} was {request.method} {request.url.path}, "
                    f"recorded {method} {path}"
                )
        return recorded_response(interaction, request, chunk_size)

    return httpx.MockTransport(handler), sent


def sent_json(request: httpx.Request) -> dict[str, Any]:
    """The JSON body of a request the transport received."""
    return json.loads(request.content)


# -- streamed responses -------------------------------------------------------------


def run_stream(provider, request) -> tuple[list, ProviderResponse]:
    stream = provider.stream(request)
    events = list(stream)
    assert stream.response is not None
    return events, stream.response


def check_sequence(events: list, response: ProviderResponse) -> None:
    """The ordering rules of seed 001 for one streamed response."""
    deltas = [e.content for e in events if isinstance(e, TextDelta)]
    dones = [e for e in events if isinstance(e, TextDone)]
    if deltas:
        assert len(dones) == 1
        assert dones[0].content == "".join(deltas) == response.content
        last_delta = max(i for i, e in enumerate(events) if isinstance(e, TextDelta))
        assert events.index(dones[0]) > last_delta
    else:
        assert dones == []
        assert response.content == ""
    assert sum(isinstance(e, TokenUsageDone) for e in events) == 1
    assert sum(isinstance(e, FinishReasonDone) for e in events) == 1
    usage = next(e for e in events if isinstance(e, TokenUsageDone))
    assert usage.token_usage == response.tokens
    finish = next(e for e in events if isinstance(e, FinishReasonDone))
    assert finish.finish_reason == response.finish_reason
    assert finish.raw_finish_reason == response.raw_finish_reason
    # Each tool call: deltas (name only in the first) then one ToolCallDone.
    done_calls = [e for e in events if isinstance(e, ToolCallDone)]
    assert [c.call_id for c in response.tool_calls] == [d.call_id for d in done_calls]
    for done in done_calls:
        parts = [e for e in events if isinstance(e, ToolCallDelta) and e.item_id == done.item_id]
        if parts:
            assert parts[0].name == done.name
            assert all(p.name is None for p in parts[1:])
            assert "".join(p.arguments_delta for p in parts) == done.arguments
            assert events.index(parts[-1]) < events.index(done)
    reasoning = [e.content for e in events if isinstance(e, ReasoningDelta)]
    reasoning_done = [e.part.text for e in events if isinstance(e, ReasoningDone)]
    if reasoning:
        assert "".join(reasoning) == "".join(reasoning_done)
    if reasoning_done:
        assert response.thinking is not None
        assert response.thinking.text == "".join(reasoning_done)
    else:  # no reasoning text (Gemini may still return a bare thought signature)
        assert response.thinking is None or response.thinking.text == ""
