"""What CI's own configuration says holds: a route .ci/schemathesis.toml lets answer 400 to a
schema-valid request is refused only for a rule .ci/schemathesis_hooks.py names."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path

from django.test import Client

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / ".ci"


def _hooks_rules() -> dict[str, dict[str, str]]:
    spec = importlib.util.spec_from_file_location(
        "schemathesis_hooks", CI / "schemathesis_hooks.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RULES


def _body_fields(schema: dict, operation: dict) -> set[str]:
    """The top-level fields of an operation's request bodies (every content type)."""
    fields: set[str] = set()
    for content in operation.get("requestBody", {}).get("content", {}).values():
        body = content["schema"]
        while "$ref" in body:
            body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
        fields |= set(body.get("properties", {}))
    return fields


def test_a_route_allowed_a_400_for_a_valid_request_has_a_rule_the_hooks_name():
    """A route listed as refusing schema-valid requests with its 400 has a rule in the
    hooks that can apply to it: one naming the route, or one for any route on a field of
    its request body. A route with none can answer no such 400 the hook would let pass
    (the switch route was listed for a 400 to an unknown message; it answers 404)."""
    config = tomllib.loads((CI / "schemathesis.toml").read_text())
    allowed = [
        name
        for block in config["operations"]
        if "400" in block["checks"]["positive_data_acceptance"]["expected-statuses"]
        for name in block["include-name"]
    ]
    assert allowed, "no route is allowed a 400"
    rules = _hooks_rules()
    schema = json.loads(Client().get("/api/schema/", {"format": "json"}).content)
    for name in allowed:
        method, path = name.split(" ", 1)
        operation = schema["paths"][path][method.lower()]
        fields = _body_fields(schema, operation)
        ruled = [
            field
            for field, by_route in rules.items()
            if name in by_route or ("*" in by_route and field in fields)
        ]
        assert ruled, f"{name}: no rule of .ci/schemathesis_hooks.py can refuse it with a 400"
