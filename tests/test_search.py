"""django_llmchat.chats.search: Chat.objects.search on the database's own index (PostgreSQL's
generated tsvector, SQLite's FTS5 table) and the LIKE fallback; what leaves the index."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection, connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_llmchat.chats import retention, search, search_index
from django_llmchat.chats.search import SearchUnavailable, snippet, words_of
from django_llmchat.errors import ArgumentError
from django_llmchat.models import Chat, Message

from .lifecycle_helpers import make_chat

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob")


def chat_of(user, title="", *texts):
    chat = Chat.objects.create(user=user, title=title)
    for i, text in enumerate(texts):
        chat.add_message(role="user" if i % 2 == 0 else "assistant", content=text)
    return chat


def found(words, *user):
    """The ids of the chats found (of ``user`` when given, else of everyone)."""
    chats = Chat.objects.search(words, user=user[0]) if user else Chat.objects.search(words)
    return [c.pk for c in chats]


def test_the_index_the_database_keeps():
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'llmchat_message_search'"
            )
            assert "gin (search_vector)" in cursor.fetchone()[0]
        elif connection.vendor == "sqlite":
            cursor.execute("SELECT name FROM sqlite_master WHERE name LIKE 'llmchat_message_fts%'")
            names = {row[0] for row in cursor.fetchall()}
            assert {"llmchat_message_fts", "llmchat_message_fts_insert"} <= names


def test_matches_every_word_in_one_message_or_the_title_best_first(alice):
    paris = chat_of(alice, "Holidays", "Where should I go?", "The museums of Paris are open late")
    title = chat_of(alice, "Paris museums", "something else")
    half = chat_of(alice, "", "Paris", "and museums elsewhere")  # the words in two messages
    chat_of(alice, "", "nothing to see")

    hits = list(Chat.objects.search("paris MUSEUMS", user=alice))
    assert {c.pk for c in hits} == {paris.pk, title.pk}
    assert half.pk not in [c.pk for c in hits]
    assert hits[0].pk == title.pk  # a title match weighs more
    assert hits[0].search_message_id is None
    best = paris.messages.get(content__startswith="The museums")
    assert hits[1].search_message_id == best.pk
    assert all(c.search_rank > 0 for c in hits)


def test_stems_words_where_the_database_can(alice):
    chat = chat_of(alice, "", "She was running to the station")
    if connection.vendor in ("postgresql", "sqlite"):
        assert found("runs", alice) == [chat.pk]
    assert found("running", alice) == [chat.pk]


def test_never_another_users_chats(alice, bob):
    mine = chat_of(alice, "", "the secret recipe for bread")
    theirs = chat_of(bob, "secret recipe", "the secret recipe for bread")
    assert found("secret recipe", alice) == [mine.pk]
    assert found("secret recipe", bob) == [theirs.pk]
    assert set(found("secret recipe")) == {mine.pk, theirs.pk}  # no user: every chat


def test_every_branch_is_searched(alice):
    chat = chat_of(alice, "", "first prompt")
    prompt = chat.messages.get()
    chat.add_message(role="assistant", content="an answer about giraffes")
    # a regenerated reply off the active path
    Message.objects.create(
        chat=chat, role="assistant", content="zebras are striped", parent=prompt, on_path=False
    )
    assert found("giraffes", alice) == [chat.pk]
    assert found("zebras", alice) == [chat.pk]


def test_edits_and_deletes_leave_the_index(alice):
    chat = chat_of(alice, "", "the word is marmalade")
    message = chat.messages.get()
    assert found("marmalade", alice) == [chat.pk]
    message.content = "the word is porridge"
    message.save()
    assert found("marmalade", alice) == []
    assert found("porridge", alice) == [chat.pk]
    Message.objects.filter(pk=message.pk).update(content="now it is toast")  # no save()
    assert found("porridge", alice) == []
    assert found("toast", alice) == [chat.pk]
    message.delete()
    assert found("toast", alice) == []


def test_replies_stored_by_a_run_are_found(fake_llm, alice):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = make_chat(fake_llm, alice, title="")
    assert found("sunny", alice) == [chat.pk]  # the reply the run stored
    assert found("weather paris", alice) == [chat.pk]  # the prompt


def test_erased_text_leaves_the_index(fake_llm, alice, bob):
    fake_llm.configure("openai", "gpt-4.1-mini")
    make_chat(fake_llm, alice)
    kept = make_chat(fake_llm, bob)
    assert _indexed("sunny") == 4
    call_command("llmchat_erase_user", "alice", "--yes")
    assert found("sunny") == [kept.pk]
    assert _indexed("sunny") == 2  # bob's tool result and reply only


def test_retained_away_text_leaves_the_index(fake_llm, alice):
    fake_llm.configure("openai", "gpt-4.1-mini", RETENTION={"days": 7, "action": "anonymise"})
    old = make_chat(fake_llm, alice, days_old=8)
    new = make_chat(fake_llm, alice)
    assert set(found("sunny")) == {old.pk, new.pk}
    assert _indexed("sunny") == 4
    retention.apply_retention()
    assert found("sunny") == [new.pk]
    assert found("paris") == [new.pk]  # the title went too
    assert _indexed("sunny") == 2  # the new chat's tool result and reply


def _indexed(word: str) -> int:
    """How many rows of the index itself hold ``word`` (on SQLite, as a search sees it:
    the newest messages indexed first)."""
    search_index.catch_up()
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT count(*) FROM llmchat_message WHERE search_vector @@ "
                "plainto_tsquery('english', %s)",
                [word],
            )
        else:
            cursor.execute(
                "SELECT count(*) FROM llmchat_message_fts WHERE llmchat_message_fts MATCH %s",
                [word],
            )
        return cursor.fetchone()[0]


def test_encrypted_content_is_not_indexed_and_search_is_off(alice):
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [Fernet.generate_key().decode()]}):
        chat_of(alice, "", "an encrypted confession")
        with pytest.raises(SearchUnavailable, match=r"LLMCHAT\['ENCRYPTION_KEYS'\]"):
            Chat.objects.search("confession", user=alice)
    assert Message.objects.filter(chat__user=alice).count() == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT content FROM llmchat_message")
        assert cursor.fetchone()[0].startswith("llmchat-fernet:")
    # the ciphertext's letters are not words of the index either
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT count(*) FROM llmchat_message WHERE search_vector IS NOT NULL")
        else:
            search_index.catch_up()  # not by a search's catch-up either
            cursor.execute("SELECT count(*) FROM llmchat_message_fts_docsize")
        assert cursor.fetchone()[0] == 0


def test_a_search_without_words_is_refused(alice):
    with pytest.raises(ArgumentError, match="at least one word"):
        Chat.objects.search("  ?! ", user=alice)


def test_the_like_fallback(alice, monkeypatch):
    """A database without an index of its own (or SQLite without FTS5) matches words with
    LIKE: the same chats, the first matching message."""
    monkeypatch.setattr(search, "_fts_available", lambda alias: False)
    monkeypatch.setattr(
        search, "_postgresql", lambda qs, words, *a: search._fallback(qs, words, Message)
    )
    chat = chat_of(alice, "", "hello there", "general kenobi")
    titled = chat_of(alice, "Kenobi", "x")
    hits = list(Chat.objects.search("kenobi", user=alice))
    assert [c.pk for c in hits] == [titled.pk, chat.pk]
    assert hits[1].search_message_id == chat.messages.get(content="general kenobi").pk
    assert found("hello kenobi", alice) == []


def test_words_and_snippets():
    assert words_of("Paris, paris; and MUSÉES 2024") == ["paris", "and", "musées", "2024"]
    assert len(words_of(" ".join(f"w{i}" for i in range(40)))) == search.MAX_WORDS
    text = "intro " * 60 + "the museums of Paris " + "outro " * 60
    piece = snippet(text, ["paris"])
    assert "museums of Paris" in piece and piece.startswith("… ") and piece.endswith(" …")
    assert len(piece) <= 170
    assert snippet("short", ["nothing"]) == "short"


def test_the_setting_is_checked():
    from django_llmchat.checks import check_settings

    with override_settings(LLMCHAT={"SEARCH": {"language": "english; drop"}}):
        errors = [e for e in check_settings() if e.id == "llmchat.E063"]
    assert errors and "LLMCHAT['SEARCH']" in errors[0].msg and "'language'" in errors[0].msg
    with override_settings(LLMCHAT={"SEARCH": {"language": "simple", "lang": 1}}):
        errors = [e for e in check_settings() if e.id == "llmchat.E063"]
    assert [e.msg for e in errors] == ["LLMCHAT['SEARCH']: unknown key 'lang'."]
    with override_settings(LLMCHAT={"SEARCH": {"language": "french"}}):
        assert not [e for e in check_settings() if e.id == "llmchat.E063"]


def test_postgresql_uses_the_configured_language(alice):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL text search configurations")
    chat = chat_of(alice, "", "the cats were sleeping")
    assert found("cat sleep", alice) == [chat.pk]
    with override_settings(LLMCHAT={"SEARCH": {"language": "simple"}}):
        # the index holds english stems; a 'simple' query of "cats" finds no "cat" lexeme
        assert found("cats", alice) == []


def test_old_rows_and_timestamps_do_not_matter(alice):
    chat = chat_of(alice, "", "an old message about pelicans")
    Chat.objects.filter(pk=chat.pk).update(updated_at=timezone.now() - timedelta(days=900))
    assert found("pelicans", alice) == [chat.pk]


# -- SQLite: the newest messages indexed in batches ------------------------------------------
sqlite_only = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="SQLite's FTS5 index is written in batches"
)


@pytest.fixture
def aligned():
    """The mark where the next message's id starts (every message there is indexed):
    the ids earlier tests used and deleted make no batch of the next one."""
    search_index.catch_up()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE llmchat_search_mark SET message_id = coalesce((SELECT seq FROM "
            "sqlite_sequence WHERE name = 'llmchat_message'), message_id)"
        )


def _fts(sql: str, params=()):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def _mark() -> int:
    return _fts("SELECT message_id FROM llmchat_search_mark")


def _in_index() -> int:
    return _fts("SELECT count(*) FROM llmchat_message_fts_docsize")


def _holds(word: str) -> int:
    return _fts(
        "SELECT count(*) FROM llmchat_message_fts WHERE llmchat_message_fts MATCH %s", [word]
    )


def _consistent() -> None:
    """FTS5's own check of the index, the newest messages indexed first: against every
    message's content (``rank`` 1) when none is ciphertext, which the index leaves out;
    else of the index alone. It raises when a row is indexed twice, or a delete left words
    of text that was never indexed."""
    search_index.catch_up()
    every = not _fts(
        "SELECT count(*) FROM llmchat_message WHERE content LIKE %s", [search_index.CIPHERTEXT]
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO llmchat_message_fts(llmchat_message_fts, rank) "
            "VALUES ('integrity-check', %s)",
            [1 if every else 0],
        )


@sqlite_only
def test_the_newest_messages_are_indexed_in_a_batch(alice, aligned):
    """A message above the mark waits for its batch: the insert making BATCH of them
    indexes them all at once (one FTS5 write) and moves the mark past them."""
    chat = chat_of(alice, "", "first words")
    search_index.catch_up()
    mark, indexed = _mark(), _in_index()
    for i in range(search_index.BATCH - 1):
        chat.add_message(role="user", content=f"waiting {i}")
    assert (_mark(), _in_index(), _holds("waiting")) == (mark, indexed, 0)
    last = chat.add_message(role="user", content="waiting last")
    assert _mark() == last.pk
    assert _in_index() == indexed + search_index.BATCH
    assert _holds("waiting") == search_index.BATCH
    _consistent()


@sqlite_only
def test_a_search_finds_the_messages_not_in_a_batch_yet(alice, aligned):
    chat = chat_of(alice, "", "an unusual aardvark")
    assert _holds("aardvark") == 0  # not yet in the index
    assert found("aardvark", alice) == [chat.pk]  # the search indexed it first
    assert _holds("aardvark") == 1
    assert _mark() == Message.objects.latest("pk").pk
    with CaptureQueriesContext(connection) as nothing_new:
        assert found("aardvark", alice) == [chat.pk]
    # the mark's read found nothing newer: no write
    assert not [q for q in nothing_new.captured_queries if q["sql"].startswith("INSERT")]


@sqlite_only
def test_a_message_changed_or_deleted_before_its_batch(alice, aligned):
    """A message above the mark is not in the index: its change or deletion writes
    nothing there (a delete of text never indexed would corrupt it); the batch reads each
    message as it is then."""
    chat = chat_of(alice, "", "kept words", "words going away")
    kept, gone = chat.messages.order_by("pk")
    Message.objects.filter(pk=kept.pk).update(content="changed words")
    Message.objects.filter(pk=gone.pk).delete()
    search_index.catch_up()
    assert (_holds("changed"), _holds("kept"), _holds("going")) == (1, 0, 0)
    _consistent()
    # once indexed, a change and a deletion reach the index at once
    Message.objects.filter(pk=kept.pk).update(content="changed again")
    assert (_holds("again"), _holds("words")) == (1, 0)
    Message.objects.filter(pk=kept.pk).delete()
    assert _holds("again") == 0
    _consistent()


@sqlite_only
def test_a_message_stored_below_the_mark_is_indexed_at_once(alice, aligned):
    """A row given an id at or below the mark (a restore, a fixture) is no batch's: its
    insert indexes it."""
    chat = chat_of(alice, "", "placeholder")
    search_index.catch_up()
    row = chat.messages.get()
    Message.objects.filter(pk=row.pk).delete()
    Message.objects.create(pk=row.pk, chat=chat, role="user", content="restored zebra")
    assert row.pk <= _mark() and _holds("zebra") == 1
    _consistent()


@sqlite_only
def test_a_batch_never_indexes_ciphertext(alice, aligned):
    chat = chat_of(alice, "")
    mark = _mark()
    for i in range(search_index.BATCH):
        chat.add_message(role="user", content=f"plain {i}")
    Message.objects.filter(chat=chat, content__endswith="7").update(
        content="llmchat-fernet:gAAAAAciphertext"
    )
    for i in range(search_index.BATCH):
        chat.add_message(role="user", content=f"llmchat-fernet:gAAAA{i}")
    search_index.catch_up()
    assert _mark() > mark
    assert _holds("plain") == search_index.BATCH - 3  # 7, 17, 27 are ciphertext now
    assert _holds("gAAAAAciphertext") == 0 and _holds("llmchat") == 0
    _consistent()


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_a_search_goes_on_when_the_index_cannot_be_written_now(alice, caplog, aligned):
    """Another connection writing (its transaction open): the search's catch-up cannot
    write, logs it, and the search answers from the index as it is; the next one catches
    up."""
    indexed = chat_of(alice, "", "an indexed heron")
    search_index.catch_up()
    waiting = chat_of(alice, "", "a waiting heron")
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("BEGIN IMMEDIATE")
            cursor.execute("UPDATE llmchat_chat SET title = title WHERE id = %s", [indexed.pk])
            with caplog.at_level(logging.INFO, logger="django_llmchat.search"):
                assert found("heron", alice) == [indexed.pk]
            assert "could not catch up" in caplog.text
            cursor.execute("ROLLBACK")
    finally:
        other.close()
    assert sorted(found("heron", alice)) == sorted([indexed.pk, waiting.pk])


@sqlite_only
@pytest.mark.django_db(transaction=True)
def test_the_migration_to_batches_and_back(alice, aligned):
    """``0006_search_index_batches`` reversed: the messages waiting are indexed and every
    message is indexed by its own insert again; applied: the mark is the last message
    (all of them indexed) and the batches take over."""
    chat = chat_of(alice, "", "a waiting ibis")
    assert _holds("ibis") == 0
    try:
        call_command("migrate", "django_llmchat", "0005", verbosity=0)
        assert _holds("ibis") == 1
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM sqlite_master WHERE name = 'llmchat_search_mark'")
            assert cursor.fetchone() is None
        chat.add_message(role="user", content="an ibis at once")
        assert _fts("SELECT count(*) FROM llmchat_message_fts_docsize") == 2
    finally:
        call_command("migrate", "django_llmchat", verbosity=0)
    assert _mark() == Message.objects.latest("pk").pk
    chat.add_message(role="user", content="a later ibis")
    assert _fts("SELECT count(*) FROM llmchat_message_fts_docsize") == 2  # waits again
    assert found("ibis", alice) == [chat.pk] and _holds("ibis") == 3
    _consistent()
