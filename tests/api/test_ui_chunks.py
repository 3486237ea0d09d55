"""The UI message chunk classes: each encodes as the ``ai`` package's schema declares it
(``type`` first, camelCase fields, optional ones left out when ``None``), and the
schema's ``UI_CHUNKS`` names exactly the chunks and fields the classes have."""

import json
from dataclasses import fields

from django_llmchat.api.event_schemas import UI_CHUNKS
from django_llmchat.api.ui.chunks import (
    CHUNK_TYPES,
    REASONING,
    TEXT,
    SourceUrlChunk,
    StartChunk,
    ToolInputAvailableChunk,
    _camel,
)


def test_encodings():
    assert StartChunk(message_id="run-1").to_dict() == {"type": "start", "messageId": "run-1"}
    assert StartChunk("m", {"chatId": 1}).to_dict() == {
        "type": "start",
        "messageId": "m",
        "messageMetadata": {"chatId": 1},
    }
    assert SourceUrlChunk("source-1", "http://a").to_dict() == {
        "type": "source-url",
        "sourceId": "source-1",
        "url": "http://a",
    }
    # a required field stays, null included (a tool's arguments may be JSON null)
    got = ToolInputAvailableChunk(tool_call_id="c", tool_name="t", input=None).to_dict()
    assert json.dumps(got) == (
        '{"type": "tool-input-available", "toolCallId": "c", "toolName": "t", "input": null}'
    )


def test_text_and_reasoning_parts_are_one_shape():
    for kind in (TEXT, REASONING):
        assert kind.start(id="x").to_dict() == {"type": f"{kind.prefix}-start", "id": "x"}
        assert kind.delta(id="x", delta="d").to_dict() == {
            "type": f"{kind.prefix}-delta",
            "id": "x",
            "delta": "d",
        }
        assert kind.end(id="x").to_dict() == {"type": f"{kind.prefix}-end", "id": "x"}


def test_the_schema_documents_every_chunk_class_and_field():
    assert set(CHUNK_TYPES) == set(UI_CHUNKS)
    for name, cls in CHUNK_TYPES.items():
        required, optional = UI_CHUNKS[name][:2]
        assert {_camel(f.name) for f in fields(cls)} == set(required) | set(optional), name
