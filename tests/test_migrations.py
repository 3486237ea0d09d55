"""Migration 0004 moves the state runs now own over from where it lived before."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

APP = "django_llmchat"


@pytest.mark.django_db(transaction=True)
def test_queued_marks_and_chat_statuses_become_runs():
    executor = MigrationExecutor(connection)
    executor.migrate([(APP, "0003_drop_redundant_fk_indexes")])
    old = executor.loader.project_state([(APP, "0003_drop_redundant_fk_indexes")]).apps
    Chat, Message = old.get_model(APP, "Chat"), old.get_model(APP, "Message")
    ToolCall = old.get_model(APP, "ToolCall")

    waiting = Chat.objects.create(status="running")
    Message.objects.create(chat=waiting, role="user", content="Q1")
    q2 = Message.objects.create(chat=waiting, role="user", content="Q2", raw={"queued": True})
    Message.objects.create(chat=waiting, role="assistant", content="A1")
    q3 = Message.objects.create(chat=waiting, role="user", content="Q3", raw={"queued": True})

    stuck = Chat.objects.create(status="running")
    Message.objects.create(chat=stuck, role="user", content="Lost?")
    failed = Chat.objects.create(status="failed", error="openai: 500 from sk-test")
    Message.objects.create(chat=failed, role="user", content="Oops", raw={"queued": False})
    paused = Chat.objects.create(status="interrupted")
    call_msg = Message.objects.create(chat=paused, role="assistant", content="")
    ToolCall.objects.create(chat=paused, message=call_msg, call_id="c", name="pay")
    idle = Chat.objects.create(status="idle")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes(APP))

    from django_llmchat.models import Chat as NewChat
    from django_llmchat.models import Message as NewMessage
    from django_llmchat.models import Run

    def runs_of(chat):
        return list(
            Run.objects.filter(chat_id=chat.pk).order_by("id").values_list("status", flat=True)
        )

    # the prompts that waited for their reply are queued runs, in order, with no marks left
    assert runs_of(waiting) == ["queued", "queued"]
    assert [r.prompt_id for r in Run.objects.filter(chat_id=waiting.pk).order_by("id")] == [
        q2.pk,
        q3.pk,
    ]
    assert not NewMessage.objects.filter(raw__has_key="queued").exists()
    assert [m.content for m in NewChat.objects.get(pk=waiting.pk).transcript()] == [
        "Q1",
        "A1",
        "Q2",
        "Q3",
    ]
    # a chat left running is a run whose lease ran out: the recovery resumes it
    stuck_run = Run.objects.get(chat_id=stuck.pk)
    assert stuck_run.status == "running" and stuck_run.lease_expires_at is not None
    assert NewChat.objects.get(pk=stuck.pk).active_run_id == stuck_run.pk
    from django_llmchat.runs import stale_runs

    assert stuck_run.pk in [r.pk for r in stale_runs()]
    # a failed chat: a failed run, with safe words (the old error text is not carried over)
    failed_run = Run.objects.get(chat_id=failed.pk)
    assert failed_run.status == "failed" and "sk-test" not in failed_run.error
    assert runs_of(paused) == ["awaiting_approval"]
    assert runs_of(idle) == []
    assert NewChat.objects.get(pk=idle.pk).status == "idle"
    assert NewChat.objects.get(pk=paused.pk).status == "awaiting_approval"
