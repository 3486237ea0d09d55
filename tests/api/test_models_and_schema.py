"""models/ (the registry, with filters), schema/ (OpenAPI 3), throttling and CSRF."""

import json

import pytest
from django.core.cache import cache
from django.test import Client

from django_llmchat.models import LLMModel
from tests.conftest import import_or_unavailable

from .conftest import url

pytestmark = pytest.mark.django_db


@pytest.fixture
def registry():
    rows = [
        ("openai", "gpt-4.1", "GPT-4.1", "gpt-4.1", 1_047_576, ["streaming", "tools", "vision"]),
        ("openai", "gpt-4.1-mini", "GPT-4.1 mini", "gpt-4.1", 1_047_576, ["streaming", "tools"]),
        (
            "anthropic",
            "claude-haiku-4-5",
            "Claude Haiku 4.5",
            "claude-haiku",
            200_000,
            ["tools", "vision", "thinking"],
        ),
        ("gemini", "gemini-2.5-flash", "Gemini 2.5 Flash", "gemini-2.5", 1_048_576, ["streaming"]),
    ]
    return [
        LLMModel.objects.create(
            provider=p, model_id=m, name=n, family=f, context_window=c, capabilities=caps
        )
        for p, m, n, f, c, caps in rows
    ]


def ids(response):
    assert response.status_code == 200, response.content
    return [row["model_id"] for row in response.json()["results"]]


def test_models_list_and_filters(api, registry):
    assert ids(api.get(url("model-list"))) == [
        "claude-haiku-4-5",
        "gemini-2.5-flash",
        "gpt-4.1",
        "gpt-4.1-mini",
    ]
    assert ids(api.get(url("model-list"), {"provider": "openai"})) == ["gpt-4.1", "gpt-4.1-mini"]
    assert ids(api.get(url("model-list"), {"family": "claude-haiku"})) == ["claude-haiku-4-5"]
    assert ids(api.get(url("model-list"), {"capability": "vision"})) == [
        "claude-haiku-4-5",
        "gpt-4.1",
    ]
    assert ids(api.get(url("model-list") + "?capability=vision&capability=streaming")) == [
        "gpt-4.1"
    ]
    assert ids(api.get(url("model-list"), {"search": "4.1-MINI"})) == ["gpt-4.1-mini"]
    assert ids(api.get(url("model-list"), {"search": "flash"})) == ["gemini-2.5-flash"]
    assert ids(
        api.get(url("model-list"), {"min_context_window": 1_000_000, "provider": "gemini"})
    ) == ["gemini-2.5-flash"]
    assert ids(api.get(url("model-list"), {"provider": "nope"})) == []
    row = api.get(url("model-detail", pk=registry[0].pk)).json()
    assert row["capabilities"] == ["streaming", "tools", "vision"]
    assert api.get(url("model-detail", pk=10**6)).status_code == 404


@pytest.mark.parametrize(
    "params",
    [
        {"capability": 'tools"]'},
        {"capability": "%"},
        {"min_context_window": "abc"},
        {"min_context_window": "NaN"},
        {"search": "a\x00"},
        {"page": "abc"},
        {"page": "999999999999999999999"},
    ],
)
def test_bad_model_filters_are_4xx(api, registry, params):
    response = api.get(url("model-list"), params)
    assert 400 <= response.status_code < 500, response.content


@pytest.mark.parametrize(
    "params",
    [
        {"capability": ""},
        {"min_context_window": "0.5"},
        {"page_size": "null"},
        {"page_size": "0"},
        {"page_size": "501"},
        {"page_size": "-1"},
    ],
)
def test_model_list_inputs_the_schema_refuses_are_400s(api, registry, params):
    response = api.get(url("model-list"), params)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [next(iter(params))]


@pytest.mark.parametrize(
    "params",
    [
        {"page": "\u0661"},  # Arabic-Indic 1: int() reads it, the schema's integer does not
        {"page": "\uff11"},  # full-width 1
        {"page": "0"},
        {"page": "-1"},
        {"page": "abc"},
        {"min_context_window": "\u0663"},
        {"min_context_window": "\uff13"},
        {"min_context_window": "3.0"},
        {"capability": "tools\n"},
    ],
)
def test_numbers_are_ascii_digits_and_names_whole(api, registry, params):
    response = api.get(url("model-list"), params)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [next(iter(params))]


