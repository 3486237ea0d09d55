"""What the run modules share (``django_llmchat/runs/base.py``): the worker's name, the
place of a queued prompt, telling a chat's followers, sending a run's task.

One transition at a time, as tests/runs/conftest.py says."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import transaction

from django_llmchat import runs
from django_llmchat.events import RunFinished
from django_llmchat.models import Chat, Message, Run
from django_llmchat.models.message import QUEUED_POSITION
from django_llmchat.runs import base
from tests.factories import _after_everything, fresh, prompt_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("bystanders")]


SEND = runs.send  # the real one (the tests record what is sent instead)


def test_send_runs_the_task_for_the_run(chat, fake_llm):
    """send: the task answering the run (here in-process, no broker)."""
    fake_llm.script("Sent.")
    run, _ = runs.enqueue(chat, prompt_of(chat))
    SEND(chat.pk, run.pk, task_id="abc")
    assert fresh(run).status == "succeeded"
    assert chat.messages.filter(role="assistant").get().content == "Sent."


def test_the_worker_name_is_host_and_pid():
    import os
    import socket

    assert runs.worker_name() == f"{socket.gethostname()}:{os.getpid()}"[:255]


def test_a_queued_run_starting_puts_its_prompt_right_after_the_chats_last_message(chat):
    prompt = chat.add_message(role="user", content="Q")
    run = Run.objects.create(chat=chat, prompt=prompt)
    place = _after_everything(chat, prompt)
    assert runs.claim(chat.pk).execution.pk == run.pk
    assert Message.objects.get(pk=prompt.pk).position == place


def test_a_run_ending_puts_its_queued_prompt_right_after_the_chats_last_message(chat):
    run, execution = runs.enqueue(chat, prompt_of(chat), start=True)
    place = _after_everything(chat, Message.objects.get(pk=run.prompt_id))
    assert execution.finish("cancelled")
    assert Message.objects.get(pk=run.prompt_id).position == place


@pytest.fixture
def published(monkeypatch):
    """Events fanned out (``streams.publish``), recorded, with EVENTS_URL as if set."""
    events: list[tuple] = []
    monkeypatch.setattr(base.streams, "enabled", lambda: True)
    monkeypatch.setattr(base.streams, "publish", lambda chat_id, e: events.append((chat_id, e)))
    return events


def test_followers_are_told_a_run_ended_once_the_transaction_commits(chat, published, monkeypatch):
    """The chat's followers get ``run_finished`` with the run, its status and its error
    type (none when it has none), after the commit only; nothing without EVENTS_URL."""
    with transaction.atomic():
        runs.tell_followers(chat.pk, 7, "failed", "worker_lost")
        runs.tell_followers(chat.pk, 8, "cancelled")
        assert published == []
    assert [(c, type(e), e.run_id, e.status, e.error_type) for c, e in published] == [
        (chat.pk, RunFinished, "7", "failed", "worker_lost"),
        (chat.pk, RunFinished, "8", "cancelled", None),
    ]
    monkeypatch.setattr(base.streams, "enabled", lambda: False)
    runs.tell_followers(chat.pk, 9, "failed")
    assert len(published) == 2


def test_a_follower_that_cannot_be_told_is_logged(chat, monkeypatch, caplog):
    def down(chat_id, event):
        raise ConnectionError("redis is down")

    monkeypatch.setattr(base.streams, "enabled", lambda: True)
    monkeypatch.setattr(base.streams, "publish", down)
    with caplog.at_level("WARNING", logger=runs.logger.name):
        runs.tell_followers(chat.pk, 7, "failed")
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"could not tell chat {chat.pk}'s followers run 7 ended: redis is down"
    ]


def test_send_passes_the_task_id_on(chat, monkeypatch):
    calls = []
    task = SimpleNamespace(apply_async=lambda *args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.setattr(base, "current_app", SimpleNamespace(tasks={runs.COMPLETE_CHAT: task}))
    SEND(chat.pk, 5, task_id="abc")
    SEND(chat.pk, 6)
    assert calls == [
        (((chat.pk,), {"run_id": 5}), {"task_id": "abc"}),
        (((chat.pk,), {"run_id": 6}), {"task_id": None}),
    ]


def test_the_worker_name_inside_a_celery_task_is_the_workers_cut_to_the_column(monkeypatch):
    import os

    import celery

    def task_on(hostname):
        return SimpleNamespace(request=SimpleNamespace(hostname=hostname))

    monkeypatch.setattr(celery, "current_task", task_on("w1@box"))
    assert runs.worker_name() == f"w1@box:{os.getpid()}"
    monkeypatch.setattr(celery, "current_task", task_on("h" * 300))
    assert runs.worker_name() == "h" * 255


def test_the_worker_name_outside_a_task_is_asked_once_per_process(monkeypatch):
    """The host's name is kept per process: a forked child (another pid) names its own
    pid, and asks the host again (the parent's answer is not the child's to keep)."""
    import os
    import socket

    asked = []
    monkeypatch.setattr(socket, "gethostname", lambda: asked.append(1) or f"box{len(asked)}")
    monkeypatch.setattr(base, "_THIS_HOST", {})
    parent = os.getpid()
    assert runs.worker_name() == runs.worker_name() == f"box1:{parent}"
    assert len(asked) == 1
    monkeypatch.setattr(os, "getpid", lambda: parent + 1)  # the child, after a fork
    assert runs.worker_name() == runs.worker_name() == f"box2:{parent + 1}"
    assert len(asked) == 2
    assert base._THIS_HOST == {parent + 1: f"box2:{parent + 1}"}  # the parent's let go
    monkeypatch.setattr(socket, "gethostname", lambda: "h" * 300)
    monkeypatch.setattr(os, "getpid", lambda: parent + 2)
    assert runs.worker_name() == "h" * 255  # cut to the column


def test_a_prompt_moved_into_place_reads_after_its_chats_messages_only(chat, monkeypatch):
    """The moved prompt takes the clock's position, or the one right after the chat's
    last message when the clock is not past it (equal included); other chats' messages
    do not count."""
    prompt = chat.add_message(role="user", content="Q")
    last = chat.add_message(role="assistant", content="A")
    Message.objects.filter(pk=prompt.pk).update(position=QUEUED_POSITION + 5)
    monkeypatch.setattr(base, "clock_position", lambda: last.position)
    runs._move_prompt_into_place(chat.pk, prompt.pk)
    assert Message.objects.get(pk=prompt.pk).position == last.position + 1
    other = Chat.objects.create()
    far = other.add_message(role="user", content="elsewhere")
    Message.objects.filter(pk=far.pk).update(position=last.position + 10**12)
    Message.objects.filter(pk=prompt.pk).update(position=QUEUED_POSITION + 5)
    monkeypatch.setattr(base, "clock_position", lambda: last.position + 10)
    runs._move_prompt_into_place(chat.pk, prompt.pk)
    assert Message.objects.get(pk=prompt.pk).position == last.position + 10
