"""The spending limits of a run (django_llmchat.loop.runner_budget): the admission's verdict
serves the first check, every later one reads the limits again."""

from __future__ import annotations

from types import SimpleNamespace

from django_llmchat.loop.runner_budget import RunBudget
from django_llmchat.runs import limits


def outcome(generator):
    events = []
    try:
        while True:
            events.append(next(generator))
    except StopIteration as stop:
        return events, stop.value


def test_the_admissions_verdict_serves_the_first_check_only(monkeypatch):
    read = []
    monkeypatch.setattr(limits, "check", lambda chat: read.append(chat))
    chat = object()
    budget = RunBudget(chat)
    budget.admitted = SimpleNamespace(warnings=[])
    assert outcome(budget.check()) == ([], None) and read == []
    assert outcome(budget.check()) == ([], None) and read == [chat]
