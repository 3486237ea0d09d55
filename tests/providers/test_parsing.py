"""The providers' response builders (``providers/parsing.py``): an answer that is not JSON is a
provider error; a one-argument parse_response still works."""

from __future__ import annotations

import httpx
import pytest

from django_llmchat.errors import (
    ProviderError,
)
from django_llmchat.providers.types import ProviderResponse

from .test_base import REQUEST, EchoProvider, echo


def test_invalid_json_answer_is_a_provider_error():
    provider, sent, waits = echo(httpx.Response(200, text="<html>proxy</html>"))
    with pytest.raises(ProviderError, match="not JSON") as info:
        provider.complete(REQUEST)
    assert info.value.status == 200 and not info.value.retryable


def test_a_one_argument_parse_response_still_works_with_a_warning():
    with pytest.warns(DeprecationWarning, match=r"parse_response\(data, request\)"):

        class OldEcho(EchoProvider):
            def parse_response(self, data):
                return ProviderResponse(content=data["text"].upper())

    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"text": "hi"}))
    provider = OldEcho(api_key="k", base_url="http://echo.test", transport=transport)
    assert provider.complete(REQUEST).content == "HI"
