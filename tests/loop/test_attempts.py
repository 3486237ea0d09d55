"""The provider attempts of a run (django_llmchat.loop.attempts): every attempt is on the
usage ledger before its call (pending, its input tokens estimated) and closed when it
ends, whatever the end."""

from __future__ import annotations

import pytest

from django_llmchat.errors import ProviderError
from django_llmchat.models import Chat, Usage
from django_llmchat.testing import Fault, Reply

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gpt-4.1-mini"


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("payer", password="pw")


def test_a_failed_attempt_is_closed_failed_in_its_pending_row(user, fake_llm):
    """A provider's refusal: the pending row becomes the failed attempt (one row)."""
    fake_llm.configure("openai", MODEL)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    fake_llm.script(Fault(status=400))
    with pytest.raises(ProviderError):
        chat.ask("Hello")
    row = Usage.objects.get(chat=chat)
    assert row.status == Usage.FAILED and row.error and row.run_id == chat.runs.get().pk


def test_a_step_stopped_mid_stream_keeps_its_attempt_with_the_text_shown(user, fake_llm):
    fake_llm.configure("openai", MODEL)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    fake_llm.script(Fault(chunk_delay=0.01, reply=Reply("word " * 100, chunk_size=5)))
    events = chat.stream("Talk")
    next(events), next(events), next(events)
    events.close()
    reply = chat.messages.get(role="assistant")
    row = Usage.objects.get(chat=chat)
    assert (row.status, row.message_id) == (Usage.CANCELLED, reply.pk)
    assert reply.finish_reason == "cancelled" and reply.content.startswith("word")
