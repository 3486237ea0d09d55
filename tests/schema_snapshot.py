"""A normalized snapshot of the app's schema in a database: what ``tests/test_schema_baseline.py``
compares with the snapshots of ``tests/fixtures/schema/`` (one per database vendor).

The snapshot lists, one line each and sorted, what a migration chain leaves in the
database for the app (``llmchat_*``): on PostgreSQL each table's columns (type,
nullability, default, identity), its indexes (their definitions), constraints, triggers,
and the functions (arguments, a hash of the body, the description); on SQLite each
table's column definitions and table constraints (read from ``sqlite_master``, sorted:
the order of columns is not compared), its indexes, triggers and virtual tables. Column
order is left out on both: a column added by a later migration comes last, the same
column created with its table comes in the model's order.

Write the snapshot of a fresh database migrated with the migrations on disk::

    python tests/schema_snapshot.py                      # SQLite: tests/fixtures/schema/sqlite.txt
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/NAME python tests/schema_snapshot.py
                                                         # PostgreSQL: .../postgresql.txt

(The PostgreSQL run creates and drops the test database ``test_NAME``.)
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "schema"


def _fold(sql: str | None) -> str:
    return " ".join((sql or "").split())


def _split_top(body: str) -> list[str]:
    """``body`` split at its top-level commas (outside parentheses and quotes)."""
    parts, depth, current, quote = [], 0, [], ""
    for char in body:
        if quote:
            current.append(char)
            if char == quote:
                quote = ""
            continue
        if char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(_fold("".join(current)))
            current = []
            continue
        current.append(char)
    parts.append(_fold("".join(current)))
    return [p for p in parts if p]


def sqlite(connection) -> list[str]:
    lines = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE tbl_name LIKE 'llmchat\\_%' ESCAPE '\\' AND sql IS NOT NULL"
        )
        rows = cursor.fetchall()
    for kind, name, table, sql in rows:
        sql = _fold(sql)
        if kind == "table" and not sql.upper().startswith("CREATE VIRTUAL"):
            match = re.match(r'CREATE TABLE ["\']?(\w+)["\']? ?\((.*)\)$', sql, re.S)
            if match is None:  # a virtual table's own tables (FTS5): as written
                lines.append(f"{kind} {name}: {sql}")
                continue
            for part in _split_top(match[2]):
                lines.append(f"table {name}: {part}")
        else:
            lines.append(f"{kind} {name} on {table}: {sql}")
    return sorted(lines)


_PG_TABLES = """
    SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
       AND c.relname LIKE 'llmchat\\_%'
"""


def postgresql(connection) -> list[str]:
    queries = {
        "column": f"""
            SELECT c.relname || '.' || a.attname || ': ' || format_type(a.atttypid, a.atttypmod)
                   || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
                   || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
                   || CASE a.attidentity WHEN 'd' THEN ' IDENTITY BY DEFAULT'
                                         WHEN 'a' THEN ' IDENTITY ALWAYS' ELSE '' END
              FROM pg_class c
              JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
              LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
             WHERE c.oid IN ({_PG_TABLES})""",
        "index": f"""
            SELECT i.relname || ': ' || pg_get_indexdef(x.indexrelid)
              FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
             WHERE x.indrelid IN ({_PG_TABLES})""",
        "constraint": f"""
            SELECT conrelid::regclass::text || '.' || conname || ': '
                   || pg_get_constraintdef(oid)
              FROM pg_constraint WHERE conrelid IN ({_PG_TABLES})""",
        "trigger": f"""
            SELECT tgname || ': ' || pg_get_triggerdef(oid)
              FROM pg_trigger WHERE NOT tgisinternal AND tgrelid IN ({_PG_TABLES})""",
        "function": """
            SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') -> '
                   || pg_get_function_result(p.oid) || ' ' || p.prokind::text || ' '
                   || l.lanname || ' body ' || md5(p.prosrc)
                   || coalesce(' -- ' || obj_description(p.oid, 'pg_proc'), '')
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              JOIN pg_language l ON l.oid = p.prolang
             WHERE n.nspname = current_schema() AND p.proname LIKE 'llmchat\\_%'""",
    }
    lines = []
    with connection.cursor() as cursor:
        for kind, sql in queries.items():
            cursor.execute(sql)
            lines += [f"{kind} {_fold(line)}" for (line,) in cursor.fetchall()]
    return sorted(lines)


def snapshot(connection) -> str:
    """The schema of the app in ``connection``'s database, as text."""
    lines = {"postgresql": postgresql, "sqlite": sqlite}[connection.vendor](connection)
    return "\n".join(lines) + "\n"


def fixture(vendor: str) -> Path:
    return FIXTURES / f"{vendor}.txt"


def main() -> int:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django.db import connection

    if connection.vendor == "sqlite":  # a file: the in-memory test database is per connection
        connection.settings_dict["TEST"]["NAME"] = str(ROOT / "schema-snapshot.sqlite3")
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        text = snapshot(connection)
    finally:
        connection.creation.destroy_test_db(name, verbosity=0)
    path = fixture(connection.vendor)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"{path.relative_to(ROOT)}: {len(text.splitlines())} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
