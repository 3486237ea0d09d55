"""OpenAPI 3 schema settings (drf-spectacular) for the ``schema/`` endpoint."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema

__all__ = [
    "SCHEMA_SETTINGS",
    "closed_request_bodies",
    "describe_path_parameters",
    "document",
    "document_refusals",
    "nullable_31",
    "only_llmchat_endpoints",
]


def document(**kwargs: Any):
    """``extend_schema`` based on drf-spectacular's ``AutoSchema`` whatever the project's
    ``REST_FRAMEWORK["DEFAULT_SCHEMA_CLASS"]`` is (the API's views carry their own)."""

    def decorate(func):
        if getattr(func, "schema", None) is None and "schema" not in getattr(func, "kwargs", {}):
            func.schema = AutoSchema
        return extend_schema(**kwargs)(func)

    return decorate


def only_llmchat_endpoints(endpoints: list[tuple], **kwargs: Any) -> list[tuple]:
    """Keep this app's endpoints: the project's other DRF views are not part of it."""
    out = []
    for endpoint in endpoints:
        callback = endpoint[3]
        cls = getattr(callback, "cls", None)
        if cls is not None and cls.__module__.startswith("django_llmchat.api"):
            out.append(endpoint)
    return out


def closed_request_bodies(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Request bodies accept their listed fields only (an unknown field is a 400)."""
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith("Request") and component.get("type") == "object":
            component["additionalProperties"] = False
    return result


def ui_chat_request_rules(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """``POST ui/chat`` needs the new message: ``message``, or ``messages`` holding at least
    it, unless the request regenerates (``UIChatSerializer.validate``)."""
    component = result.get("components", {}).get("schemas", {}).get("UIChatRequest")
    if component is not None:
        component["anyOf"] = [
            {"required": ["message"]},
            {"required": ["messages"], "properties": {"messages": {"minItems": 1}}},
            {"required": ["trigger"], "properties": {"trigger": {"const": "regenerate-message"}}},
        ]
    return result


_PATH_PARAMETERS = {
    ("chats", "id"): "The chat's id.",
    ("chats", "call_id"): "The tool call's id, as the provider gave it.",
    ("chats", "message_id"): "The message's id (an assistant reply of the chat).",
    ("chats", "token"): "The share link's token (the last part of its `url`).",
    ("models", "id"): "The registry row's id.",
    ("runs", "id"): "The run's id.",
    ("ui", "id"): "The chat's id, or the id its client made for it (`POST ui/chat`).",
}


def describe_path_parameters(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Say what each path parameter is (the views' querysets cannot tell)."""
    for path, operations in result.get("paths", {}).items():
        kind = next((k for k in ("models", "runs", "ui") if f"/{k}/" in path), "chats")
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                text = _PATH_PARAMETERS.get((kind, parameter["name"]))
                if parameter.get("in") == "path" and text:
                    parameter["description"] = text
    return result


def nullable_31(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """OpenAPI 3.1 nullables everywhere: ``nullable: true`` left by 3.0-style schemas
    becomes a ``"null"`` type, and ``oneOf: [{}, {"type": "null"}]`` (any value, null
    included, matches both) becomes ``{}``."""

    def fix(node: Any) -> Any:
        if isinstance(node, list):
            return [fix(item) for item in node]
        if not isinstance(node, dict):
            return node
        node = {key: fix(value) for key, value in node.items()}
        if node.pop("nullable", False) is True and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        choices = node.get("oneOf")
        if isinstance(choices, list) and len(choices) == 2 and {} in choices:
            if {"type": "null"} in choices:
                del node["oneOf"]
        return node

    return fix(result)


_ERROR = {"$ref": "#/components/schemas/Error"}
_TEXT = {"type": "string", "description": "The refusal's message."}
_REFUSALS = {
    "401": "Not authenticated (no or a wrong token).",
    "403": "Not allowed (e.g. a CSRF failure with session authentication).",
    "429": "Too many requests (a throttle rate), or a budget over its limit.",
}


def document_refusals(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """The refusals every route may answer, documented on each: ``401``, ``403``,
    ``429``, ``413`` and ``415`` where a body is read, ``404`` for a path id; errors are
    JSON, and also plain text on an operation marked ``x-llmchat-text-refusals`` (the AI
    SDK transport's routes)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = {
        "type": "object",
        "description": 'A refusal: `{"detail": <message>, "code": <code>}`, or '
        '`{"<field>": ["<reason>", ...]}` for invalid input.',
        "properties": {"detail": {"type": "string"}, "code": {"type": "string"}},
        "additionalProperties": True,
    }
    for path, operations in result.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            refusals = dict(_REFUSALS)
            if path.endswith("/auth/token/"):
                refusals.pop("401")
                refusals.pop("403")
            if "requestBody" in operation:
                refusals["413"] = "The request body is too large."
                refusals["415"] = (
                    "The body's media type is not one the route reads, or its charset is not UTF-8."
                )
            if "requestBody" in operation or any(
                p.get("in") == "query" for p in operation.get("parameters", [])
            ):
                refusals["400"] = "Invalid input: the field and the reason."
            if "{" in path:
                refusals["404"] = "No such object (or not yours)."
            elif any(p.get("name") == "page" for p in operation.get("parameters", [])):
                refusals["404"] = "No such page."
            for code, text in refusals.items():
                responses.setdefault(
                    code, {"description": text, "content": {"application/json": {"schema": _ERROR}}}
                )
            as_text = operation.pop("x-llmchat-text-refusals", False)
            for code, response in responses.items():
                content = response.get("content") or {}
                if code >= "400" and "application/json" in content:
                    content["application/json"] = {"schema": _ERROR}
                if code >= "400" and as_text:
                    response["content"] = {"text/plain": {"schema": _TEXT}, **content}
    return result


from .schema_settings import SCHEMA_SETTINGS  # noqa: E402 - re-exported

# Names a project registers or configures (tools, providers, history processors) are
# open strings in answers: a name added after a client was generated (a new tool, an
# ``mcp:`` server, a provider) must not make that client refuse the chat holding it.
# Request bodies list the names a setting fixes (providers, strategies, estimators) as
# enums: adding one breaks no client, which simply cannot send it before regenerating.
# Tool names are strings both ways (a pattern and examples): they come from code and
# ``LLMCHAT["MCP_SERVERS"]``, and a chat read back is sent again as it is (``PUT``).

TOOL_NAME_PATTERN = (
    r"^(mcp:[^/\s\x00]+(/[A-Za-z0-9_.-]{1,128}(,[A-Za-z0-9_.-]{1,128})*)?|[^:\s\x00]+)$"
)


def tool_name_schema() -> dict[str, Any]:
    """A tool name: a registered tool's, or ``mcp:<server>`` (``mcp:<server>/<tool>,...``)
    of a configured MCP server; the names known now are the examples."""
    from ..conf import settings
    from ..tools import registered_tools

    examples = sorted(registered_tools())[:8]
    examples += [f"mcp:{name}" for name in sorted(settings.MCP_SERVERS or {})[:4]]
    schema: dict[str, Any] = {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "pattern": TOOL_NAME_PATTERN,
        "description": "A registered tool's name, or `mcp:<server>` (`mcp:<server>/<tool>,"
        '<tool>`) of a server in `LLMCHAT["MCP_SERVERS"]`. An open string: a tool '
        "registered later is no change of the schema.",
    }
    if examples:
        schema["examples"] = examples
    return schema


class ProviderFieldSchema(OpenApiSerializerFieldExtension):
    """A provider's name: in a request, one of the configured providers (an enum read when
    the schema is generated); in an answer, a string (a chat keeps its provider when the
    settings drop it, and a provider added later must not break a client)."""

    target_class = "django_llmchat.api.fields.ProviderField"

    def map_serializer_field(self, auto_schema, direction):
        from ..inputs import configured_providers

        names = configured_providers()
        if direction == "response":
            out: dict[str, Any] = {"type": "string"}
            if names:
                out["examples"] = names[:8]
            return out
        # an empty enum is not valid OpenAPI: with nothing configured, no chat validates
        return {"type": "string", "enum": names} if names else {"type": "string"}


class ToolNameFieldSchema(OpenApiSerializerFieldExtension):
    """A tool name, in requests and answers alike: :func:`tool_name_schema`."""

    target_class = "django_llmchat.api.fields.ToolNameField"

    def map_serializer_field(self, auto_schema, direction):
        return tool_name_schema()


_NO_NUL = "^[^\\u0000]*$"  # JSON columns store no NUL (PostgreSQL)


class HistoryPolicyFieldSchema(OpenApiSerializerFieldExtension):
    """A chat's history policy. In a request: ``null``, a strategy (the built-in ones and
    ``LLMCHAT["HISTORY_PROCESSORS"]``'s names) or an object of the options
    (:data:`django_llmchat.loop.history_policy.OPTION_KEYS`), each with its type, range and
    enum (a summary provider is a configured one, an estimator a name of
    ``LLMCHAT["TOKEN_ESTIMATORS"]``). In an answer: what the chat holds (code may set any
    policy)."""

    target_class = "django_llmchat.api.fields.HistoryPolicyField"

    def map_serializer_field(self, auto_schema, direction):
        if direction == "response":
            return {}
        from ..inputs import configured_providers
        from ..loop.history_policy import STRATEGIES, registered_estimators, registered_processors

        strategies = [*STRATEGIES, *sorted(registered_processors())]
        strategy = {"type": "string", "enum": strategies}
        text = {"type": ["string", "null"], "minLength": 1, "pattern": _NO_NUL}
        tokens = {"type": ["integer", "null"], "minimum": 0}
        options: dict[str, Any] = {
            "strategy": strategy,
            "margin": tokens,
            "keep": {"type": ["number", "null"], "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "summary_model": text,
            "summary_prompt": text,
            "summary_max_tokens": tokens,
        }
        providers = configured_providers()
        if providers:
            options["summary_provider"] = {"type": ["string", "null"], "enum": [*providers, None]}
        estimators = sorted(registered_estimators())
        if estimators:
            options["estimator"] = {"type": ["string", "null"], "enum": [*estimators, None]}
        return {
            "anyOf": [  # null is added by the field's allow_null
                strategy,
                {"type": "object", "properties": options, "additionalProperties": False},
            ]
        }


class AttachmentsFieldSchema(OpenApiSerializerFieldExtension):
    """A message's files: at most ``LLMCHAT["MAX_ATTACHMENTS"]`` (read when the schema is
    generated)."""

    target_class = "django_llmchat.api.message_serializers._AttachmentsField"

    def map_serializer_field(self, auto_schema, direction):
        from ..conf import settings

        schema: dict[str, Any] = {"type": "array", "items": {"type": "string", "format": "binary"}}
        if settings.MAX_ATTACHMENTS is not None:
            schema["maxItems"] = settings.MAX_ATTACHMENTS
        return schema
