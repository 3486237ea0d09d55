"""What the migration installing the run functions (``django_llmchat/sql/v1/``) uses."""

from pathlib import Path

from django.db import migrations

SQL = Path(__file__).resolve().parent.parent / "sql"


class PostgreSQLOnly(migrations.RunSQL):
    """``RunSQL`` run on PostgreSQL only (the functions are PL/pgSQL)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


def install(version: str, *files: str, before: str = "") -> PostgreSQLOnly:
    """The operation installing ``files`` of ``sql/<version>/`` (in order) on PostgreSQL,
    after the statement ``before`` when given, reversed by that folder's ``drop.sql``."""
    folder = SQL / version
    return PostgreSQLOnly(
        sql=[*([before] if before else []), *((folder / name).read_text() for name in files)],
        reverse_sql=(folder / "drop.sql").read_text(),
    )
