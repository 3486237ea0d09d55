"""The provider messages of a chat are built incrementally: a load reuses what the last
one built and reads only newer rows, while edits, deletions and late rows are seen."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat.loop import transcript
from django_llmchat.loop.transcript import forget_history, load_history
from django_llmchat.models import Chat, Message, ToolCall

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def chat():
    forget_history()
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    for n in range(20):
        chat.add_message(role="user", content=f"question {n}")
        chat.add_message(role="assistant", content=f"answer {n}")
    return chat


def test_a_load_reuses_the_messages_built_before_and_reads_only_new_rows(chat):
    first = load_history(chat).messages
    chat.add_message(role="user", content="one more")
    with CaptureQueriesContext(connection) as ctx:
        second = load_history(chat).messages
    assert len(ctx) == 1  # the count and the new rows, in one statement
    assert all(a is b for a, b in zip(first, second, strict=False))  # not built again
    assert [m.content for m in second[-2:]] == ["answer 19", "one more"]
    assert second[-1].ref == chat.messages.latest("position").pk
    second.append("the run's own")  # a run's list is its own
    assert len(load_history(chat).messages) == 41


def test_edits_deletions_and_marks_are_seen(chat):
    load_history(chat)
    old = Message.objects.get(chat=chat, content="question 3")
    old.content = "question 3, edited"
    old.save()
    assert "question 3, edited" in [m.content for m in load_history(chat).messages]

    Message.objects.get(chat=chat, content="answer 5").cache_until_here()
    marked = [m for m in load_history(chat).messages if m.cache_boundary]
    assert [m.content for m in marked] == ["answer 5"]

    chat.with_instructions("Be brief.")  # deletes nothing but adds; then replaces
    chat.with_instructions("Be very brief.")
    contents = [m.content for m in load_history(chat).messages]
    assert "Be very brief." in contents and "Be brief." not in contents

    Message.objects.filter(chat=chat, content="question 7").delete()
    assert "question 7" not in [m.content for m in load_history(chat).messages]


def test_a_row_stored_before_the_newest_is_seen(chat):
    load_history(chat)
    first = Message.objects.filter(chat=chat).order_by("position").first()
    # stored elsewhere with a position among the older ones (another host's clock)
    Message.objects.bulk_create(
        [Message(chat=chat, role="user", content="late", position=first.position + 1)]
    )
    contents = [m.content for m in load_history(chat).messages]
    assert contents[1] == "late" and len(contents) == 41


def test_a_deletion_with_a_late_row_is_seen(chat):
    load_history(chat)
    first = Message.objects.filter(chat=chat).order_by("position").first()
    Message.objects.filter(chat=chat, content="answer 9").delete()
    Message.objects.bulk_create(
        [Message(chat=chat, role="user", content="late", position=first.position + 1)]
    )
    contents = [m.content for m in load_history(chat).messages]
    assert contents[1] == "late" and "answer 9" not in contents and len(contents) == 40


def test_an_update_elsewhere_is_seen_after_the_ttl(chat, monkeypatch):
    monkeypatch.setattr(transcript, "HISTORY_CACHE_TTL", 0.0)
    load_history(chat)
    Message.objects.filter(chat=chat, content="answer 2").update(content="answer two")
    assert "answer two" in [m.content for m in load_history(chat).messages]


def test_tool_calls_and_pending_ones_across_loads(chat):
    load_history(chat)
    reply = chat.add_message(role="assistant", content="")
    call = ToolCall.objects.create(
        chat=chat, message=reply, call_id="call_1", name="lookup", arguments={"q": 1}
    )
    loaded = load_history(chat)
    assert loaded.pending == [call.pk]
    assert loaded.messages[-1].tool_calls[0].arguments == {"q": 1}
    chat.add_message(role="tool", content="found", parent_tool_call=call)
    loaded = load_history(chat)
    assert loaded.pending == []
    result = loaded.messages[-1]
    assert (result.tool_call_id, result.tool_name, result.tool_call_ref) == (
        "call_1",
        "lookup",
        call.pk,
    )


def test_attachments_are_not_kept_between_loads(chat):
    load_history(chat)
    chat.add_message(role="user", content="see this", attachments=[("a.txt", b"hello")])
    loaded = load_history(chat)
    assert loaded.messages[-1].attachments[0].data == b"hello"
    again = load_history(chat)
    assert again.messages[0] is not loaded.messages[0]  # read whole again
    assert again.messages[-1].attachments[0].data == b"hello"


def test_calls_sharing_an_id_keep_their_own_item_ids():
    """A vendor repeated a call id: each call keeps its own item id (replayed to the
    Responses API, named in the UI stream); a row stored before the per-call list reads
    them by call id."""
    from django_llmchat.loop.transcript import call_item_ids

    raw = {"item_ids": {"c": "fc_2"}, "call_item_ids": ["fc_1", "fc_2"]}
    assert call_item_ids(raw, ["c", "c"]) == ["fc_1", "fc_2"]
    assert call_item_ids({"item_ids": {"c": "fc_2", "d": "fc_3"}}, ["c", "d"]) == ["fc_2", "fc_3"]
    assert call_item_ids({}, ["c"]) == [None]
    assert call_item_ids({"call_item_ids": ["fc_1"]}, ["c", "c"]) == [None, None]  # mismatched


def _stored(chat, role, content):
    """A message stored with its provider message, as a run holds it once stored."""
    message = Message.objects.create(chat=chat, role=role, content=content)
    return transcript.provider_message(message, calls=[], attachments=[]), message


def test_a_run_answered_here_extends_the_kept_history_without_a_read(chat):
    """``remember_answered`` after a run on the path it read: the kept history ends with
    its prompt and reply, ``answered_history`` gives it without a statement, and a later
    load reads only rows after the reply (none), agreeing on the count."""
    loaded = load_history(chat)
    assert transcript.answered_history(chat) is None  # read, not answered here
    prompt = _stored(chat, "user", "question 20")
    reply = _stored(chat, "assistant", "answer 20")
    stored = [(m, row.pk, row.position) for m, row in (prompt, reply)]
    transcript.remember_answered(chat, loaded.seen, stored)
    with CaptureQueriesContext(connection) as ctx:
        kept = transcript.answered_history(chat)
    assert len(ctx) == 0
    assert [m.content for m in kept.messages[-3:]] == ["answer 19", "question 20", "answer 20"]
    assert kept.seen == (reply[1].pk, loaded.seen[1] + 2, reply[1].pk)
    again = load_history(chat)
    assert again.seen == kept.seen and again.messages[-1] is reply[0]


def test_a_history_moved_on_since_the_run_read_it_is_not_extended(chat):
    """A load after the run's read (another message stored meanwhile) moved the kept
    history on: the run's reply is not added to it, and nothing is answered here."""
    loaded = load_history(chat)
    chat.add_message(role="user", content="from elsewhere")
    load_history(chat)
    reply = _stored(chat, "assistant", "late answer")
    transcript.remember_answered(chat, loaded.seen, [(reply[0], reply[1].pk, reply[1].position)])
    assert transcript.answered_history(chat) is None
    assert load_history(chat).messages[-1].content == "late answer"  # read, in its place


def test_an_answered_history_expires_with_the_ttl(chat, monkeypatch):
    loaded = load_history(chat)
    reply = _stored(chat, "assistant", "answer 20")
    transcript.remember_answered(chat, loaded.seen, [(reply[0], reply[1].pk, reply[1].position)])
    assert transcript.answered_history(chat) is not None
    monkeypatch.setattr(transcript.time, "monotonic", lambda: 10**12)
    assert transcript.answered_history(chat) is None
