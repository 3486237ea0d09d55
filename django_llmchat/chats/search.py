"""Full-text search over a user's chats: their titles and every message of every branch.

``Chat.objects.search(words, user=...)`` (and ``GET chats/?search=``) answers the chats
whose title, or one message, holds every word, best first, each annotated with
``search_rank`` and ``search_message_id`` (the best matching message; ``None`` when only
the title matched). The index behind it is kept by the database itself on every write
path (the ORM, ``QuerySet.update()``, the PL/pgSQL run functions, raw SQL):

* PostgreSQL: ``llmchat_message.search_vector``, a ``tsvector`` column set from
  ``content`` by a ``BEFORE INSERT OR UPDATE`` trigger in the text search configuration
  ``LLMCHAT["SEARCH"]["language"]`` (read when migration 0019 runs), with a GIN index.
* SQLite with FTS5: ``llmchat_message_fts``, an external-content FTS5 table kept by
  triggers (the Porter stemmer over the ``unicode61`` tokenizer).
* Any other database (or SQLite built without FTS5): ``LIKE`` on every word.

A deleted or emptied message (erasure, retention) leaves the index with its row's value.
Encrypted content (``LLMCHAT["ENCRYPTION_KEYS"]``) is never indexed: the database only
sees ciphertext, and with keys configured searching raises :class:`SearchUnavailable`.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import connections
from django.db.models import BooleanField, Case, F, FloatField, IntegerField, Q, Value, When
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce, Greatest

from ..errors import ArgumentError, LLMChatError
from .search_index import LANGUAGE, catch_up, language

__all__ = [
    "MAX_WORDS",
    "SearchUnavailable",
    "language",
    "search_chats",
    "snippet",
    "words_of",
]

MAX_WORDS = 16
"""Words of a search beyond this many are ignored."""
_WORD = re.compile(r"\w+")
CIPHERTEXT_PREFIX = "llmchat-fernet:"  # protected.MARKER: such values are never indexed
FTS_TABLE = "llmchat_message_fts"


class SearchUnavailable(LLMChatError):
    """Searching is off: message content is encrypted at rest, so no index holds its
    words."""


def setting_errors(value: Any) -> list[str]:
    """What is wrong with a ``LLMCHAT["SEARCH"]`` value (for the system check)."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return [f"must be a dict like {{'language': 'english'}}, got {type(value).__name__}"]
    problems = [f"unknown key {key!r}" for key in value if key != "language"]
    lang = value.get("language", "english")
    if not isinstance(lang, str) or not LANGUAGE.fullmatch(lang):
        problems.append(
            f"'language' must be the name of a PostgreSQL text search configuration "
            f"(lower-case letters and '_', such as 'english' or 'simple'), got {lang!r}"
        )
    return problems


def words_of(text: str) -> list[str]:
    """The distinct words of ``text``, lower-cased, at most :data:`MAX_WORDS`."""
    found: list[str] = []
    for word in _WORD.findall(text or ""):
        word = word.lower()[:64]
        if word not in found:
            found.append(word)
    return found[:MAX_WORDS]


def _fts_available(alias: str) -> bool:
    connection = connections[alias]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = %s", [FTS_TABLE]
        )
        return cursor.fetchone() is not None


def search_chats(queryset, text: str, *, messages, encrypted: bool):
    """``queryset`` (chats) narrowed to those matching ``text``, best first, annotated with
    ``search_rank`` (higher is better) and ``search_message_id``. ``messages`` is the
    message model; ``encrypted``: whether content is encrypted at rest (search is off)."""
    Message = messages
    words = words_of(text)
    if not words:
        raise ArgumentError("a search needs at least one word (letters or digits)")
    if encrypted:
        raise SearchUnavailable(
            "Search is off: LLMCHAT['ENCRYPTION_KEYS'] encrypts message content at rest, "
            "and no index holds the words of encrypted text."
        )
    alias = queryset.db
    vendor = connections[alias].vendor
    chat_table = connections[alias].ops.quote_name(queryset.model._meta.db_table)
    message_table = connections[alias].ops.quote_name(Message._meta.db_table)
    if vendor == "postgresql":
        queryset = _postgresql(queryset, words, chat_table, message_table)
    elif vendor == "sqlite" and _fts_available(alias):
        catch_up(alias)  # the newest messages, indexed in a batch of their own
        queryset = _sqlite(queryset, words, chat_table, message_table)
    else:
        queryset = _fallback(queryset, words, Message)
    return queryset.order_by("-search_rank", "-updated_at", "-id")


