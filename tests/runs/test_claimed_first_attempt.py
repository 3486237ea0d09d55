"""A worker's first attempt, written with its claim (``runs.claim(attempt=, seen=)``), on
every database: on PostgreSQL in the claim's call (``llmchat_run_claim_v4``), elsewhere in
its transaction. The worker reads the chat's path and builds the run's first request
before claiming; the attempt's pending row is written only when the claim starts a queued
run whose prompt is the path's last message and the path is still the one read (its
message count and highest id). Otherwise nothing of it is written and the run reads the
path again, as it did before, so the request holds every message and the attempt is on
the ledger once."""

from __future__ import annotations

import json

import pytest

from django_llmchat import runs
from django_llmchat.loop import runner_admission
from django_llmchat.models import Message, Run, Usage
from django_llmchat.models.message import QUEUED_POSITION
from django_llmchat.tasks import run_chat
from django_llmchat.testing import Reply
from tests.factories import prompt_of, taken_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("bystanders")]


def _pending(chat) -> Usage:
    return Usage(chat=chat, provider="openai", model_id="gpt-4.1-mini", status="pending")


def _queued(chat, text: str) -> Run:
    """A prompt with a queued run, nothing ahead of it: the prompt on the path."""
    run, _ = runs.enqueue(chat, prompt_of(chat, text))
    assert run.status == "queued"
    return run


def _path(chat) -> tuple[int, int, int]:
    """The path as a worker reads it: its last message, its count, its highest id."""
    path = list(
        Message.objects.filter(chat=chat, on_path=True, position__lt=QUEUED_POSITION).order_by(
            "position", "id"
        )
    )
    return path[-1].pk, len(path), max(m.pk for m in path)


def test_the_claim_opens_the_attempt_on_the_path_as_read(chat):
    """The path read ending with the run's prompt, unchanged: the claim starts the run and
    writes its attempt (the pending row, of the run, once)."""
    chat.add_message(role="user", content="before")
    run = _queued(chat, "mine")
    attempt = _pending(chat)
    seen = _path(chat)
    assert seen[0] == run.prompt_id
    execution = runs.claim(chat.pk, run_id=run.pk, attempt=attempt, seen=seen).execution
    assert execution is not None and execution.pk == run.pk
    assert attempt.pk is not None and attempt.run_id == run.pk
    (row,) = Usage.objects.filter(chat=chat)
    assert (row.pk, row.run_id, row.status) == (attempt.pk, run.pk, "pending")
    assert not attempt._state.adding


@pytest.mark.parametrize("mark", ["count", "top", "prompt", "no_leaf", "leaf"])
def test_a_path_other_than_the_one_read_gets_no_attempt(chat, mark):
    """Each mark of the path read checked: a count or highest id that is not the chat's,
    a last message that is not the run's prompt, no last message, or a last message that
    is not the highest id: the claim starts the run and writes nothing else."""
    earlier = chat.add_message(role="user", content="before")
    run = _queued(chat, "mine")
    leaf, count, top = _path(chat)
    seen = {
        "count": (leaf, count + 1, top),
        "top": (top + 1, count, top + 1),
        "prompt": (earlier.pk, count, earlier.pk),
        "no_leaf": (None, count, top),
        "leaf": (earlier.pk, count, top),
    }[mark]
    attempt = _pending(chat)
    execution = runs.claim(chat.pk, run_id=run.pk, attempt=attempt, seen=seen).execution
    assert execution is not None and execution.pk == run.pk
    assert attempt.pk is None
    assert not Usage.objects.filter(chat=chat).exists()


def test_a_path_ending_with_another_users_message_gets_no_attempt(chat):
    """The path read ends with a user message that is not the run's prompt (stored after
    it, outside any run): the claim starts the run and writes no attempt, though the path
    is as read."""
    run = _queued(chat, "mine")
    chat.add_message(role="user", content="a note after it")
    attempt = _pending(chat)
    seen = _path(chat)
    assert seen[0] != run.prompt_id
    execution = runs.claim(chat.pk, run_id=run.pk, attempt=attempt, seen=seen).execution
    assert execution is not None and attempt.pk is None
    assert not Usage.objects.filter(chat=chat).exists()


def test_a_path_with_as_many_messages_but_another_highest_gets_no_attempt(chat):
    """Between the read and the claim one message left the chat and another came after the
    prompt: the count is the one read, the highest id is not; no attempt."""
    gone = chat.add_message(role="user", content="before")
    run = _queued(chat, "mine")
    seen = _path(chat)
    Message.objects.filter(pk=gone.pk).delete()
    chat.add_message(role="system", content="a late note")
    assert _path(chat)[1] == seen[1] and _path(chat)[2] != seen[2]
    attempt = _pending(chat)
    execution = runs.claim(chat.pk, run_id=run.pk, attempt=attempt, seen=seen).execution
    assert execution is not None and attempt.pk is None
    assert not Usage.objects.filter(chat=chat).exists()


