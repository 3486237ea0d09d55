"""The wire JSON helpers agree with the standard library."""

import json

import pytest

from django_llmchat.providers._json import dumps, loads


def std(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@pytest.mark.parametrize(
    "value",
    [
        {"model": "gpt-4.1", "input": [{"role": "user", "content": "Grüße, 世界 🌍"}]},
        {"temperature": 0.7, "max_tokens": 100, "stream": True, "stop": None},
        {"nested": {"list": [1, 2.5, "x", False, None, {"k": []}]}},
        {"escapes": 'quote " backslash \\ newline \n tab \t'},
    ],
)
def test_dumps_matches_the_standard_library(value):
    assert json.loads(dumps(value)) == value
    assert dumps(value) == std(value)


def test_dumps_takes_what_only_the_standard_library_encodes():
    big = {"seed": 2**70}
    assert dumps(big) == std(big)
    assert json.loads(dumps({1: "one"})) == {"1": "one"}


def test_loads_accepts_what_vendors_send_and_refuses_what_is_not_json():
    assert loads(b'{"a": NaN}')["a"] != loads(b'{"a": NaN}')["a"]  # NaN, as json reads it
    assert loads('{"t": "ok"}') == {"t": "ok"}
    with pytest.raises(ValueError):
        loads(b"{not json")