def _postgresql(queryset, words, chat, message):
    query = "plainto_tsquery(%s::regconfig, %s)"
    params = [language(), " ".join(words)]
    hit = f"m.chat_id = {chat}.id AND m.search_vector @@ {query}"
    title = f"to_tsvector(%s::regconfig, {chat}.title)"
    return (
        queryset.alias(
            _title_hit=RawSQL(f"{title} @@ {query}", [params[0], *params], BooleanField()),
            _message_hit=RawSQL(
                f"EXISTS (SELECT 1 FROM {message} m WHERE {hit})", params, BooleanField()
            ),
        )
        .filter(Q(_title_hit=True) | Q(_message_hit=True))
        .annotate(
            search_message_id=RawSQL(
                f"(SELECT m.id FROM {message} m WHERE {hit} "
                f"ORDER BY ts_rank(m.search_vector, {query}) DESC, m.id LIMIT 1)",
                params * 2,
                IntegerField(),
            ),
            search_rank=Greatest(
                RawSQL(
                    f"CASE WHEN {title} @@ {query} THEN 2 * ts_rank({title}, {query}) ELSE 0 END",
                    [params[0], *params] * 2,
                    FloatField(),
                ),
                RawSQL(
                    f"COALESCE((SELECT max(ts_rank(m.search_vector, {query})) FROM {message} m "
                    f"WHERE {hit}), 0)",
                    params * 2,
                    FloatField(),
                ),
            ),
        )
    )


def _title_matches(words) -> Q:
    condition = Q()
    for word in words:
        condition &= Q(title__icontains=word)
    return condition


def _sqlite(queryset, words, chat, message):
    match = " ".join(f'"{word}"' for word in words)  # words are \w+: no quote to escape
    # FTS5's rank (bm25: lower is better) is read in the MATCH query itself
    joined = (
        f"FROM (SELECT rowid AS id, rank FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s) f "
        f"JOIN {message} m ON m.id = f.id"
    )
    return (
        queryset.alias(
            _title_hit=Case(When(_title_matches(words), then=Value(1.0)), default=Value(0.0))
        )
        .filter(_title_matches(words) | Q(pk__in=RawSQL(f"SELECT m.chat_id {joined}", [match])))
        .annotate(
            search_message_id=RawSQL(
                f"(SELECT m.id {joined} WHERE m.chat_id = {chat}.id ORDER BY f.rank, m.id LIMIT 1)",
                [match],
                IntegerField(),
            ),
            # bm25 is lower for better matches; a title match adds one
            search_rank=F("_title_hit")
            + Coalesce(
                RawSQL(
                    f"(SELECT -min(f.rank) {joined} WHERE m.chat_id = {chat}.id)",
                    [match],
                    FloatField(),
                ),
                Value(0.0),
            ),
        )
    )


def _fallback(queryset, words, Message):
    from django.db.models import OuterRef, Subquery

    hits = Message.objects.all()
    for word in words:
        hits = hits.filter(content__icontains=word)
    first = hits.filter(chat=OuterRef("pk")).order_by("id").values("id")[:1]
    return queryset.filter(_title_matches(words) | Q(pk__in=hits.values("chat_id"))).annotate(
        search_message_id=Subquery(first, output_field=IntegerField()),
        search_rank=Case(When(_title_matches(words), then=Value(2.0)), default=Value(1.0)),
    )


def snippet(content: str, words: list[str], width: int = 160) -> str:
    """Up to ``width`` characters of ``content`` around the first of ``words`` found in it
    (a stemmed match that is not there as typed: the start), as plain text."""
    text = " ".join((content or "").split())
    lowered = text.lower()
    found = [i for i in (lowered.find(w) for w in words) if i >= 0]
    if not found:  # the stemmer matched another form: try each word's stem-ish prefix
        found = [i for i in (lowered.find(w[:5]) for w in words if len(w) > 5) if i >= 0]
    start = max(0, min(found) - width // 3) if found else 0
    if start:
        space = text.find(" ", start)
        start = space + 1 if 0 <= space < start + 20 else start
    piece = text[start : start + width]
    if start + width < len(text):
        piece = piece.rsplit(" ", 1)[0] + " …"
    return ("… " if start else "") + piece
