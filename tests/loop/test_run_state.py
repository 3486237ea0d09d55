"""The typed state of a run session (django_llmchat.loop.run_state): its phase through the
run's life, and one outcome, decided once, whatever ended the run."""

from __future__ import annotations

import pytest

from django_llmchat.events import RunFinished
from django_llmchat.guardrails import Guardrail, GuardrailResult
from django_llmchat.loop.run_state import End, Outcome, Phase
from django_llmchat.loop.session import RunSession
from django_llmchat.models import Chat
from django_llmchat.testing import Fault, Reply

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gpt-4.1-mini"


@pytest.fixture
def chat(fake_llm, django_user_model):
    fake_llm.configure("openai", MODEL)
    user = django_user_model.objects.create_user("sam", password="pw")
    return Chat.objects.create(user=user, provider="openai", model_id=MODEL)


class NoPasswords(Guardrail):
    id = "no-passwords"

    def check(self, text, *, phase, context):
        return GuardrailResult(action="block", reason="a password") if "password" in text else None


def test_a_session_moves_through_its_phases_to_one_outcome(chat, fake_llm):
    fake_llm.script(Reply("Hello."))
    session = RunSession(chat.runner(), "Hi")
    assert session.phase is Phase.NEW and session.outcome is None and not session.admitted
    session.admit()
    assert session.phase is Phase.ADMITTED and session.outcome is None
    events = list(session)
    assert session.phase is Phase.ENDED
    outcome = session.outcome
    assert isinstance(outcome, Outcome) and outcome.end is End.LOOP_DONE
    assert outcome.status == "succeeded" == session.status and outcome.error is None
    assert outcome.event is events[-1] is session.finished


def test_the_end_is_decided_once(chat, fake_llm):
    fake_llm.script(Reply("Hello."))
    session = RunSession(chat.runner(), "Hi", publish=lambda event: None)
    finished = list(session)[-1]
    # a second decision (a close after the end) keeps the first one
    assert session._end(End.CLOSED) is finished and session.outcome.end is End.LOOP_DONE
    session.close()
    assert session.finished is finished and session.status == "succeeded"


@pytest.mark.parametrize(
    ("script", "end", "status"),
    [(Fault(status=400), End.LOOP_FAILED, "failed"), ("Hello.", End.LOOP_DONE, "succeeded")],
)
def test_how_the_loop_ended_decides_the_status(chat, fake_llm, script, end, status):
    fake_llm.script(script)
    session = RunSession(chat.runner(), "Hi", raise_errors=False)
    events = list(session)
    assert (session.outcome.end, session.status) == (end, status)
    assert isinstance(events[-1], RunFinished) and events[-1].status == status


def test_a_blocked_prompt_ends_blocked(chat, fake_llm):
    runner = chat.runner()
    runner.guardrails = [NoPasswords()]
    session = RunSession(runner, "my password")
    list(session)
    assert (session.outcome.end, session.status) == (End.BLOCKED, "blocked")
    assert session.run is None


def test_an_unread_session_closed_ends_unstarted(chat, fake_llm):
    session = RunSession(chat.runner(), "Hi", publish=lambda event: None).admit()
    session.close()
    assert (session.outcome.end, session.status) == (End.UNSTARTED, "cancelled")
    assert session.finished is not None and session.finished.status == "cancelled"


def test_a_session_closed_mid_reply_ends_closed(chat, fake_llm):
    fake_llm.script(Fault(chunk_delay=0.01, reply=Reply("word " * 50, chunk_size=5)))
    session = RunSession(chat.runner(), "Hi")  # no publisher: the status alone is kept
    next(session)
    next(session)
    session.close()
    assert (session.outcome.end, session.status) == (End.CLOSED, "cancelled")
    assert session.finished is None
