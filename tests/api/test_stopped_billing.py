"""A reply stopped over the API is billed: REST cancel, ``ui/chat/{id}/stop`` and a
client leaving an inline stream (``CANCEL_ON_DISCONNECT``) each leave the attempt's usage
row with its estimated tokens and their cost, marked estimated, and REST, ``ui/chat``
and the event stream show them so (the Python paths: tests/test_stopped_attempts.py)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from django_llmchat.models import Run, Usage
from django_llmchat.runs import limits
from django_llmchat.testing import Fault, Reply

from .conftest import close_response, sse_frames, url
from .test_ui_chat import post, user

pytestmark = pytest.mark.django_db(transaction=True)

SSE = {"HTTP_ACCEPT": "text/event-stream"}


def slow() -> Fault:
    return Fault(chunk_delay=0.01, reply=Reply("word " * 100, chunk_size=5))


def billed(chat) -> Usage:
    """The chat's one attempt, stopped and billed as estimated."""
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated) == (Usage.CANCELLED, True)
    assert row.input_tokens > 0 and row.output_tokens > 0
    assert row.total_cost is not None and row.total_cost > 0
    return row


def assert_shown_estimated(api, chat, row: Usage) -> None:
    """REST shows the stopped attempt's cost, marked estimated: the chat's usage, the run
    and the reply."""
    usage = api.get(url("chat-usage", pk=chat.pk)).json()
    assert Decimal(usage["cost"]["total"]) == row.total_cost
    assert usage["tokens"]["output_tokens"] == row.output_tokens
    assert usage["estimated"] == 1 and usage["attempts"] == {"cancelled": 1}
    assert usage["by_model"][0]["estimated"] == 1
    run = api.get(url("run-detail", pk=row.run_id)).json()
    assert run["estimated"] is True and Decimal(run["cost"]["total"]) == row.total_cost
    page = api.get(url("chat-messages", pk=chat.pk)).json()["results"]
    (reply,) = [m for m in page if m["role"] == "assistant"]
    assert reply["estimated"] is True and Decimal(reply["cost"]["total"]) == row.total_cost
    assert reply["tokens"]["output_tokens"] == row.output_tokens
    prompt = next(m for m in page if m["role"] == "user")
    assert prompt["estimated"] is False


def test_a_rest_cancel_bills_the_stopped_reply(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(slow())
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "hi"}, format="json", **SSE)
    stream = iter(response.streaming_content)
    seen = ""
    while "text_delta" not in seen:
        seen += next(stream).decode()
    assert api.post(url("chat-cancel", pk=chat.pk)).status_code == 202
    frames = sse_frames(seen + b"".join(stream).decode())
    assert chat.runs.get().status == Run.CANCELLED
    row = billed(chat)
    step = next(f["data"] for f in frames if f.get("event") == "step_finished")
    assert step["estimated"] is True and Decimal(step["cost"]) == row.total_cost
    end = frames[-1]["data"]
    assert frames[-1]["event"] == "run_finished" and end["status"] == "cancelled"
    assert end["estimated"] is True and Decimal(end["cost"]) == row.total_cost
    assert end["token_usage"]["output_tokens"] == row.output_tokens
    assert_shown_estimated(api, chat, row)


def test_ui_chat_stop_bills_the_stopped_reply(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(slow())
    response = post(api, chat.pk, user("Say a lot"))
    stream = iter(response.streaming_content)
    seen = ""
    while '"text-delta"' not in seen:
        seen += next(stream).decode()
    assert api.post(url("ui-chat-stop", id=str(chat.pk))).status_code == 200
    blocks = [b for b in (seen + b"".join(stream).decode()).split("\n\n") if b]
    got = [json.loads(b[6:]) for b in blocks[:-1]]
    row = billed(chat)
    finish = got[-1]["messageMetadata"]
    assert finish["status"] == "cancelled" and finish["estimated"] is True
    assert Decimal(finish["cost"]) == row.total_cost
    assert finish["tokens"]["output_tokens"] == row.output_tokens
    # what a reload shows
    (reply,) = [
        m
        for m in api.get(url("ui-chat-messages", id=str(chat.pk))).json()
        if m["role"] == "assistant"
    ]
    assert reply["metadata"]["estimated"] is True
    assert Decimal(reply["metadata"]["cost"]) == row.total_cost
    assert_shown_estimated(api, chat, row)


def test_a_client_leaving_an_inline_stream_bills_the_stopped_reply(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini", CANCEL_ON_DISCONNECT=True)
    fake_llm.script(slow())
    response = api.post(url("chat-messages", pk=chat.pk), {"content": "hi"}, format="json", **SSE)
    stream = iter(response.streaming_content)
    seen = ""
    while "text_delta" not in seen:
        seen += next(stream).decode()
    close_response(response)
    run = chat.runs.get()
    assert (run.status, run.interrupt_reason) == (Run.CANCELLED, "stream_closed")
    assert_shown_estimated(api, chat, billed(chat))


def test_a_client_leaving_a_ui_chat_stream_bills_the_stopped_reply(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini", CANCEL_ON_DISCONNECT=True)
    fake_llm.script(slow())
    response = post(api, chat.pk, user("Say a lot"))
    stream = iter(response.streaming_content)
    seen = ""
    while '"text-delta"' not in seen:
        seen += next(stream).decode()
    close_response(response)
    assert chat.runs.get().status == Run.CANCELLED
    assert_shown_estimated(api, chat, billed(chat))


def test_five_stops_over_ui_chat_are_five_priced_rows_the_limits_count(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    for n in range(5):
        fake_llm.script(slow())
        response = post(api, chat.pk, user(f"Say a lot {n}"))
        stream = iter(response.streaming_content)
        seen = ""
        while '"text-delta"' not in seen:
            seen += next(stream).decode()
        assert api.post(url("ui-chat-stop", id=str(chat.pk))).status_code == 200
        b"".join(stream)
    rows = list(Usage.objects.filter(chat=chat))
    assert len(rows) == 5 == len(fake_llm.requests)
    assert all(r.estimated and r.total_cost > 0 for r in rows)
    spent = limits.spend(chat.user_id)
    assert spent["usd_per_day"] == sum(r.total_cost for r in rows)
    usage = api.get(url("chat-usage", pk=chat.pk)).json()
    assert usage["estimated"] == 5 and usage["attempts"] == {"cancelled": 5}
    assert Decimal(usage["cost"]["total"]) == spent["usd_per_day"]
