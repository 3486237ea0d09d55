"""Guardrails (``guardrails.py``) in a run."""

import pytest

from django_llmchat.agents import Agent
from django_llmchat.events import (
    GuardrailModification,
    GuardrailTripwire,
    RunFinished,
)
from django_llmchat.guardrails import Guardrail, GuardrailResult
from django_llmchat.models import Chat
from django_llmchat.testing import Reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    return Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")


class NoSecrets(Guardrail):
    id = "no-secrets"

    def check(self, text, *, phase, context):
        if "password" in text:
            return GuardrailResult.block("mentions a password")
        if "damn" in text:
            return GuardrailResult.transform(text.replace("damn", "d***"))
        return None


class Guarded(Agent):
    guardrails = [NoSecrets]


def test_guardrails(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Guarded.start_chat()
    events = list(chat.stream("my password is hunter2"))
    assert events == [
        GuardrailTripwire(guardrail_id="no-secrets", reason="mentions a password", phase="before"),
        RunFinished(run_id="", status="blocked"),
    ]
    assert chat.messages.count() == 0 and not fake_llm.requests
    fake_llm.script(Reply("damn right"))
    events = list(chat.stream("damn it"))
    mods = [e for e in events if isinstance(e, GuardrailModification)]
    assert [m.phase for m in mods] == ["before", "after"]
    assert list(chat.messages.values_list("content", flat=True)) == ["d*** it", "d*** right"]
    fake_llm.script(Reply("the password is swordfish"))
    reply = chat.ask("what is it?")
    assert reply is None
    assert chat.last_run.tripwire.phase == "after"
    assert not chat.messages.filter(content__contains="swordfish").exists()
