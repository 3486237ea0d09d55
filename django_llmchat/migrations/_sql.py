"""What the migrations installing the run functions (``django_llmchat/sql/``) share."""

from django.db import migrations


class PostgreSQLOnly(migrations.RunSQL):
    """``RunSQL`` run on PostgreSQL only (the functions are PL/pgSQL)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
