"""The run's first attempt, written with its admission (``runs.enqueue(attempt=,
seen=)``), on every database: on PostgreSQL in the admission's call, elsewhere in its
transaction. It is written only when the chat's path is still the one the request was
built on (its active leaf, message count and highest id); otherwise the run reads the path
again and opens its attempt itself, so the request holds every message and the attempt is
on the ledger once."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat import runs
from django_llmchat.loop.transcript import forget_history
from django_llmchat.models import Chat, Message, Usage
from django_llmchat.testing import Reply
from tests.wire import name_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("bystanders")]


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    made = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    made.ask("warm up")
    return made


def _statements(ctx) -> list[str]:
    control = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")
    sqls = (q["sql"].strip() for q in ctx.captured_queries)
    return [name_of(sql) for sql in sqls if not sql.upper().startswith(control)]


@pytest.mark.parametrize("role", ["assistant", "system"])
def test_a_path_changed_after_the_read_is_read_again(chat, fake_llm, monkeypatch, role):
    """A message stored between the history read and the admission (a reply: the active
    leaf moved; instructions: the leaf did not, the count did): the admission writes no
    attempt, the run reads the path again (the request holds the late message) and opens
    its attempt then; one usage row, closed."""
    from django_llmchat.loop import runner_admission as runner_module

    read = runner_module.load_history

    def read_then_a_message_arrives(target):
        loaded = read(target)
        Message.objects.create(chat=target, role=role, content="a late note")
        return loaded

    monkeypatch.setattr(runner_module, "load_history", read_then_a_message_arrives)
    forget_history(chat.pk)  # read, as a process that did not answer the chat last
    fake_llm.script(Reply("seen"))
    with CaptureQueriesContext(connection) as ctx:
        reply = chat.ask("what came last?")
    monkeypatch.setattr(runner_module, "load_history", read)
    assert "INSERT llmchat_usage" in _statements(ctx)
    sent = json.dumps(fake_llm.last_request.body)
    assert "a late note" in sent and "what came last?" in sent
    (usage,) = Usage.objects.filter(run_id=reply.run_id)
    assert usage.status == "succeeded" and usage.message_id == reply.pk


def test_the_attempt_is_written_only_when_leaf_count_and_highest_id_all_match(chat):
    """The path the request was built from is checked on each of its three marks: a seen
    leaf, message count or highest id that is not the chat's (the other two matching)
    writes no attempt; all three matching write it (a message off the path counting for
    none of them)."""
    path = list(Message.objects.filter(chat=chat, on_path=True).order_by("position"))
    leaf, count, top = path[-1].pk, len(path), max(m.pk for m in path)
    for seen in ((path[0].pk, count, top), (leaf, count + 1, top), (leaf, count, top + 1)):
        attempt = Usage(chat=chat, provider="openai", model_id="gpt-4.1-mini", status="pending")
        prompt = Message(chat=chat, role="user", content=f"seen {seen}")
        run, execution = runs.enqueue(chat, prompt, start=True, attempt=attempt, seen=seen)
        assert execution is not None and attempt.pk is None, seen
        assert not Usage.objects.filter(run_id=run.pk).exists()
        execution.finish("cancelled")
        prompt.delete()  # the path as it was
    # a message of another branch (off the path) is not counted, however recent
    Message.objects.create(chat=chat, role="user", content="a branch", on_path=False)
    attempt = Usage(chat=chat, provider="openai", model_id="gpt-4.1-mini", status="pending")
    prompt = Message(chat=chat, role="user", content="seen right")
    run, execution = runs.enqueue(
        chat, prompt, start=True, attempt=attempt, seen=(leaf, count, top)
    )
    assert attempt.pk is not None and Usage.objects.get(run_id=run.pk).pk == attempt.pk


def test_a_stream_closed_at_run_started_leaves_no_attempt(chat, fake_llm):
    """The attempt the admission opened was never made: a stream closed at its first
    event ends the run cancelled and deletes the pending row (nothing left pending, nothing
    billed)."""
    fake_llm.script(Reply("never asked"))
    events = chat.stream("hello")
    assert next(iter(events)).type == "run_started"
    events.close()
    run = chat.runs.latest("id")
    assert run.status == "cancelled"
    assert not Usage.objects.filter(run_id=run.pk).exists()
    assert not Usage.objects.filter(status=Usage.PENDING).exclude(chat__in=_others()).exists()


def _others():
    """The bystanders' chats (their runs hold pending attempts of their own)."""
    return Chat.objects.filter(messages__content__startswith="bystander").values("pk")


def test_an_unsaved_chats_first_attempt_is_written_with_its_row_on_an_empty_path():
    """A chat saved by its first admission has an empty path: the attempt built on it
    (seen: no leaf, no message) is written with the chat's row; one built on any other
    path is not."""
    for seen, written in (((None, 0, None), True), ((None, 1, None), False), ((None, 0, 7), False)):
        chat = Chat(provider="openai", model_id="gpt-4.1-mini")
        attempt = Usage(chat=chat, provider="openai", model_id="gpt-4.1-mini", status="pending")
        prompt = Message(chat=chat, role="user", content="first")
        run, execution = runs.enqueue(chat, prompt, start=True, attempt=attempt, seen=seen)
        assert execution is not None and chat.pk is not None and run.chat_id == chat.pk
        rows = list(Usage.objects.filter(run_id=run.pk).values_list("pk", "chat_id"))
        assert rows == ([(attempt.pk, chat.pk)] if written else []), seen
        assert (attempt.pk is not None) is written
        execution.finish("cancelled")
