"""Fixtures of the run package's tests (tests/runs): a chat whose run tasks are recorded
instead of run, a clock standing still, and other chats' runs in every unfinished state
that no transition of the chat under test may touch.

The tests of each module (``test_<module>.py``) take the state machine one transition at
a time: the rows it writes, the values it writes, what it refuses, and that the runs of
other chats are left as they were (``bystanders``, asked for by each file's
``pytestmark``). Written to kill the mutants ``make mutation`` found alive
(docs/testing.md, "Mutation testing"): each test names in its docstring the behaviour it
pins. Time is frozen where a lease or a retry time is compared (``clock``), never waited
for."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_llmchat.models import Chat, Message, Run, ToolCall, Usage
from django_llmchat.runs import base, claims
from django_llmchat.runs import execution as runs_execution
from tests.factories import LEASE, MAX_ATTEMPTS, taken_run


@pytest.fixture
def sent(monkeypatch):
    """The tasks the module sends (``runs.base.send``), recorded instead of run."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(base, "send", lambda chat_id, run_id, **kw: calls.append((chat_id, run_id)))
    return calls


@pytest.fixture
def chat(fake_llm, monkeypatch, sent):
    fake_llm.configure(
        "openai",
        "gpt-4.1-mini",
        RUN_LEASE=LEASE,
        RUN_MAX_ATTEMPTS=MAX_ATTEMPTS,
        TASKS_EAGER_WITHOUT_BROKER="inline",
        MAX_RETRIES=0,
        TASK_RETRY_MAX_WAIT=0.0,
    )
    # no lease thread (on PostgreSQL it would renew leases while a test compares them);
    # the tests of the thread itself (test_execution.py) do not use this fixture
    monkeypatch.setattr(runs_execution, "_private_database", lambda: True)
    monkeypatch.setattr(claims, "_resumes_sent", {})
    return Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")


class Clock:
    """``timezone.now()`` standing still until moved."""

    def __init__(self) -> None:
        self.now = timezone.now()

    def __call__(self):
        return self.now

    def move(self, **delta) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock(monkeypatch):
    found = Clock()
    monkeypatch.setattr(timezone, "now", found)
    return found


def _snapshot(chats):
    return {
        "chats": list(
            Chat.objects.filter(pk__in=chats)
            .order_by("pk")
            .values("status", "active_run_id", "updated_at", "title", "title_source")
        ),
        "runs": list(Run.objects.filter(chat__in=chats).order_by("pk").values()),
        "calls": list(ToolCall.objects.filter(chat__in=chats).order_by("pk").values()),
        "usage": list(Usage.objects.filter(chat__in=chats).order_by("pk").values()),
        "messages": list(
            Message.objects.filter(chat__in=chats).order_by("pk").values("pk", "position")
        ),
    }


@pytest.fixture
def bystanders(transactional_db):
    """Other chats with a run in each unfinished state (running with attempts 1 to 3, each
    with its attempt's pending usage row, a queued run, one queued behind a running one,
    one waiting for a decision on a call), untitled: after each test they are exactly as
    before, down to the chats' ``updated_at`` and titles."""
    now = timezone.now()
    chats = []
    for attempt in (1, 2, 3):
        other = Chat.objects.create()
        prompt = other.add_message(role="user", content=f"bystander {attempt}")
        run = taken_run(other, prompt, lease=600, attempt=attempt, worker="bystander:1")
        Usage.objects.create(chat=other, run=run, status="pending", input_tokens=attempt)
        chats.append(other.pk)
    queued = Chat.objects.create()
    Run.objects.create(chat=queued, prompt=queued.add_message(content="queued bystander"))
    Chat.objects.filter(pk=queued.pk).update(status="queued")
    behind = Chat.objects.create()
    taken_run(behind, lease=600, attempt=1)
    Run.objects.create(chat=behind, lease_expires_at=now + timedelta(seconds=600), worker="b:2")
    waiting = Chat.objects.create()
    run = Run.objects.create(chat=waiting, status="awaiting_approval", attempt=1)
    message = waiting.add_message(role="assistant", content="", run=run)
    ToolCall.objects.create(chat=waiting, message=message, call_id="b1", name="pay")
    Chat.objects.filter(pk=waiting.pk).update(status="awaiting_approval", active_run=run)
    chats += [queued.pk, behind.pk, waiting.pk]
    before = _snapshot(chats)
    yield chats
    assert _snapshot(chats) == before, "a transition of one chat changed another chat's runs"


@pytest.fixture
def told(monkeypatch):
    """What the module tells a chat's followers (``tell_followers``), recorded."""
    calls: list[tuple] = []
    monkeypatch.setattr(base, "tell_followers", lambda *args: calls.append(args))
    return calls
