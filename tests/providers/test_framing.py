"""The SSE decoder's one-event fast path agrees with the general line machinery."""

import pytest

from django_llmchat.providers.framing import SSEDecoder

CASES = [
    "data: {}\n\n",
    "data:{}\n\n",
    'event: content_block_delta\ndata: {"a":1}\n\n',
    "event:x\ndata: y\n\n",
    'data: {"a":1}\r\n\r\n',
    'event: e\r\ndata: {"a":1}\r\n\r\n',
    "data: a\ndata: b\n\n",  # two data lines: joined with a newline
    "data: a\rb\n\n",  # a lone CR ends a line
    ": ping\n\n",
    "id: 3\ndata: x\n\n",
    "event: e\n\n",  # no data: no event
    "data: x\n",  # not finished
]


def general(chunks):
    decoder = SSEDecoder()
    out = []
    for chunk in chunks:
        out += decoder._lines(decoder._split(chunk))
    return out


@pytest.mark.parametrize("text", CASES)
def test_fast_path_matches_line_decoding(text):
    fast = SSEDecoder().feed(text.encode())
    assert fast == general([text])


def test_split_utf8_character_across_chunks():
    decoder = SSEDecoder()
    raw = 'data: {"t":"é"}\n\n'.encode()
    cut = raw.index("é".encode()) + 1
    assert decoder.feed(raw[:cut]) == []
    assert decoder.feed(raw[cut:]) == [(None, '{"t":"é"}')]


def test_event_split_across_chunks():
    decoder = SSEDecoder()
    assert decoder.feed(b"event: a\nda") == []
    assert decoder.feed(b"ta: 1\n\ndata: 2\n\n") == [("a", "1"), (None, "2")]


@pytest.mark.parametrize(
    "text",
    [
        "event: a\r\ndata: 1\r\n\r\n",
        "event: a\ndata: 1\r\n\r\n",  # mixed endings
        "event: a\r\ndata: 1\n\n",
        "data: 1\r\n\n",
        "data: 1\r\r\n\n",
        "event: a\n\n",
        "event: a\ndata: 1\ndata: 2\n\n",
    ],
)
def test_fast_path_mixed_line_endings(text):
    assert SSEDecoder().feed(text.encode()) == general([text])


@pytest.mark.parametrize(
    "text, expected",
    [
        ('data: {"a":1}\r\n\r\n', [(None, '{"a":1}')]),
        ("event: e\r\ndata: 1\r\n\r\n", [("e", "1")]),
        ("event: e\ndata: 1\n\n", [("e", "1")]),
        ("data: x\n\n", [(None, "x")]),
    ],
)
def test_fast_path_is_taken_for_single_events(text, expected):
    assert SSEDecoder._one_event(text) == expected
