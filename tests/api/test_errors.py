"""``as_text`` and ``wants_json`` of ``django_llmchat.api.errors``: a refusal as the
sentences a person reads, for the AI SDK's transport."""

import pytest
from django.test import RequestFactory

from django_llmchat.api.errors import as_text, wants_json


@pytest.mark.parametrize(
    "data, text",
    [
        ({"detail": "No such chat.", "code": "not_found"}, "No such chat."),
        ({"messages": ["too long", "empty"]}, "messages: too long; empty"),
        ({"id": ["bad"], "trigger": ["no"]}, "id: bad\ntrigger: no"),
        ({"messages": {"0": {"role": ["not a choice"]}}}, "messages.0.role: not a choice"),
        ({"non_field_errors": ["both"]}, "both"),
        (["one", "two"], "one; two"),
        ({"detail": "Limit.", "code": "budget_exceeded", "limit": "usd_per_day"}, "Limit."),
        ({}, "The request was refused."),
    ],
)
def test_as_text(data, text):
    assert as_text(data) == text


@pytest.mark.parametrize(
    "accept, expected",
    [
        ("application/json", True),
        ("text/event-stream, Application/JSON; q=0.5", True),
        ("application/json;q=0", False),
        ("*/*", False),
        ("application/*", False),
        ("", False),
        ("text/plain", False),
    ],
)
def test_wants_json(accept, expected):
    request = RequestFactory().get("/", HTTP_ACCEPT=accept)
    assert wants_json(request) is expected
