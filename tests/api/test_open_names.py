"""The schema grows without breaking clients: names a project registers or configures are
open strings in answers (tools in requests too), the names a setting fixes are enums in
requests only; and what else the schema states that a fuzzer found it did not (history
options, NUL-free names, client ids, the number of files, a streamed retry's JSON,
``?format=``). The clients generated from it: test_generated_clients.py."""

from __future__ import annotations

import json
import re

import pytest

from django_llmchat import tools
from django_llmchat.api.schema import TOOL_NAME_PATTERN
from django_llmchat.api.ui.requests import CLIENT_ID_SCHEMA_PATTERN
from django_llmchat.inputs import configured_providers
from django_llmchat.models import Chat

from .conftest import url

pytestmark = pytest.mark.django_db


def harbour_master(harbour: str) -> str:
    """Who runs a harbour."""
    return harbour


@pytest.fixture
def registered(monkeypatch, settings):
    """One registered tool (the others tests register set aside) and a configured MCP
    server (``notes``)."""
    monkeypatch.setattr(tools, "_registry", {"harbour_master": tools.Tool(harbour_master)})
    settings.LLMCHAT = {
        **settings.LLMCHAT,
        "MCP_SERVERS": {"notes": {"url": "http://127.0.0.1:9/mcp/"}},
    }


def schema_of(client) -> dict:
    return json.loads(client.get(url("schema"), {"format": "json"}).content)


