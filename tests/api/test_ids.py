"""The string ids clients send (``api/ids.py``): a tool call's id up to its column's
length without control characters, a client-made chat id in a safe ASCII alphabet; the
path converters refuse the rest, which then matches no route (a JSON 404)."""

from __future__ import annotations

import re

import pytest

from django_llmchat.api.ids import (
    CALL_ID_LENGTH,
    CallIdConverter,
    ClientIdConverter,
    is_call_id,
)
from django_llmchat.models import ToolCall


def test_the_call_id_length_is_the_columns():
    assert CALL_ID_LENGTH == ToolCall._meta.get_field("call_id").max_length == 255


@pytest.mark.parametrize(
    "value, ok",
    [
        ("call_1", True),
        ("with space/and slash", True),
        ("x" * 255, True),
        ("x" * 256, False),
        ("", False),
        ("nul\x00", False),
        ("tab\t", False),
        ("c1\x85", False),  # C1 control
        ("del\x7f", False),
        ("émoji 🙂", True),
        (7, False),
        (None, False),
    ],
)
def test_is_call_id(value, ok):
    assert is_call_id(value) is ok


@pytest.mark.parametrize(
    "converter, value, ok",
    [
        (CallIdConverter, "call_1", True),
        (CallIdConverter, "a/b", False),
        (CallIdConverter, "x\x00", False),
        (CallIdConverter, "x" * 256, False),
        (ClientIdConverter, "abc-DEF_1.2:3~", True),
        (ClientIdConverter, "42", True),
        (ClientIdConverter, "a b", False),
        (ClientIdConverter, "é", False),
        (ClientIdConverter, "x" * 256, False),
    ],
)
def test_the_path_converters(converter, value, ok):
    assert (re.fullmatch(converter.regex, value) is not None) is ok
    assert converter().to_python("v") == "v" == converter().to_url("v")


@pytest.mark.django_db
def test_a_refused_call_id_in_a_path_is_the_apis_404(client):
    route = "/api/chats/1/tool-calls/{}/approve/"
    assert client.post(route.format("x" * 255)).status_code in (401, 403)  # a route
    refused = client.post(route.format("x" * 256))
    assert refused.status_code == 404 and refused["Content-Type"] == "application/json"
