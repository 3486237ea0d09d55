"""What CI's own configuration says holds: a route .ci/schemathesis.toml lets answer 400 to a
schema-valid request is refused only for a rule .ci/schemathesis_hooks.py names; a test
that cannot run for want of a tool or a package fails under CI=true instead of skipping."""

from __future__ import annotations

import ast
import importlib.util
import json
import tomllib
from pathlib import Path

import pytest
from django.test import Client

from tests import conftest

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


@pytest.mark.parametrize("ci", [True, False])
def test_a_missing_tool_or_package_fails_under_ci_and_is_skipped_elsewhere(monkeypatch, ci):
    monkeypatch.setattr(conftest, "IN_CI", ci)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match="node is not installed"):
        conftest.unavailable("node is not installed")
    with pytest.raises(outcome, match="no_such_package_"):
        conftest.import_or_unavailable("no_such_package_" + "llmchat")
    assert conftest.import_or_unavailable("json") is json


def _skips_for_a_missing_tool(tree: ast.AST) -> list[int]:
    """Lines of ``pytest.importorskip(...)``, and of ``pytest.skip(...)`` under an ``if``
    testing ``shutil.which`` or an ``except ImportError``: skips CI=true would not fail."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip":
            found.append(node.lineno)
        guarded = (isinstance(node, ast.If) and "which(" in ast.unparse(node.test)) or (
            isinstance(node, ast.ExceptHandler)
            and node.type is not None
            and "ImportError" in ast.unparse(node.type)
        )
        if guarded:
            for inner in node.body:
                for call in ast.walk(inner):
                    if isinstance(call, ast.Call) and ast.unparse(call.func) == "pytest.skip":
                        found.append(call.lineno)
    return found


def test_a_test_skips_for_a_missing_tool_only_through_the_shared_helper():
    """No test module calls ``pytest.importorskip`` or skips itself for a missing program
    or package: tests.conftest's ``unavailable`` / ``import_or_unavailable`` do, so that
    under CI=true the test fails (one helper, not a copy per module)."""
    tests = ROOT / "tests"
    wrong = []
    for path in sorted(tests.rglob("*.py")):
        if "node_modules" in path.parts or path == tests / "conftest.py":
            continue
        source = path.read_text()
        tree = ast.parse(source)
        wrong += [f"{path.relative_to(ROOT)}:{line}" for line in _skips_for_a_missing_tool(tree)]
        wrong += [
            f"{path.relative_to(ROOT)}:{node.lineno}: a copy of unavailable()"
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "unavailable"
        ]
    assert wrong == [], wrong
