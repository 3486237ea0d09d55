"""Titles with a real Celery worker: the chat whose first reply a worker wrote is titled
in that worker after the run's terminal event (by its title model, on its own usage row,
or from the prompt), and a follower has the reply's end before the title is written."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from django_llmchat import streams
from django_llmchat.models import Chat, Usage
from django_llmchat.testing import Reply
from tests.integration.conftest import current_app

from .test_follow_ends import ends, settle

pytestmark = [pytest.mark.redis]


def test_a_worker_titles_the_chat_from_its_prompt(worker, services, llm):
    llm.script("Sure.")
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    start = streams.last_id(chat.pk)
    chat.ask_later("Bothies along the West Highland Way\nand more")
    (end,) = ends(chat.pk, start)
    settle(services, chat)
    assert end.status == "succeeded"
    stored = Chat.objects.get(pk=chat.pk)
    assert (stored.title, stored.title_source) == ("Bothies along the West Highland Way", "prompt")
    assert not Usage.objects.filter(chat=chat, operation="title").exists()


def test_a_worker_titles_the_chat_with_its_title_model(services, llm):
    llmchat = {**services.llmchat, "TITLES": {"model": "gpt-4.1-nano"}}
    queue = f"{services.queue}-titles"
    worker = services.worker(queue=queue, concurrency=2, LLMCHAT_TEST_SETTINGS=json.dumps(llmchat))
    try:
        with override_settings(LLMCHAT=llmchat), current_app(services.sender(queue)):
            chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
            llm.script(
                Reply("Start at Milngavie.", usage={"input_tokens": 12, "output_tokens": 5}),
                Reply("West Highland Way", usage={"input_tokens": 40, "output_tokens": 3}),
            )
            start = streams.last_id(chat.pk)
            chat.ask_later("Where does the West Highland Way start?")
            (end,) = ends(chat.pk, start)
            ended = services.wait_task_ended(chat.runs.get().task_id, timeout=60)
            assert ended.startswith("SUCCESS"), worker.output()
    finally:
        worker.stop()
    assert end.status == "succeeded"
    stored = Chat.objects.get(pk=chat.pk)
    assert (stored.title, stored.title_source) == ("West Highland Way", "model")
    usage = Usage.objects.get(chat=chat, operation="title")
    assert (usage.status, usage.model_id) == ("succeeded", "gpt-4.1-nano")
    assert (usage.input_tokens, usage.output_tokens) == (40, 3)
    assert usage.total_cost is not None and usage.total_cost > 0
    assert usage.run_id == chat.runs.get().pk
    # the run's terminal event was told before the title call: its cost is the reply's
    reply = Usage.objects.get(chat=chat, operation="chat")
    assert float(end.cost) == float(reply.total_cost)
    assert [r.body["model"] for r in llm.requests] == ["gpt-4.1-mini", "gpt-4.1-nano"]
