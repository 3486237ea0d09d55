"""The full-text index of message content (:mod:`django_llmchat.chats.search` reads it), kept by
the database on every write path: what migration ``0001_baseline`` runs after creating
the tables (the models cannot express it), and :func:`rebuild_index` after a change of
language.

PostgreSQL: a ``tsvector`` column set from ``content`` by a ``BEFORE INSERT OR UPDATE``
trigger in the text search configuration ``LLMCHAT["SEARCH"]["language"]`` as it is when
the migration runs (default ``english``), and its GIN index. Existing rows are indexed
once (an UPDATE of every non-empty message). SQLite (built with FTS5): an
external-content FTS5 table and the triggers keeping it in step, the newest messages in
batches of :data:`BATCH` (each FTS5 write costs about what the message's own INSERT
does: one write a batch), up to the mark of ``llmchat_search_mark``; a search first
indexes the messages above it (:func:`catch_up`). Other databases: nothing (search falls
back to ``LIKE``). Ciphertext (encryption at rest) is never indexed.

Schema changes to ``llmchat_message`` made by later migrations on SQLite rebuild the
table and drop its triggers: such a migration must run :func:`sqlite_forwards` again.
"""

import logging
import re

from django.db import OperationalError, connections, transaction

from ..conf import settings

logger = logging.getLogger("django_llmchat.search")

CIPHERTEXT = "llmchat-fernet:%"
FTS = "llmchat_message_fts"

MARK = "llmchat_search_mark"
BATCH = 32
"""SQLite: messages are indexed in batches of this many (a batch is one FTS5 write, where
one message a transaction is one each: most of an insert's cost)."""

# a changed message's old words out of the index, its new ones in (ciphertext: neither)
_REINDEX = f"""BEGIN
        INSERT INTO {FTS}({FTS}, rowid, content) SELECT 'delete', old.id, old.content
         WHERE old.content NOT LIKE '{CIPHERTEXT}';
        INSERT INTO {FTS}(rowid, content) SELECT new.id, new.content
         WHERE new.content NOT LIKE '{CIPHERTEXT}';
    END"""

SQLITE_TRIGGERS = [
    # one trigger, its statements in order (two triggers on the same INSERT fire in no
    # set order: a batch moving the mark first would have the row indexed twice): a
    # message at or below the mark (an id given by hand, a restored row) indexed now; the
    # insert that makes a batch of the messages above it indexes them all, then moves it
    f"""CREATE TRIGGER llmchat_message_fts_insert AFTER INSERT ON llmchat_message
    WHEN new.id <= (SELECT message_id FROM {MARK})
      OR new.id >= (SELECT message_id FROM {MARK}) + {BATCH}
    BEGIN
        INSERT INTO {FTS}(rowid, content) SELECT new.id, new.content
         WHERE new.id <= (SELECT message_id FROM {MARK})
           AND new.content NOT LIKE '{CIPHERTEXT}';
        INSERT INTO {FTS}(rowid, content) SELECT id, content FROM llmchat_message
         WHERE new.id >= (SELECT message_id FROM {MARK}) + {BATCH}
           AND id > (SELECT message_id FROM {MARK}) AND id <= new.id
           AND content NOT LIKE '{CIPHERTEXT}';
        UPDATE {MARK} SET message_id = new.id WHERE new.id >= message_id + {BATCH};
    END""",
    # a message above the mark is not in the index yet: its batch reads it as it is then
    f"""CREATE TRIGGER llmchat_message_fts_delete AFTER DELETE ON llmchat_message
    WHEN old.content NOT LIKE '{CIPHERTEXT}' AND old.id <= (SELECT message_id FROM {MARK})
    BEGIN
        INSERT INTO {FTS}({FTS}, rowid, content) VALUES ('delete', old.id, old.content);
    END""",
    f"""CREATE TRIGGER llmchat_message_fts_update AFTER UPDATE OF content ON llmchat_message
    WHEN old.id <= (SELECT message_id FROM {MARK}) {_REINDEX}""",
]
"""SQLite's triggers keeping the FTS5 index: every message at or below the mark
(``llmchat_search_mark.message_id``) that is not ciphertext is in the index, as its content
is now; the messages above it are indexed in a batch by the insert that makes
:data:`BATCH` of them, or by :func:`catch_up` (a search calls it first)."""

