"""The vendor's id of an answer (``ProviderResponse.response_id``, the ``chat`` span's
``gen_ai.response.id``), read from every recorded answer in ``tests/fixtures/wire/``,
streamed and whole, and from every wire format of the fake server."""

from __future__ import annotations

import json

import pytest

from django_llmchat.providers.anthropic import AnthropicProvider
from django_llmchat.providers.gemini import GeminiProvider
from django_llmchat.providers.openai_chat import OllamaProvider, OpenAIChatProvider
from django_llmchat.providers.openai_responses import OpenAIResponsesProvider
from django_llmchat.providers.types import ProviderMessage, ProviderRequest
from django_llmchat.testing import Reply

from .replay import fixture_names, load_fixture, replay_transport

KEY = "test-key-not-real"
REQUEST = ProviderRequest("m", [ProviderMessage("user", "Hi")])


def provider_for(name: str, uri: str, transport):
    """The provider class that speaks the fixture's wire format."""
    if uri.endswith("/messages"):
        return AnthropicProvider(api_key=KEY, transport=transport, max_retries=0)
    if "generatecontent" in uri.lower():
        return GeminiProvider(api_key=KEY, transport=transport, max_retries=0)
    if uri.endswith("/responses"):
        return OpenAIResponsesProvider(api_key=KEY, transport=transport, max_retries=0)
    if "ollama" in name:
        return OllamaProvider(api_key=KEY, transport=transport, max_retries=0)
    return OpenAIChatProvider(api_key=KEY, transport=transport, max_retries=0)


def recorded_id(body: str) -> str | None:
    """The id the recorded body carries, read here without the parsers: a whole answer's
    ``id`` / ``responseId``; in a stream the first frame's (``id`` of a chunk,
    ``message.id`` of Anthropic's ``message_start``, ``response.id`` of the Responses
    API's ``response.created``, Gemini's ``responseId``)."""
    try:
        documents = [json.loads(body)]
    except ValueError:
        documents = []
        for line in body.splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                documents.append(json.loads(line[5:]))
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        for found in (
            doc.get("id"),
            doc.get("responseId"),
            (doc.get("message") or {}).get("id"),
            (doc.get("response") or {}).get("id"),
        ):
            if isinstance(found, str) and found:
                return found
    return None


ANSWERS = [
    (name, i)
    for name in fixture_names()
    for i, interaction in enumerate(load_fixture(name)["interactions"])
    if interaction["response"]["status"] == 200
]


@pytest.mark.parametrize(("name", "index"), ANSWERS, ids=[f"{n}-{i}" for n, i in ANSWERS])
def test_the_response_id_of_every_recorded_answer(name, index):
    interaction = load_fixture(name)["interactions"][index]
    body = interaction["response"]["body"]
    transport, _ = replay_transport([interaction], check_path=False)
    provider = provider_for(name, interaction["request"]["uri"].split("?")[0], transport)
    streamed = json.loads(interaction["request"].get("body") or "{}").get("stream") or (
        "streamGenerateContent" in interaction["request"]["uri"]
    )
    if streamed:
        stream = provider.stream(REQUEST)
        list(stream)
        response = stream.response
    else:
        response = provider.complete(REQUEST)
    assert response.response_id == recorded_id(body)


def test_every_recorded_answer_carries_an_id():
    missing = {
        name
        for name, index in ANSWERS
        if recorded_id(load_fixture(name)["interactions"][index]["response"]["body"]) is None
    }
    assert missing == set()
    assert len(ANSWERS) > 30


FORMATS = [
    ("openai", OpenAIResponsesProvider, "resp_0a1b2c"),
    ("openai", OpenAIChatProvider, "chatcmpl-9x8y7z"),
    ("anthropic", AnthropicProvider, "msg_01AbCdEf"),
    ("gemini", GeminiProvider, "qRs0aLxJN8ePz"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("name", "cls", "rid"), FORMATS, ids=[f[1].__name__ for f in FORMATS])
def test_the_response_id_over_http(fake_llm, name, cls, rid, stream):
    provider = cls(api_key=KEY, base_url=fake_llm.base_url(name), max_retries=0)
    fake_llm.script(Reply("Hi.", response_id=rid), Reply("Again."))
    if stream:
        answer = provider.stream(REQUEST)
        list(answer)
        first = answer.response
        again = provider.stream(REQUEST)
        list(again)
        second = again.response
    else:
        first, second = provider.complete(REQUEST), provider.complete(REQUEST)
    assert first.response_id == rid
    # unscripted, the server makes one up in the vendor's shape: read back, not ours
    assert second.response_id and second.response_id != rid
