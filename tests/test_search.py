"""django_llmchat.chats.search: Chat.objects.search on the database's own index (PostgreSQL's
generated tsvector, SQLite's FTS5 table) and the LIKE fallback; what leaves the index."""

from __future__ import annotations

from datetime import timedelta

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from django_llmchat.chats import retention, search
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
    """How many rows of the index itself hold ``word``."""
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