# the index of a release before the batches: every message indexed by its INSERT
_SQLITE_TRIGGERS_ONE_BY_ONE = [
    f"""CREATE TRIGGER llmchat_message_fts_insert AFTER INSERT ON llmchat_message
    WHEN new.content NOT LIKE '{CIPHERTEXT}' BEGIN
        INSERT INTO {FTS}(rowid, content) VALUES (new.id, new.content);
    END""",
    f"""CREATE TRIGGER llmchat_message_fts_delete AFTER DELETE ON llmchat_message
    WHEN old.content NOT LIKE '{CIPHERTEXT}' BEGIN
        INSERT INTO {FTS}({FTS}, rowid, content) VALUES ('delete', old.id, old.content);
    END""",
    f"""CREATE TRIGGER llmchat_message_fts_update AFTER UPDATE OF content ON llmchat_message
    {_REINDEX}""",
]
_TRIGGER_NAMES = ("insert", "delete", "update")

# the messages above the mark, indexed; the mark moved past them (SQLite)
_CATCH_UP = [
    f"INSERT INTO {FTS}(rowid, content) SELECT id, content FROM llmchat_message "
    f"WHERE id > (SELECT message_id FROM {MARK}) AND content NOT LIKE '{CIPHERTEXT}'",
    f"UPDATE {MARK} SET message_id = (SELECT max(id) FROM llmchat_message) "
    f"WHERE message_id < (SELECT max(id) FROM llmchat_message)",
]


LANGUAGE = re.compile(r"^[a-z_]{1,63}$")


def language() -> str:
    """The text search configuration of ``LLMCHAT["SEARCH"]`` (default ``english``)."""
    options = settings.SEARCH or {}
    return options.get("language", "english") if isinstance(options, dict) else "english"


def _language() -> str:
    name = language()
    if not LANGUAGE.fullmatch(name):  # the system check names the setting too
        raise ValueError(f"LLMCHAT['SEARCH']['language'] is not a configuration name: {name!r}")
    return name


