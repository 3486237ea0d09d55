"""The schema documents every event the streams send: one schema per event type, checked
against real frames."""

import json

import pytest
from jsonschema import Draft202012Validator

from django_llmchat import events
from django_llmchat.api.event_schemas import EVENT_PAYLOADS, UI_CHUNKS
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as ScriptedCall

from .conftest import sse_frames, url
from .test_views_runs import api_lookup, api_transfer

pytestmark = pytest.mark.django_db


def test_every_event_type_has_a_schema():
    registered = {cls.type for cls in events.StreamEvent.__subclasses__()}
    assert registered - set(EVENT_PAYLOADS) == set()
    for schema in EVENT_PAYLOADS.values():
        Draft202012Validator.check_schema(schema)


def _check(frames):
    seen = set()
    for frame in frames:
        schema = EVENT_PAYLOADS[frame["event"]]
        errors = list(Draft202012Validator(schema).iter_errors(frame["data"]))
        assert not errors, (frame, [e.message for e in errors])
        seen.add(frame["event"])
    return seen


def test_real_frames_match_their_schemas(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_lookup, api_transfer)
    fake_llm.script(
        Reply(
            "Looking.",
            thinking="I should look it up.",
            tool_calls=[ScriptedCall("api_lookup", {"city": "Paris"}, call_id="c1")],
        ),
        Reply(tool_calls=[ScriptedCall("api_transfer", {"amount": 1}, call_id="c2")]),
    )
    response = api.post(
        url("chat-messages", pk=chat.pk),
        {"content": "Go"},
        format="json",
        HTTP_ACCEPT="text/event-stream",
    )
    seen = _check(sse_frames(b"".join(response.streaming_content).decode()))
    assert {
        "run_started",
        "text_delta",
        "tool_call_done",
        "step_finished",
        "tool_result_done",
        "tool_approval_request",
        "run_finished",
    } <= seen


def test_real_ui_chunks_match_their_schemas(api, chat, fake_llm):
    from django_llmchat.api.event_schemas import _components

    components, _, _ = _components()
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_lookup)
    fake_llm.script(
        Reply(tool_calls=[ScriptedCall("api_lookup", {"city": "Oslo"}, call_id="c1")]),
        Reply("Done.", thinking="Easy."),
    )
    body = {
        "id": str(chat.pk),
        "trigger": "submit-message",
        "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "Oslo?"}]}],
    }
    response = api.post(url("ui-chat"), body, format="json")
    blocks = [b[6:] for b in b"".join(response.streaming_content).decode().split("\n\n") if b]
    assert blocks[-1] == "[DONE]"
    kinds = set()
    for block in blocks[:-1]:
        item = json.loads(block)
        kinds.add(item["type"])
        schema = components[f"UI{''.join(p.capitalize() for p in item['type'].split('-'))}Chunk"]
        errors = list(Draft202012Validator(schema).iter_errors(item))
        assert not errors, (item, [e.message for e in errors])
    assert kinds <= set(UI_CHUNKS)
    assert {"start", "tool-input-available", "tool-output-available", "finish"} <= kinds
