"""A step's usage rows (``steps.py``): every attempt has its row before its call."""

from __future__ import annotations

import pytest

from django_llmchat.models import Chat, Usage
from django_llmchat.testing import Reply

pytestmark = pytest.mark.django_db(transaction=True)


MODEL = "gpt-4.1-mini"


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("payer", password="pw")


def test_every_attempt_has_a_usage_row_before_its_call(user, fake_llm):
    """The attempt's row is there while the provider works on it: pending, its input
    tokens estimated and their cost marked estimated."""
    fake_llm.configure("openai", MODEL)
    chat = Chat.objects.create(user=user, provider="openai", model_id=MODEL)
    seen = []

    def look(request):
        seen.extend(
            Usage.objects.filter(chat=chat).values_list("status", "estimated", "input_tokens")
        )
        return Reply("Hi.", usage={"input_tokens": 7, "output_tokens": 2})

    fake_llm.server.responder = look
    reply = chat.ask("Hello there, how are you?")
    assert len(seen) == 1
    status, estimated, tokens = seen[0]
    assert status == Usage.PENDING and estimated and tokens > 0
    row = reply.usages.get()
    assert (row.status, row.estimated, row.input_tokens, row.output_tokens) == (
        Usage.SUCCEEDED,
        False,
        7,
        2,
    )
