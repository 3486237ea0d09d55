"""Encryption at rest with a real Celery worker: the worker reads the history from the
(encrypted) rows and sends it in plain text; this process then reads the worker's rows
(another process answered last) and sends them in plain text too."""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet
from django.db import connection
from django.test import override_settings

from django_llmchat.models import Chat
from django_llmchat.models.protected import MARKER
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call
from tests.integration.conftest import current_app

pytestmark = [pytest.mark.redis]


def plain(request, *words: str) -> None:
    body = request.raw_body.decode()
    assert MARKER not in body and "gAAAAA" not in body
    for word in words:
        assert word in body, (word, body)


def test_a_worker_and_the_next_process_send_the_encrypted_history_in_plain_text(services, llm):
    llmchat = {**services.llmchat, "ENCRYPTION_KEYS": [Fernet.generate_key().decode()]}
    queue = f"{services.queue}-encrypted"
    worker = services.worker(queue=queue, concurrency=2, LLMCHAT_TEST_SETTINGS=json.dumps(llmchat))
    try:
        with override_settings(LLMCHAT=llmchat), current_app(services.sender(queue)):
            chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
            chat.with_tools("slow_step")
            llm.script("Reply alpha.")
            chat.ask("plainword alpha")
            llm.script(Reply(tool_calls=[Call("slow_step", {"n": 7}, call_id="c7")]))
            llm.script("Reply beta.")
            chat.ask_later("plainword beta")
            ended = services.wait_task_ended(chat.runs.order_by("-id")[0].task_id, timeout=60)
            assert ended.startswith("SUCCESS"), worker.output()
            llm.script("Reply gamma.")
            chat.ask("plainword gamma")
    finally:
        worker.stop()
    first, by_worker, after_tool, here = llm.requests
    plain(by_worker, "plainword alpha", "Reply alpha.", "plainword beta")
    plain(after_tool, "plainword beta", "step 7 done", '\\"n\\":7')
    plain(here, "plainword alpha", "Reply alpha.", "plainword beta", "step 7 done")
    plain(here, "Reply beta.", "plainword gamma")
    with connection.cursor() as cursor:
        cursor.execute("SELECT content FROM llmchat_message WHERE chat_id = %s", [chat.pk])
        stored = [content for (content,) in cursor.fetchall()]
    assert stored and all(content == "" or content.startswith(MARKER) for content in stored)
