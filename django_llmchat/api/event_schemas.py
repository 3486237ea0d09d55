"""OpenAPI schemas of the event streams: one schema per Server-Sent Event type (its
``event:`` name and its JSON ``data:``), and one per chunk of the AI SDK's UI message
stream. :func:`describe_event_streams` (a drf-spectacular postprocessing hook) puts them
on the ``text/event-stream`` responses, so generated clients get a type per event."""

from __future__ import annotations

from typing import Any

__all__ = ["EVENT_PAYLOADS", "UI_CHUNKS", "describe_event_streams"]

_STR = {"type": "string"}
_NULLABLE_STR = {"type": ["string", "null"]}
_INT = {"type": "integer"}
_NULLABLE_INT = {"type": ["integer", "null"]}
_TOKENS = {
    "type": "object",
    "description": "Token counts the provider reported (absent: not reported).",
    "properties": {
        name: _INT
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "thinking_tokens",
        )
    },
}
_USD = {"type": ["string", "null"], "description": "USD, a decimal string (null: no price)."}
_ESTIMATED = {
    "type": "boolean",
    "enum": [True],
    "description": "Present when the tokens and cost are partly our estimate: an attempt "
    "stopped before the vendor reported its counts.",
}


def _object(required: dict[str, Any], optional: dict[str, Any] | None = None, doc: str = ""):
    out: dict[str, Any] = {
        "type": "object",
        "properties": {**required, **(optional or {})},
        "required": list(required),
    }
    if doc:
        out["description"] = doc
    return out


def _event(required: dict[str, Any], optional: dict[str, Any] | None = None, doc: str = ""):
    """An event's payload: its ``role`` (every event has one), then its own keys."""
    return _object({"role": _STR, **required}, optional, doc)


EVENT_PAYLOADS: dict[str, dict[str, Any]] = {
    "text_delta": _event({"content": _STR}, doc="A piece of the reply's text."),
    "text_done": _event({"content": _STR}, doc="The response's whole text."),
    "tool_call_delta": _event(
        {"item_id": _NULLABLE_STR, "arguments_delta": _STR},
        {"name": _STR},
        doc="A fragment of a tool call's JSON arguments.",
    ),
    "tool_call_done": _event(
        {"item_id": _NULLABLE_STR, "call_id": _STR, "name": _STR, "arguments": _STR},
        doc="A complete tool call; `arguments` is JSON text.",
    ),
    "reasoning_delta": _event({"content": _STR}, doc="A piece of reasoning."),
    "reasoning_done": _event(
        {"part": _object({"type": _STR, "text": _STR}, {"format": _STR, "signature": _STR})},
        doc="One block of reasoning.",
    ),
    "web_search_status": _event(
        {"status": _STR}, {"query": _STR, "url": _STR}, doc="Server-side search."
    ),
    "web_search_done": _event(
        {"query": _NULLABLE_STR, "sources": {"type": "array", "items": {"type": "object"}}},
        doc="A server-side search finished.",
    ),
    "guardrail_tripwire": _event(
        {"guardrail_id": _STR, "reason": _NULLABLE_STR, "phase": _STR},
        doc="A guardrail blocked the run.",
    ),
    "guardrail_modification": _event(
        {"guardrail_id": _STR, "phase": _STR, "message_indices": {"type": "array", "items": _INT}},
        doc="A guardrail changed messages.",
    ),
    "skill_activation": _event({"name": _STR}, doc="A skill was activated."),
    "interrupt": _event(
        {"interrupt": {"type": "boolean"}, "reason": _NULLABLE_STR},
        doc="The loop stopped early.",
    ),
    "token_usage_done": _event(
        {"token_usage": _TOKENS}, doc="Token usage of the response that ended."
    ),
    "finish_reason_done": _event(
        {"finish_reason": _STR, "raw_finish_reason": _NULLABLE_STR},
        doc="Why the model stopped.",
    ),
    "tool_approval_request": _event(
        {"call_id": _STR, "name": _STR, "arguments": _STR},
        doc="A tool call waits for approve or deny; the run pauses.",
    ),
    "tool_result_done": _event(
        {
            "call_id": _STR,
            "name": _STR,
            "result": _STR,
            "error_type": _NULLABLE_STR,
            "message_id": _NULLABLE_INT,
        },
        doc="A tool call's result was stored (as message `message_id`).",
    ),
    "step_finished": _event(
        {
            "message_id": _NULLABLE_INT,
            "step": _INT,
            "finish_reason": _STR,
            "token_usage": _TOKENS,
            "cost": _USD,
        },
        {"estimated": _ESTIMATED, "provider": _STR, "model_id": _STR},
        doc="A step was stored as message `message_id`, with its tokens and USD cost; "
        "`provider` and `model_id` name the model that answered (a fallback's, when the "
        "chat's own model failed).",
    ),
    "run_started": _event(
        {"run_id": _STR}, {"message_id": _INT}, doc="A run began (or was taken over)."
    ),
    "run_finished": _event(
        {"run_id": _STR, "status": _STR},
        {
            "error": _STR,
            "error_type": _STR,
            "message_id": _INT,
            "token_usage": _TOKENS,
            "cost": _STR,
            "estimated": _ESTIMATED,
        },
        doc="A run ended, with its totals (and its safe error and its type).",
    ),
    "budget_warning": _event(
        {"limit": _STR, "used": _STR, "allowed": _STR, "resets_at": _NULLABLE_STR},
        doc="The user passed the soft fraction of a spending limit (the run goes on).",
    ),
    "context_compacted": _event(
        {
            "message_id": _NULLABLE_INT,
            "summary_until": _NULLABLE_INT,
            "messages": _INT,
            "tokens_before": _NULLABLE_INT,
            "tokens_after": _NULLABLE_INT,
        },
        doc="Before a step, the history was compacted into the stored summary `message_id`.",
    ),
    "error": _object(
        {"type": _STR, "message": _STR},
        {"status": _INT},
        doc="The run failed: a message safe to show (run_finished follows).",
    ),
}

