"""The history policy in a real worker process: a reply filled in by a Celery worker sends
a request that fits the registered window, with the system and pinned messages, and the
summary a worker stores is reused by the next run."""

from __future__ import annotations

import json

import pytest

from django_llmchat.models import Chat, LLMModel, Message
from tests.loop.test_history import OUTPUT, WINDOW, check_request, fill, vendor

from .conftest import wait_until

pytestmark = [pytest.mark.redis]


def replies(chat) -> int:
    return Message.objects.filter(chat=chat, role="assistant", content="Noted.").count()


# a model of its own: a worker remembers the registry's answer for a model for a minute
MODEL = "history-window-model"


def test_a_worker_sends_what_fits_and_reuses_its_summary(worker, llm):
    LLMModel.objects.create(
        provider="openai",
        model_id=MODEL,
        name=MODEL,
        context_window=WINDOW,
        max_output_tokens=OUTPUT,
    )
    chat = Chat.objects.create(provider="openai", model_id=MODEL)
    fill(chat, 200)
    chat.with_history("summarize")
    llm.server.responder = vendor()
    chat.ask_later("Turn 0: what now?")
    wait_until(lambda: replies(chat) == 1, timeout=30)
    summary = Message.objects.get(chat=chat, summary_until__isnull=False)
    chat.ask_later("Turn 1: and then?")
    wait_until(lambda: replies(chat) == 2, timeout=30)
    assert Message.objects.filter(chat=chat, summary_until__isnull=False).count() == 1
    sent = [r for r in llm.requests if "compact a conversation" not in str(r.body)]
    assert len(sent) == 2
    for request in sent:
        check_request(request, "Reference document")
        assert summary.content in json.dumps(request.body)
