"""The full-text index of message content (:mod:`django_llmchat.chats.search` reads it), kept by
the database on every write path: what migration ``0001_baseline`` runs after creating
the tables (the models cannot express it), and :func:`rebuild_index` after a change of
language.

PostgreSQL: a ``tsvector`` column set from ``content`` by a ``BEFORE INSERT OR UPDATE``
trigger in the text search configuration ``LLMCHAT["SEARCH"]["language"]`` as it is when
the migration runs (default ``english``), and its GIN index. Existing rows are indexed
once (an UPDATE of every non-empty message). SQLite (built with FTS5): an
external-content FTS5 table and the triggers keeping it in step. Other databases: nothing
(search falls back to ``LIKE``). Ciphertext (encryption at rest) is never indexed.

Schema changes to ``llmchat_message`` made by later migrations on SQLite rebuild the
table and drop its triggers: such a migration must run :func:`sqlite_forwards` again.
"""

from django.db import OperationalError, connections

CIPHERTEXT = "llmchat-fernet:%"
FTS = "llmchat_message_fts"

SQLITE_TRIGGERS = [
    f"""CREATE TRIGGER llmchat_message_fts_insert AFTER INSERT ON llmchat_message
    WHEN new.content NOT LIKE '{CIPHERTEXT}' BEGIN
        INSERT INTO {FTS}(rowid, content) VALUES (new.id, new.content);
    END""",
    f"""CREATE TRIGGER llmchat_message_fts_delete AFTER DELETE ON llmchat_message
    WHEN old.content NOT LIKE '{CIPHERTEXT}' BEGIN
        INSERT INTO {FTS}({FTS}, rowid, content) VALUES ('delete', old.id, old.content);
    END""",
    f"""CREATE TRIGGER llmchat_message_fts_update AFTER UPDATE OF content ON llmchat_message
    BEGIN
        INSERT INTO {FTS}({FTS}, rowid, content) SELECT 'delete', old.id, old.content
         WHERE old.content NOT LIKE '{CIPHERTEXT}';
        INSERT INTO {FTS}(rowid, content) SELECT new.id, new.content
         WHERE new.content NOT LIKE '{CIPHERTEXT}';
    END""",
]


def _language() -> str:
    from .search import LANGUAGE, language

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
        for statement in SQLITE_TRIGGERS:
            cursor.execute(statement)
        cursor.execute(
            f"INSERT INTO {FTS}(rowid, content) SELECT id, content FROM llmchat_message "
            f"WHERE content NOT LIKE '{CIPHERTEXT}'"
        )


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
        for name in ("insert", "delete", "update"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS llmchat_message_fts_{name}")
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
