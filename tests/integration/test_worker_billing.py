"""A reply a worker was streaming, stopped from another process (``chat.cancel()`` over
the database while a real Celery worker on Redis streams it), is billed: its attempt's
usage row keeps the estimated input tokens and the output counted from what streamed,
priced, marked estimated, and the spending limits count it."""

from __future__ import annotations

import pytest

from django_llmchat import streams
from django_llmchat.models import Chat, Usage
from django_llmchat.runs import limits
from django_llmchat.testing import Fault, Reply

from .test_follow_ends import LONG, ends, settle

pytestmark = [pytest.mark.redis]


def test_a_reply_cancelled_in_the_worker_is_billed(worker, services, llm, django_user_model):
    user = django_user_model.objects.create_user("payer")
    llm.script(Fault(chunk_delay=0.05, reply=Reply(LONG, chunk_size=4)))
    chat = Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")
    start = streams.last_id(chat.pk)
    chat.ask_later("Talk")
    (end,) = ends(chat.pk, start, on_text=lambda: Chat.objects.get(pk=chat.pk).cancel())
    settle(services, chat)
    assert end.status == "cancelled"
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.estimated) == (Usage.CANCELLED, True)
    assert row.input_tokens > 0 and row.output_tokens > 0
    assert row.total_cost is not None and row.total_cost > 0
    assert end.estimated is True and float(end.cost) == float(row.total_cost)
    reply = chat.messages.get(role="assistant")
    assert reply.finish_reason == "cancelled" and reply.content and reply.content != LONG
    assert limits.spend(user.pk)["usd_per_day"] == row.total_cost
