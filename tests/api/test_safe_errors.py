"""No provider's or database's own error text reaches a user: API bodies and events carry
fixed words and a type; the raw text stays in the usage rows (admin) and the logs."""

import json

import pytest
from django.db import IntegrityError

from django_llmchat.errors import safe_error
from django_llmchat.models import Usage
from django_llmchat.testing import Fault

from .conftest import close_response, sse_frames, url

pytestmark = pytest.mark.django_db

SSE = {"HTTP_ACCEPT": "text/event-stream"}
RAW = "litellm.APIError: OpenAIException - sk-live-abc123 internal trace at 0x7f"


def read(response) -> str:
    body = b"".join(response.streaming_content).decode()
    close_response(response)
    return body


@pytest.mark.parametrize(
    "status, kind, words",
    [
        (500, "provider_error", "The provider returned an error."),
        (401, "auth", "The provider rejected the credentials."),
        (429, "rate_limited", "The provider is rate limiting requests; retry later."),
        (400, "context_length", "The conversation is too long for the model."),
    ],
)
def test_raw_provider_text_never_reaches_an_api_body_or_event(
    api, chat, fake_llm, status, kind, words
):
    fake_llm.configure("openai", "gpt-4.1-mini", MAX_RETRIES=0)
    message = RAW + (" maximum context length is 128000 tokens" if status == 400 else "")
    code = "context_length_exceeded" if status == 400 else None
    fault = Fault(status=status, body={"error": {"message": message, "code": code}})
    fake_llm.script(fault, fault)  # a request too long is tried once more, shorter
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "hi"}, format="json", **SSE)
    bodies = [read(response)]
    frames = sse_frames(bodies[0])
    error = next(f for f in frames if f["event"] == "error")["data"]
    assert (error["type"], error["message"]) == (kind, words)
    finished = frames[-1]["data"]
    assert (finished["error"], finished["error_type"]) == (words, kind)
    run = chat.runs.get()
    for name, kwargs in [
        ("chat-detail", {"pk": chat.pk}),
        ("chat-list", {}),
        ("chat-messages", {"pk": chat.pk}),
        ("chat-runs", {"pk": chat.pk}),
        ("run-detail", {"pk": run.pk}),
        ("chat-usage", {"pk": chat.pk}),
    ]:
        got = api.get(url(name, **kwargs))
        assert got.status_code == 200
        bodies.append(got.content.decode())
    detail = json.loads(bodies[1])
    assert detail["last_run"]["error"] == words and detail["last_run"]["error_type"] == kind
    for body in bodies:
        assert "sk-live" not in body and "litellm" not in body and "0x7f" not in body
    # staff keep the provider's own words on the usage row (admin)
    assert all("sk-live" in row.error for row in Usage.objects.filter(run=run))


def test_database_text_is_not_shown():
    kind, words = safe_error(
        IntegrityError('duplicate key value violates unique constraint "llmchat_message_pkey"')
    )
    assert (kind, words) == ("internal_error", "The reply failed.")