def test_pages_by_number(api, registry):
    assert len(ids(api.get(url("model-list"), {"page": "1", "page_size": "3"}))) == 3
    assert len(ids(api.get(url("model-list"), {"page": "2", "page_size": "3"}))) == 1
    assert len(ids(api.get(url("model-list"), {"page": "last", "page_size": "3"}))) == 1
    assert api.get(url("model-list"), {"page": "3", "page_size": "3"}).status_code == 404
    wide = ids(api.get(url("model-list"), {"min_context_window": " 1048576 "}))
    assert wide == ["gemini-2.5-flash"]


def test_model_list_page_size_in_range(api, registry):
    body = api.get(url("model-list"), {"page_size": "2"}).json()
    assert len(body["results"]) == 2 and body["next"]


def test_schema_states_the_rules_it_can(clients):
    schema = json.loads(clients.anon.get(url("schema"), {"format": "json"}).content)
    models = {p["name"]: p for p in schema["paths"]["/api/models/"]["get"]["parameters"]}
    assert models["page_size"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 500}
    assert models["capability"]["schema"]["pattern"] == "^[A-Za-z0-9_.:-]{1,64}$"
    assert models["min_context_window"]["schema"]["type"] == "integer"
    chats = {p["name"]: p for p in schema["paths"]["/api/chats/"]["get"]["parameters"]}
    assert chats["cursor"]["schema"]["pattern"] == r"^b?p?[0-9]{1,17}\.[0-9]{1,18}$"
    body = schema["paths"]["/api/chats/{id}/messages/"]["post"]["requestBody"]["content"]
    json_body = body["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(schema["components"]["schemas"][json_body]["properties"]) == {
        "content",
        "parent",
        "double_texting",
    }
    multipart = body["multipart/form-data"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert "attachments" in schema["components"]["schemas"][multipart]["properties"]
    # ui/chat: the new message is required unless regenerating; no system messages
    ui_chat = schema["components"]["schemas"]["UIChatRequest"]
    assert {"required": ["message"]} in ui_chat["anyOf"]
    assert {"required": ["messages"], "properties": {"messages": {"minItems": 1}}} in (
        ui_chat["anyOf"]
    )
    role = schema["components"]["schemas"]["UIMessageRequest"]["properties"]["role"]
    assert schema["components"]["schemas"][role["$ref"].rsplit("/", 1)[1]]["enum"] == [
        "user",
        "assistant",
    ]
    # a 400 for requests the schema allows is said on the route
    for path, method in [
        ("/api/chats/", "post"),
        ("/api/auth/token/", "post"),
        ("/api/ui/chat", "post"),
        ("/api/chats/{id}/messages/{message_id}/feedback/", "post"),
    ]:
        text = schema["paths"][path][method]["responses"]["400"]["description"]
        assert "although the schema allows them" in text, (path, method)
    # a switch to a message the chat's tree lacks is a 404: its 400 is for invalid bodies
    switch = schema["paths"]["/api/chats/{id}/switch/"]["post"]["responses"]
    assert "although the schema allows them" not in switch["400"]["description"]
    assert "404" in switch


def test_huge_numbers_in_filters(api, registry):
    assert ids(api.get(url("model-list"), {"min_context_window": "9" * 40})) == []


def test_schema_renders_and_validates():
    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.settings import patched_settings

    from django_llmchat.api.schema import SCHEMA_SETTINGS

    GENERATOR_STATS.reset()
    with patched_settings(SCHEMA_SETTINGS):
        schema = SchemaGenerator().get_schema(request=None, public=True)
    # --fail-on-warn semantics: no warning, no error while generating
    assert not GENERATOR_STATS._warn_cache and not GENERATOR_STATS._error_cache
    assert set(schema["paths"]) == {
        "/api/chats/",
        "/api/chats/{id}/",
        "/api/chats/{id}/cancel/",
        "/api/chats/{id}/switch/",
        "/api/chats/{id}/fork/",
        "/api/chats/{id}/share/",
        "/api/shared/{token}/",
        "/api/chats/{id}/events/",
        "/api/chats/{id}/messages/",
        "/api/chats/{id}/messages/{message_id}/feedback/",
        "/api/chats/{id}/tool-calls/{call_id}/approve/",
        "/api/chats/{id}/tool-calls/{call_id}/deny/",
        "/api/chats/{id}/usage/",
        "/api/chats/{id}/runs/",
        "/api/runs/{id}/",
        "/api/models/",
        "/api/models/{id}/",
        "/api/auth/token/",
        "/api/ui/chat",
        "/api/ui/chat/{id}/stream",
        "/api/ui/chat/{id}/messages",
        "/api/ui/chat/{id}/stop",
    }
    events = schema["paths"]["/api/chats/{id}/events/"]["get"]["responses"]["200"]["content"]
    assert list(events) == ["text/event-stream"]
    post = schema["paths"]["/api/chats/{id}/messages/"]["post"]
    assert "text/event-stream" in post["responses"]["200"]["content"]
    assert list(post["responses"]["202"]["content"]) == ["application/json"]
    assert set(post["requestBody"]["content"]) == {"application/json", "multipart/form-data"}

    openapi_spec_validator = import_or_unavailable("openapi_spec_validator")
    openapi_spec_validator.validate(json.loads(json.dumps(schema, default=str)))


def test_schema_endpoint(clients):
    response = clients.anon.get(url("schema"), {"format": "json"})
    assert response.status_code == 200
    body = json.loads(response.content)
    assert body["openapi"].startswith("3.")
    assert body["info"]["title"] == "django-llmchat API"


def test_scoped_throttle(api, chat, settings):
    cache.clear()
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"llmchat": "3/min"}}
    codes = [api.get(url("chat-detail", pk=chat.pk)).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    cache.clear()


def test_runs_throttle_only_counts_runs(api, chat, settings):
    cache.clear()
    settings.REST_FRAMEWORK = {"DEFAULT_THROTTLE_RATES": {"llmchat_runs": "1/min"}}
    assert (
        api.post(url("chat-messages", pk=chat.pk), {"content": "a"}, format="json").status_code
        == 202
    )
    assert (
        api.post(url("chat-messages", pk=chat.pk), {"content": "a"}, format="json").status_code
        == 429
    )
    assert api.get(url("chat-messages", pk=chat.pk)).status_code == 200
    cache.clear()


def test_session_auth_enforces_csrf(owner, chat):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert client.get(url("chat-detail", pk=chat.pk)).status_code == 200
    refused = client.patch(
        url("chat-detail", pk=chat.pk), {"title": "x"}, content_type="application/json"
    )
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    client.get("/admin/login/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    ok = client.patch(
        url("chat-detail", pk=chat.pk),
        {"title": "x"},
        content_type="application/json",
        HTTP_X_CSRFTOKEN=token,
    )
    assert ok.status_code == 200


def test_project_authentication_classes_win(owner, chat, settings):
    settings.REST_FRAMEWORK = {
        "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.BasicAuthentication"]
    }
    import base64

    basic = "Basic " + base64.b64encode(b"owner:pw").decode()
    response = Client().get(url("chat-detail", pk=chat.pk), HTTP_AUTHORIZATION=basic)
    assert response.status_code == 200
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=owner).key
    response = Client().get(url("chat-detail", pk=chat.pk), HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 401


@pytest.mark.django_db
def test_manage_py_spectacular_writes_the_served_schema(client, tmp_path):
    import json

    from django.core.management import call_command

    target = tmp_path / "schema.json"
    call_command(
        "spectacular",
        "--custom-settings",
        "django_llmchat.api.schema_settings.SCHEMA_SETTINGS",
        "--format",
        "openapi-json",
        "--file",
        str(target),
    )
    served = client.get("/api/schema/?format=json").json()
    assert json.loads(target.read_text()) == served


def test_every_pattern_of_the_schema_is_an_ecma_regex(clients):
    """A ``pattern`` JSON Schema validators cannot read (ECMA-262: no ``\\ud800`` escapes of
    lone surrogates) is ignored by them: the rule would not be stated at all."""
    import jsonschema_rs

    schema = json.loads(clients.anon.get(url("schema"), {"format": "json"}).content)
    patterns: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.append(node["pattern"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert patterns
    for pattern in set(patterns):
        jsonschema_rs.validator_for({"type": "string", "pattern": pattern})  # raises if not
