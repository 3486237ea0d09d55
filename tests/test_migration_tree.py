"""Migration 0013 gives existing messages their parent (the previous message of the chat
that is not a system one), leaves queued prompts for their run to place, and goes back."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from django_llmchat.models.message import QUEUED_POSITION

APP = "django_llmchat"
BEFORE = [(APP, "0012_feedback")]


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target or executor.loader.graph.leaf_nodes(APP))
    return executor


@pytest.mark.django_db(transaction=True)
def test_old_messages_get_their_parents_and_the_step_goes_back(monkeypatch):
    monkeypatch.setattr("django_llmchat.migrations.0013_message_tree.BATCH", 2, raising=False)
    executor = migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    Chat, Message = old.get_model(APP, "Chat"), old.get_model(APP, "Message")
    one, two, empty = Chat.objects.create(), Chat.objects.create(), Chat.objects.create()
    rows = {}
    for chat, role, text, position in [
        (one, "system", "rules", 1),
        (one, "user", "Q1", 2),
        (two, "user", "other chat", 3),
        (one, "assistant", "A1", 4),
        (one, "tool", "T1", 5),
        (one, "system", "summary", 6),
        (one, "assistant", "A2", 7),
        (one, "user", "queued", QUEUED_POSITION + 8),
        (two, "assistant", "other reply", 9),
    ]:
        rows[text] = Message.objects.create(
            chat_id=chat.pk, role=role, content=text, position=position
        ).pk
    # same position: by id
    rows["tie"] = Message.objects.create(chat_id=one.pk, role="user", content="tie", position=7).pk

    migrate(None)
    from django_llmchat.models import Message as NewMessage

    parents = dict(NewMessage.objects.values_list("pk", "parent_id"))
    assert parents[rows["rules"]] is None and parents[rows["summary"]] is None
    assert parents[rows["Q1"]] is None
    assert parents[rows["A1"]] == rows["Q1"]
    assert parents[rows["T1"]] == rows["A1"]
    assert parents[rows["A2"]] == rows["T1"]  # over the summary: outside the tree
    assert parents[rows["tie"]] == rows["A2"]
    assert parents[rows["queued"]] is None  # placed by its run
    assert parents[rows["other chat"]] is None
    assert parents[rows["other reply"]] == rows["other chat"]
    assert NewMessage.objects.filter(on_path=False).count() == 0
    assert empty.pk not in NewMessage.objects.values_list("chat_id", flat=True)

    migrate(BEFORE)  # reversible
    migrate(None)
    assert dict(NewMessage.objects.values_list("pk", "parent_id")) == parents