def enums(node, path=""):
    """``(path, enum)`` of every enum under ``node``."""
    if isinstance(node, dict):
        if "enum" in node:
            yield path, node["enum"]
        for key, value in node.items():
            yield from enums(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from enums(value, f"{path}[{index}]")


def test_tool_names_are_open_strings_in_requests_and_answers(api, chat, registered):
    schema = schema_of(api)
    components = schema["components"]["schemas"]
    for name in ("Chat", "ChatRequest", "PatchedChatRequest"):
        item = components[name]["properties"]["tools"]["items"]
        assert "enum" not in item and item["pattern"] == TOOL_NAME_PATTERN, name
        assert item["examples"] == ["harbour_master", "mcp:notes"]
        for example in item["examples"]:
            assert re.fullmatch(TOOL_NAME_PATTERN, example)
    for path, values in enums(schema):
        assert "harbour_master" not in values and "mcp:notes" not in values, path
    # the pattern is the shape; the server still takes registered names alone
    sent = ["harbour_master", "mcp:notes", "mcp:notes/search,read"]
    ok = api.patch(url("chat-detail", pk=chat.pk), {"tools": sent}, format="json")
    assert ok.status_code == 200 and ok.json()["tools"] == sent
    for name in ("tide_times", "mcp:elsewhere"):
        assert re.fullmatch(TOOL_NAME_PATTERN, name)
        refused = api.patch(url("chat-detail", pk=chat.pk), {"tools": [name]}, format="json")
        assert refused.status_code == 400 and "unknown tools" in refused.json()["tools"][0]
    for name in ("", "a b", "x\x00", "mcp:a/b c"):
        assert not re.fullmatch(TOOL_NAME_PATTERN, name)


def test_a_provider_is_an_enum_in_requests_and_a_string_in_answers(api, owner, settings):
    keys = {"api_key": "k"}
    settings.LLMCHAT = {"PROVIDERS": {"anthropic": keys, "openai": keys}}
    assert configured_providers() == ["anthropic", "openai"]
    schema = schema_of(api)
    components = schema["components"]["schemas"]
    answer = components["Chat"]["properties"]["provider"]
    assert answer["type"] == "string" and "enum" not in answer and "allOf" not in answer
    assert answer["examples"] == ["anthropic", "openai"]
    for name in ("ChatRequest", "PatchedChatRequest"):
        ref = components[name]["properties"]["provider"]["allOf"][0]["$ref"]
        assert components[ref.rsplit("/", 1)[1]]["enum"] == ["anthropic", "openai"]
    # a chat whose provider the settings dropped still reads (and validates as a string)
    kept = Chat.objects.create(user=owner, provider="gone", model_id="m")
    assert api.get(url("chat-detail", pk=kept.pk)).json()["provider"] == "gone"


def test_the_history_policy_is_stated_option_by_option(api, chat):
    schema = schema_of(api)
    history = schema["components"]["schemas"]["ChatRequest"]["properties"]["history"]
    strategy, options, null = history["anyOf"]
    assert strategy["enum"] == ["all", "window", "summarize"] and null == {"type": "null"}
    assert options["additionalProperties"] is False
    props = options["properties"]
    assert props["strategy"] == strategy
    assert props["keep"]["exclusiveMinimum"] == 0 and props["keep"]["exclusiveMaximum"] == 1
    assert props["margin"]["minimum"] == 0
    assert "estimator" not in props  # none registered: an estimator is refused
    # a whole number of tokens written as JSON may write it (600.0 is 600)
    body = {"history": {"strategy": "window", "margin": 600.0}}
    ok = api.patch(url("chat-detail", pk=chat.pk), body, format="json")
    assert ok.status_code == 200, ok.content
    chat.refresh_from_db()
    assert chat.history == {"strategy": "window", "margin": 600}
    assert type(chat.history["margin"]) is int
    for bad, field in [
        ({"strategy": None}, "history.strategy"),
        ({"margin": 600.5}, "history.margin"),
        ({"estimator": "fast"}, "history.estimator"),
    ]:
        refused = api.patch(url("chat-detail", pk=chat.pk), {"history": bad}, format="json")
        assert refused.status_code == 400 and field in refused.json(), (bad, refused.content)


@pytest.mark.parametrize("value", ["", "xml", "sse"])
def test_a_format_naming_no_renderer_of_the_route_is_a_400(api, chat, value):
    response = api.get(url("chat-list"), {"format": value})
    assert response.status_code == 400
    assert response.json() == {"format": [f"{value!r} is not a format of this route; one of: json"]}


def test_an_empty_format_is_a_400_where_the_route_streams_too(api, chat):
    messages = url("chat-messages", pk=chat.pk)
    for query in ("?format=", "?format=json&format=", "?format=bogus"):
        response = api.get(messages + query)
        assert response.status_code == 400, query
        assert "one of: json, sse" in response.json()["format"][0]
    assert api.get(messages + "?format=json").status_code == 200
    schema = schema_of(api)
    parameters = schema["paths"]["/api/chats/{id}/messages/"]["get"]["parameters"]
    assert next(p for p in parameters if p["name"] == "format")["schema"]["enum"] == [
        "json",
        "sse",
    ]


def test_what_else_the_schema_states(api, settings):
    settings.LLMCHAT = {**settings.LLMCHAT, "MAX_ATTACHMENTS": 3}
    schema = schema_of(api)
    components = schema["components"]["schemas"]
    assert components["MessageCreateRequest"]["properties"]["attachments"]["maxItems"] == 3
    password = components["CredentialsRequest"]["properties"]["password"]
    assert not re.search(password["pattern"], "pass\x00word")
    ui_id = components["UIChatRequest"]["properties"]["id"]["pattern"]
    assert ui_id == CLIENT_ID_SCHEMA_PATTERN
    for good in ("chat-1", "a.b", ".hidden", "...", "~:_"):
        assert re.fullmatch(ui_id, good), good
    for bad in (".", "..", "", "a/b", "a b", "x" * 256):
        assert not re.fullmatch(ui_id, bad), bad
    streamed = schema["paths"]["/api/chats/{id}/messages/"]["post"]["responses"]["200"]
    assert set(streamed["content"]) == {"text/event-stream", "application/json"}
    retried = streamed["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(components[retried]["properties"]) == {"run"}
    models = schema["paths"]["/api/models/"]["get"]["parameters"]
    for parameter in models:
        if parameter["name"] in ("provider", "family", "search"):
            assert parameter["schema"]["pattern"] == r"^[^\x00]*$"