def sqlite_forwards(schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        try:
            cursor.execute(
                f"CREATE VIRTUAL TABLE {FTS} USING fts5(content, content='llmchat_message', "
                "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')"
            )
        except OperationalError:  # SQLite built without FTS5: search uses LIKE
            return
        cursor.execute(
            f"INSERT INTO {FTS}(rowid, content) SELECT id, content FROM llmchat_message "
            f"WHERE content NOT LIKE '{CIPHERTEXT}'"
        )
        _sqlite_batches(cursor)


def _sqlite_batches(cursor) -> None:
    """The mark (every message there is now, indexed: the earlier triggers indexed each
    one, or the messages above an earlier mark are indexed now) and the triggers
    indexing in batches, in place of any earlier ones."""
    cursor.execute(f"CREATE TABLE IF NOT EXISTS {MARK} (message_id integer NOT NULL)")
    cursor.execute(f"SELECT count(*) FROM {MARK}")
    if cursor.fetchone()[0]:
        for statement in _CATCH_UP:
            cursor.execute(statement)
    else:
        cursor.execute(
            f"INSERT INTO {MARK} (message_id) SELECT coalesce(max(id), 0) FROM llmchat_message"
        )
    for name in _TRIGGER_NAMES:
        cursor.execute(f"DROP TRIGGER IF EXISTS llmchat_message_fts_{name}")
    for statement in SQLITE_TRIGGERS:
        cursor.execute(statement)


def _has_fts(cursor) -> bool:
    cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = %s", [FTS])
    return cursor.fetchone() is not None


def batches_forwards(apps, schema_editor) -> None:
    """Migration ``0006``: SQLite's index from one write per message to batches (the
    messages indexed so far are every message: the mark is the last)."""
    if schema_editor.connection.vendor != "sqlite":
        return
    with schema_editor.connection.cursor() as cursor:
        if _has_fts(cursor):
            _sqlite_batches(cursor)


def batches_backwards(apps, schema_editor) -> None:
    """Back to one write per message: the messages above the mark indexed first."""
    if schema_editor.connection.vendor != "sqlite":
        return
    with schema_editor.connection.cursor() as cursor:
        if not _has_fts(cursor):
            return
        for statement in _CATCH_UP[:1]:
            cursor.execute(statement)
        for name in _TRIGGER_NAMES:
            cursor.execute(f"DROP TRIGGER IF EXISTS llmchat_message_fts_{name}")
        cursor.execute(f"DROP TABLE IF EXISTS {MARK}")
        for statement in _SQLITE_TRIGGERS_ONE_BY_ONE:
            cursor.execute(statement)


def catch_up(using: str = "default") -> None:
    """SQLite: index the messages above the mark (fewer than :data:`BATCH`, the newest),
    so a search finds every message there is. Nothing to do (most searches after a
    batch): one read. Where the database cannot be written now (another process's write
    since this transaction began to read, a lock held past the timeout), the search goes
    on without them: the next insert's batch, or the next search, indexes them."""
    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        try:
            cursor.execute(
                f"SELECT 1 FROM llmchat_message WHERE id > (SELECT message_id FROM {MARK}) LIMIT 1"
            )
        except OperationalError:  # no index (SQLite without FTS5)
            return
        if cursor.fetchone() is None:
            return
    try:
        with transaction.atomic(using=using), connection.cursor() as cursor:
            for statement in _CATCH_UP:
                cursor.execute(statement)
    except OperationalError as exc:
        logger.info("the search index could not catch up now (%s): it will later", exc)


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        # a trigger, not a generated column: the run functions insert whole rows
        # (``INSERT INTO llmchat_message VALUES (row.*)``), which a generated column refuses
        schema_editor.execute("ALTER TABLE llmchat_message ADD COLUMN search_vector tsvector")
        schema_editor.execute(
            "CREATE FUNCTION llmchat_message_search_vector() RETURNS trigger "
            "LANGUAGE plpgsql AS $$ BEGIN "
            "NEW.search_vector := CASE WHEN left(NEW.content, 15) = 'llmchat-fernet:' "
            f"THEN NULL ELSE to_tsvector('{_language()}'::regconfig, NEW.content) END; "
            "RETURN NEW; END $$"
        )
        schema_editor.execute(
            "CREATE TRIGGER llmchat_message_search BEFORE INSERT OR UPDATE OF content, "
            "search_vector ON llmchat_message FOR EACH ROW "
            "EXECUTE FUNCTION llmchat_message_search_vector()"
        )
        schema_editor.execute("UPDATE llmchat_message SET content = content WHERE content <> ''")
        schema_editor.execute(
            "CREATE INDEX llmchat_message_search ON llmchat_message USING gin (search_vector)"
        )
    elif vendor == "sqlite":
        sqlite_forwards(schema_editor)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute("DROP TRIGGER IF EXISTS llmchat_message_search ON llmchat_message")
        schema_editor.execute("DROP FUNCTION IF EXISTS llmchat_message_search_vector()")
        schema_editor.execute("ALTER TABLE llmchat_message DROP COLUMN IF EXISTS search_vector")
    elif vendor == "sqlite":
        for name in _TRIGGER_NAMES:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS llmchat_message_fts_{name}")
        schema_editor.execute(f"DROP TABLE IF EXISTS {MARK}")
        schema_editor.execute(f"DROP TABLE IF EXISTS {FTS}")


def rebuild_index(using: str = "default") -> bool:
    """Index every message again, in the language configured now (``SEARCH["language"]``).

    PostgreSQL's index is built in one language when the migrations run: after changing
    it, call this once (it rewrites the search column of every message, so on a large
    table run it off-peak). Returns whether there was an index to rebuild (``False`` on a
    database whose search needs none)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    with connection.schema_editor() as editor:
        backwards(None, editor)
        forwards(None, editor)
    return True
