"""schema/ (OpenAPI 3, ``api/schema.py``): the rules it states, rendered and validated,
served as ``manage.py spectacular`` writes it, its patterns ECMA regexes."""

import json

import pytest

from tests.conftest import import_or_unavailable

from .conftest import url

pytestmark = pytest.mark.django_db


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