_TOOL_ID = {"toolCallId": _STR}
UI_CHUNKS: dict[str, dict[str, Any]] = {
    "start": ({}, {"messageId": _STR, "messageMetadata": {"type": "object"}}),
    "start-step": ({}, {}),
    "finish-step": ({}, {}),
    "text-start": ({"id": _STR}, {}),
    "text-delta": ({"id": _STR, "delta": _STR}, {}),
    "text-end": ({"id": _STR}, {}),
    "reasoning-start": ({"id": _STR}, {}),
    "reasoning-delta": ({"id": _STR, "delta": _STR}, {}),
    "reasoning-end": ({"id": _STR}, {}),
    "tool-input-start": ({**_TOOL_ID, "toolName": _STR}, {}),
    "tool-input-delta": ({**_TOOL_ID, "inputTextDelta": _STR}, {}),
    "tool-input-available": ({**_TOOL_ID, "toolName": _STR, "input": {}}, {}),
    "tool-approval-request": ({**_TOOL_ID, "approvalId": _STR}, {}),
    "tool-output-available": ({**_TOOL_ID, "output": {}}, {}),
    "tool-output-error": ({**_TOOL_ID, "errorText": _STR}, {}),
    "tool-output-denied": (dict(_TOOL_ID), {}),
    "source-url": ({"sourceId": _STR, "url": _STR}, {"title": _STR}),
    "message-metadata": ({"messageMetadata": {"type": "object"}}, {}),
    "finish": (
        {},
        {
            "finishReason": {
                "enum": ["stop", "length", "content-filter", "tool-calls", "error", "other"]
            },
            "messageMetadata": {"type": "object"},
        },
    ),
    "error": ({"errorText": _STR}, {}),
    "abort": ({}, {"reason": _STR}),
}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_"))


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _components() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The components, the native stream's event schema and the UI stream's."""
    components: dict[str, Any] = {}
    frames = []
    for event, payload in EVENT_PAYLOADS.items():
        data_name, frame_name = f"{_camel(event)}Payload", f"{_camel(event)}Event"
        components[data_name] = payload
        components[frame_name] = {
            "type": "object",
            "description": f"`event: {event}`: {payload.get('description', '')}",
            "properties": {
                "event": {"const": event},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": _ref(data_name),
                },
                "id": {"type": "string", "description": "Resume after it with Last-Event-ID."},
            },
            "required": ["event", "data"],
        }
        frames.append(_ref(frame_name))
    components["StreamEvent"] = {
        "description": "One Server-Sent Event of a run: its `event:` name and JSON `data:`.",
        "oneOf": frames,
    }
    chunks = []
    for kind, (required, optional) in UI_CHUNKS.items():
        name = f"UI{_camel(kind)}Chunk"
        components[name] = _object({"type": {"const": kind}, **required}, optional)
        chunks.append(_ref(name))
    components["UIMessageChunk"] = {
        "description": "A chunk of the AI SDK's UI message stream (protocol v1).",
        "oneOf": chunks,
    }
    components["UIStreamFrame"] = {
        "type": "object",
        "description": "One frame of the UI message stream: a chunk, or `[DONE]` last.",
        "properties": {
            "event": {"const": "message"},
            "data": {
                "anyOf": [
                    {"const": "[DONE]"},
                    {
                        "type": "string",
                        "pattern": "^\\{",
                        "contentMediaType": "application/json",
                        "contentSchema": _ref("UIMessageChunk"),
                    },
                ]
            },
        },
        "required": ["data"],
    }
    return components, _ref("StreamEvent"), _ref("UIStreamFrame")


def _streams(path: str, method: str) -> bool:
    """Whether the operation answers with an event stream (its ``200``)."""
    if method == "get":
        return path.endswith(("/events/", "/stream"))
    return method == "post" and path.endswith(("/messages/", "/approve/", "/deny/", "/ui/chat"))


def describe_event_streams(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Every ``text/event-stream`` response: its events, one schema per event type."""
    components, native, ui = _components()
    used = False
    for path, operations in result.get("paths", {}).items():
        is_ui = "/ui/chat" in path
        for method, operation in operations.items():
            streams = _streams(path, method)
            for code, response in (operation.get("responses") or {}).items():
                content = response.get("content") or {}
                if "text/event-stream" not in content:
                    continue
                if streams and code == "200":
                    content["text/event-stream"] = {"schema": ui if is_ui else native}
                    used = True
                else:  # errors and plain answers are JSON, whatever was asked for
                    del content["text/event-stream"]
    if used:
        result.setdefault("components", {}).setdefault("schemas", {}).update(components)
    return result
