"""``StrictJSONParser`` and ``StrictMultiPartParser``: UTF-8 only, no absurd nesting,
no body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (the routes' answers: ``test_refusals.py``)."""

import io

import pytest
from django.core.exceptions import RequestDataTooBig
from django.test import RequestFactory
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.request import Request

from django_llmchat.api.parsers import StrictJSONParser, StrictMultiPartParser


def context(body: bytes, content_type="application/json"):
    raw = RequestFactory().post("/", body, content_type=content_type)
    return {"request": Request(raw)}


def parse(body: bytes, content_type="application/json"):
    return StrictJSONParser().parse(io.BytesIO(body), None, context(body, content_type))


def test_json_in_utf8_parses():
    assert parse('{"t": "café"}'.encode()) == {"t": "café"}
    assert parse(b"{}", "application/json; charset=UTF-8") == {}


@pytest.mark.parametrize("parser", [StrictJSONParser, StrictMultiPartParser])
def test_another_charset_is_a_415_naming_it(parser):
    body = b"{}"
    with pytest.raises(UnsupportedMediaType, match="latin-1"):
        parser().parse(io.BytesIO(body), None, context(body, "application/json; charset=latin-1"))


def test_absurd_nesting_is_a_parse_error():
    with pytest.raises(ParseError, match="nested too deeply"):
        parse(b"[" * 100_000 + b"]" * 100_000)


def test_a_body_over_the_limit_is_refused(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    with pytest.raises(RequestDataTooBig):
        parse(b'{"t": "' + b"x" * 20 + b'"}')
