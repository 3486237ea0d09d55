"""A reply whose vendor reported no usage, asked over REST and ``ui/chat``: its usage
row is our estimate (input and output, priced, ``estimated``), and the event stream,
the ``ui/chat`` metadata and the REST views say so (the Python paths:
tests/test_unreported_usage.py)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from django_llmchat.models import Usage
from django_llmchat.testing import Reply

from .conftest import sse_frames, url
from .test_ui_chat import post, user

pytestmark = pytest.mark.django_db(transaction=True)

SSE = {"HTTP_ACCEPT": "text/event-stream"}


def billed(chat) -> Usage:
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated) == (Usage.SUCCEEDED, True)
    assert row.input_tokens > 0 and row.output_tokens > 0
    assert row.total_cost is not None and row.total_cost > 0
    return row


def assert_shown_estimated(api, chat, row: Usage) -> None:
    usage = api.get(url("chat-usage", pk=chat.pk)).json()
    assert Decimal(usage["cost"]["total"]) == row.total_cost
    assert usage["estimated"] == 1 and usage["attempts"] == {"succeeded": 1}
    run = api.get(url("run-detail", pk=row.run_id)).json()
    assert run["estimated"] is True and run["status"] == "succeeded"
    page = api.get(url("chat-messages", pk=chat.pk)).json()["results"]
    (reply,) = [m for m in page if m["role"] == "assistant"]
    assert reply["estimated"] is True and reply["tokens"]["output_tokens"] == row.output_tokens


def test_a_rest_reply_without_usage_is_billed_estimated(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("Paris is the capital.", usage=False))
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "hi"}, format="json", **SSE)
    frames = sse_frames(b"".join(response.streaming_content).decode())
    row = billed(chat)
    step = next(f["data"] for f in frames if f.get("event") == "step_finished")
    assert step["estimated"] is True and Decimal(step["cost"]) == row.total_cost
    assert step["token_usage"]["output_tokens"] == row.output_tokens
    end = frames[-1]["data"]
    assert frames[-1]["event"] == "run_finished" and end["status"] == "succeeded"
    assert end["estimated"] is True and Decimal(end["cost"]) == row.total_cost
    assert_shown_estimated(api, chat, row)


def test_a_ui_chat_reply_without_usage_is_billed_estimated(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("Paris is the capital.", usage=False))
    response = post(api, chat.pk, user("The capital of France?"))
    blocks = [b for b in b"".join(response.streaming_content).decode().split("\n\n") if b]
    got = [json.loads(b[6:]) for b in blocks[:-1]]
    row = billed(chat)
    finish = got[-1]["messageMetadata"]
    assert finish["estimated"] is True and Decimal(finish["cost"]) == row.total_cost
    assert finish["tokens"]["output_tokens"] == row.output_tokens
    assert_shown_estimated(api, chat, row)
