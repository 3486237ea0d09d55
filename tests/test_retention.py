"""Retention: LLMCHAT["RETENTION"] deletes or anonymises the transcripts past their days
(per user, per chat), with their attachment files and event streams; the ledger stays,
running chats are never touched."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from django_llmchat import tasks
from django_llmchat.chats import retention
from django_llmchat.checks import check_settings
from django_llmchat.models import Chat, IdempotencyKey, Message, Run, ToolCall, Usage
from tests.lifecycle_helpers import files_of, make_chat, redis_events, stream_exists

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def events():
    yield from redis_events()


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob")


def configure(fake_llm, events, **llmchat):
    return fake_llm.configure("openai", "gpt-4.1-mini", **events, **llmchat)


def storage():
    from django_llmchat.models import Attachment

    return Attachment._meta.get_field("file").storage


@pytest.mark.redis
def test_old_chats_are_deleted_with_their_files_and_streams_the_ledger_stays(
    fake_llm, events, alice
):
    configure(fake_llm, events, RETENTION={"days": 30, "action": "delete"})
    old = make_chat(fake_llm, alice, title="Old", days_old=31)
    new = make_chat(fake_llm, alice, title="New", days_old=29)
    old_files, old_rows = files_of(old), list(old.usages.values_list("pk", flat=True))
    assert old_files and all(storage().exists(name) for name in old_files)
    assert stream_exists(old.pk) and stream_exists(new.pk) and len(old_rows) == 2
    cost = Usage.objects.filter(user_id=alice.pk).cost().total

    found, done = retention.apply_retention()

    assert [d.chat_id for d in found] == [old.pk] and done == {"delete": 1, "anonymise": 0}
    assert not Chat.objects.filter(pk=old.pk).exists()
    assert not Message.objects.filter(chat_id=old.pk).exists()
    assert not ToolCall.objects.filter(chat_id=old.pk).exists()
    assert not IdempotencyKey.objects.filter(chat_id=old.pk).exists()
    assert not any(storage().exists(name) for name in old_files)
    assert not stream_exists(old.pk)
    # the ledger stays, with the title; the young chat is untouched
    assert Usage.objects.filter(pk__in=old_rows, chat_title="Old").count() == 2
    assert Usage.objects.filter(user_id=alice.pk).cost().total == cost
    assert Chat.objects.filter(pk=new.pk).exists() and stream_exists(new.pk)
    assert all(storage().exists(name) for name in files_of(new))


@pytest.mark.redis
def test_anonymise_empties_the_transcript_and_keeps_its_shape(fake_llm, events, alice):
    configure(fake_llm, events, RETENTION={"days": 7, "action": "anonymise"})
    chat = make_chat(fake_llm, alice, title="Secret plans", days_old=8, context={"city": "x"})
    files = files_of(chat)
    roles = list(chat.messages.values_list("role", "input_tokens"))

    found, done = retention.apply_retention()

    assert done == {"delete": 0, "anonymise": 1}
    chat.refresh_from_db()
    assert chat.anonymised_at is not None
    assert (chat.title, chat.user_id, chat.context, chat.client_id) == ("", None, {}, "")
    assert list(chat.messages.values_list("role", "input_tokens")) == roles
    assert set(chat.messages.values_list("content", flat=True)) == {""}
    arguments = ToolCall.objects.filter(chat=chat).values_list("arguments", flat=True)
    assert list(arguments) == [{}]
    assert ToolCall.objects.filter(chat=chat, name="weather_lookup").exists()
    assert not any(storage().exists(name) for name in files)
    assert not stream_exists(chat.pk)
    assert not IdempotencyKey.objects.filter(chat=chat).exists()
    # the ledger keeps its user (the limits count it)
    assert set(chat.usages.values_list("user_id", flat=True)) == {alice.pk}
    # and the next pass leaves it alone
    assert retention.apply_retention()[0] == []


def test_a_running_chat_is_never_touched(fake_llm, alice):
    configure(fake_llm, {}, RETENTION={"days": 1})
    chats = {}
    for status in Run.UNFINISHED:
        chat = make_chat(fake_llm, alice, title=status, days_old=5)
        Run.objects.create(chat=chat, status=status)
        chats[status] = chat
    done_chat = make_chat(fake_llm, alice, title="done", days_old=5)
    found, done = retention.apply_retention()
    assert [d.chat_id for d in found] == [done_chat.pk] and done["delete"] == 1
    assert Chat.objects.filter(pk__in=[c.pk for c in chats.values()]).count() == 3


def test_per_chat_and_per_user_days(fake_llm, alice, bob):
    configure(
        fake_llm,
        {},
        RETENTION={"days": 30},
        RETENTION_FOR=lambda user: (
            {"days": 3, "action": "anonymise"} if user.username == "bob" else None
        ),
    )
    a_old = make_chat(fake_llm, alice, title="a old", days_old=10)
    a_short = make_chat(fake_llm, alice, title="a short", days_old=10, retention_days=5)
    a_long = make_chat(fake_llm, alice, title="a long", days_old=40, retention_days=365)
    b_old = make_chat(fake_llm, bob, title="b old", days_old=4)
    b_kept = make_chat(fake_llm, bob, title="b kept", days_old=4, retention_days=10)
    nobody = make_chat(fake_llm, None, title="nobody", days_old=31)

    found = {d.chat_id: (d.action, d.days) for d in retention.due()}
    assert found == {
        a_short.pk: ("delete", 5),
        b_old.pk: ("anonymise", 3),
        nobody.pk: ("delete", 30),
    }
    assert retention.policy_for(bob) == retention.Policy(days=3, action="anonymise")
    assert retention.policy_for(alice) == retention.Policy(days=30, action="delete")
    retention.apply_retention()
    assert set(Chat.objects.values_list("pk", flat=True)) == {
        a_old.pk,
        a_long.pk,
        b_old.pk,
        b_kept.pk,
    }
    assert Chat.objects.get(pk=b_old.pk).anonymised_at is not None


def test_days_none_keeps_all_but_the_chats_with_days_of_their_own(fake_llm, alice):
    configure(fake_llm, {}, RETENTION={"days": None})
    make_chat(fake_llm, alice, title="forever", days_old=3000)
    short = make_chat(fake_llm, alice, title="short", days_old=2, retention_days=1)
    assert [d.chat_id for d in retention.due()] == [short.pk]


def test_retention_off_does_nothing(fake_llm, alice):
    configure(fake_llm, {})
    make_chat(fake_llm, alice, days_old=3000, retention_days=1)
    assert retention.due() == [] and retention.apply_retention()[1] == {
        "delete": 0,
        "anonymise": 0,
    }
    out = StringIO()
    call_command("llmchat_retention", stdout=out)
    assert "Retention is off" in out.getvalue() and Chat.objects.count() == 1


def test_the_command_dry_run_lists_and_changes_nothing(fake_llm, alice):
    configure(fake_llm, {}, RETENTION={"days": 30})
    chat = make_chat(fake_llm, alice, title="Holiday", days_old=45)
    out = StringIO()
    call_command("llmchat_retention", "--dry-run", stdout=out)
    text = out.getvalue()
    assert f"would delete chat {chat.pk} (user {alice.pk}," in text and "Holiday" in text
    assert "1 chat due; dry run." in text and Chat.objects.filter(pk=chat.pk).exists()
    out = StringIO()
    call_command("llmchat_retention", stdout=out)
    assert "1 chat deleted, 0 anonymised; their usage rows stay." in out.getvalue()
    assert not Chat.objects.filter(pk=chat.pk).exists() and Usage.objects.count() == 2


def test_the_periodic_task(fake_llm, alice):
    configure(fake_llm, {}, RETENTION={"days": 1, "action": "anonymise"})
    make_chat(fake_llm, alice, days_old=2)
    assert tasks.apply_retention.name == "django_llmchat.tasks.apply_retention"
    assert tasks.apply_retention() == 1
    assert tasks.apply_retention() == 0


def test_a_chat_changed_since_it_was_listed_is_left(fake_llm, alice, monkeypatch):
    configure(fake_llm, {}, RETENTION={"days": 1})
    chat = make_chat(fake_llm, alice, days_old=2)
    listed = retention.due()

    def due(now=None):
        Chat.objects.filter(pk=chat.pk).update(updated_at=timezone.now())  # a new message
        return listed

    monkeypatch.setattr(retention, "due", due)
    assert retention.apply_retention()[1]["delete"] == 0
    assert Chat.objects.filter(pk=chat.pk).exists()


@pytest.mark.parametrize(
    "value, message",
    [
        ([], 'LLMCHAT["RETENTION"] must be None or a dict'),
        ({"days": -1}, 'LLMCHAT["RETENTION"]["days"] must be a whole number'),
        ({"days": "90"}, 'LLMCHAT["RETENTION"]["days"] must be a whole number'),
        ({"days": 9, "action": "drop"}, 'LLMCHAT["RETENTION"]["action"] must be "delete"'),
        ({"dayz": 9}, 'LLMCHAT["RETENTION"] has an unknown key'),
    ],
)
def test_the_system_checks_name_the_setting(value, message):
    with override_settings(LLMCHAT={"RETENTION": value}):
        problems = [p for p in check_settings() if p.id == "llmchat.E050"]
    assert problems and message in problems[0].msg


def test_the_system_checks_refuse_a_resolver_that_is_not_callable():
    with override_settings(LLMCHAT={"RETENTION_FOR": "no.such.path"}):
        problems = [p for p in check_settings() if p.id == "llmchat.E051"]
    assert problems and "LLMCHAT['RETENTION_FOR']" in problems[0].msg
    with override_settings(LLMCHAT={"RETENTION": {"days": 90, "action": "anonymise"}}):
        assert [p for p in check_settings() if p.id.startswith("llmchat.E05")] == []


def test_a_chat_with_days_of_its_own_is_listed_by_them(fake_llm, alice):
    configure(fake_llm, {}, RETENTION={"days": 30})
    chat = make_chat(fake_llm, alice, days_old=3, retention_days=2)
    now = timezone.now()
    assert retention.due(now - timedelta(days=2)) == []
    assert [d.days for d in retention.due(now)] == [2]
    assert Chat.objects.filter(pk=chat.pk).exists()


def test_one_policy_for_all_finds_the_due_chats_in_two_indexed_queries(fake_llm, django_user_model):
    """Without ``RETENTION_FOR`` the pass lists no users: two queries whatever their
    number (the chats with days of their own, the others by the policy's days), each on an
    index of its own, so its time follows the chats due, not the table (see the Scale
    figures of docs/benchmarks.md)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    configure(fake_llm, {}, RETENTION={"days": 30})
    now = timezone.now()

    def chats_of(users):
        for user in users:
            old = Chat.objects.create(user=user, title="old")
            Chat.objects.create(user=user, title="new")
            Chat.objects.filter(pk=old.pk).update(updated_at=now - timedelta(days=31))
        return [c for c in Chat.objects.filter(title="old").values_list("pk", flat=True)]

    def counted():
        with CaptureQueriesContext(connection) as ctx:
            found = retention.due(now)
        return {d.chat_id for d in found}, ctx.captured_queries

    few = django_user_model.objects.bulk_create(
        django_user_model(username=f"few{i}") for i in range(3)
    )
    old = chats_of(few)
    own = Chat.objects.create(user=None, title="own days", retention_days=1)
    Chat.objects.filter(pk=own.pk).update(updated_at=now - timedelta(days=2))
    found, small = counted()
    assert found == {*old, own.pk} and len(small) == 2
    many = django_user_model.objects.bulk_create(
        django_user_model(username=f"many{i}")
        for i in range(600)  # more than a chunk
    )
    old = chats_of(many)
    found, large = counted()
    assert found == {*old, own.pk} and len(large) == 2
    assert all("DISTINCT" not in q["sql"] and 'user_id" IN' not in q["sql"] for q in large)
    if connection.vendor == "postgresql":  # the indexes serve the two queries
        used = []
        with connection.cursor() as cursor:
            cursor.execute("SET enable_seqscan = off")
            try:
                for query in large:
                    cursor.execute("EXPLAIN " + query["sql"])
                    used.append(" ".join(row[0] for row in cursor.fetchall()))
            finally:
                cursor.execute("RESET enable_seqscan")
        assert "llmchat_chat_own_days_idx" in used[0], used[0]
        assert "llmchat_chat_updated_idx" in used[1], used[1]