def test_messages_off_the_path_and_prompts_queued_behind_are_not_the_path(chat):
    """The path counted is the active one, queued prompts aside: a reply left off the path
    (regenerated) and a prompt queued behind the run do not count, so the attempt is
    written."""
    chat.add_message(role="user", content="Q")
    old = chat.add_message(role="assistant", content="an old answer")
    Message.objects.filter(pk=old.pk).update(on_path=False)  # an alternative, off the path
    run = _queued(chat, "mine")
    behind, _ = runs.enqueue(chat, prompt_of(chat, "behind"))  # queued after it
    seen = _path(chat)
    assert seen[0] == run.prompt_id and behind.prompt_id > seen[2]
    attempt = _pending(chat)
    execution = runs.claim(chat.pk, run_id=behind.pk, attempt=attempt, seen=seen).execution
    assert execution is not None and execution.pk == run.pk  # the run ahead first
    assert attempt.pk is not None and attempt.run_id == run.pk


def test_a_run_taken_over_opens_no_attempt_with_its_claim(chat):
    """A running run whose process died (its lease ran out), its prompt the path's last
    message: taken over, its attempt is not written by the claim (the run's earlier
    attempts are marked lost there; its new one is opened by the run)."""
    prompt = chat.add_message(role="user", content="Q")
    dead = taken_run(chat, prompt, lease=-1)
    Usage.objects.create(chat=chat, run=dead, provider="openai", model_id="m", status="pending")
    attempt = _pending(chat)
    execution = runs.claim(chat.pk, run_id=dead.pk, attempt=attempt, seen=_path(chat)).execution
    assert execution is not None and execution.taken_over and attempt.pk is None
    assert list(Usage.objects.filter(chat=chat).values_list("status", flat=True)) == ["lost"]


def test_a_busy_claim_writes_no_attempt(chat):
    """Another process works on the chat's run (its lease live): the claim of the run
    queued behind it is ``busy`` and writes nothing."""
    prompt = chat.add_message(role="user", content="Q")
    taken_run(chat, prompt, lease=30)
    behind = _queued(chat, "behind")
    attempt = _pending(chat)
    found = runs.claim(chat.pk, run_id=behind.pk, attempt=attempt, seen=_path(chat))
    assert found.execution is None and found.state == runs.BUSY
    assert attempt.pk is None and not Usage.objects.filter(chat=chat).exists()


def test_a_claim_of_the_run_ahead_opens_its_attempt(chat, fake_llm):
    """A task for a run queued behind another answers the one ahead first: the path read
    ends with that run's prompt, so its attempt goes with the claim; the run behind it
    opens its own (its prompt joined the path only when its run started). Both answered,
    each attempt billed once."""
    fake_llm.script(Reply("first answer"), Reply("second answer"))
    ahead = _queued(chat, "first")
    behind, _ = runs.enqueue(chat, prompt_of(chat, "second"))
    assert run_chat(chat.pk, behind.pk) == "done"
    rows = Usage.objects.filter(chat=chat).order_by("id")
    assert [(u.run_id, u.status) for u in rows] == [
        (ahead.pk, "succeeded"),
        (behind.pk, "succeeded"),
    ]
    assert [m.content for m in chat.transcript()] == [
        "first",
        "first answer",
        "second",
        "second answer",
    ]


@pytest.mark.parametrize("role", ["assistant", "system"])
def test_a_path_changed_after_the_workers_read_is_read_again(chat, fake_llm, monkeypatch, role):
    """A message stored between the worker's read and its claim: the claim writes no
    attempt, the run reads the path again (the request holds the late message) and opens
    its attempt then; one usage row, closed."""
    read = runner_admission.load_history

    def read_then_a_message_arrives(target):
        loaded = read(target)
        Message.objects.create(chat=target, role=role, content="a late note")
        return loaded

    run = _queued(chat, "what came last?")
    monkeypatch.setattr(runner_admission, "load_history", read_then_a_message_arrives)
    fake_llm.script(Reply("seen"))
    assert run_chat(chat.pk, run.pk) == "done"
    sent = json.dumps(fake_llm.last_request.body)
    assert "a late note" in sent and "what came last?" in sent
    (usage,) = Usage.objects.filter(run_id=run.pk)
    assert usage.status == "succeeded"
    assert Run.objects.get(pk=run.pk).status == "succeeded"


def test_a_worker_that_cannot_make_its_call_ready_still_answers(chat, fake_llm, monkeypatch):
    """Making the first call ready before the claim fails (here: its read of the path):
    the claim goes without an attempt and the run is answered as before, its attempt
    opened by the run."""

    def broken(target):
        raise RuntimeError("no path today")

    run = _queued(chat, "hello")
    monkeypatch.setattr(runner_admission, "load_history", broken)
    fake_llm.script(Reply("hi"))
    assert run_chat(chat.pk, run.pk) == "done"
    assert Run.objects.get(pk=run.pk).status == "succeeded"
    (usage,) = Usage.objects.filter(run_id=run.pk)
    assert usage.status == "succeeded"
    assert [m.content for m in chat.transcript()] == ["hello", "hi"]
