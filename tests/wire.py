"""What a block of code sends the database, as the database sees it: its statements (no
``BEGIN``/``COMMIT``/savepoints) and the number of transactions that wrote, each one
commit. On PostgreSQL from libpq's own trace of the protocol (each frontend ``Query`` or
``Sync`` one round trip); on SQLite from the sqlite3 module's trace callback, which sees
the ``BEGIN`` and ``COMMIT`` the module sends itself.

    with Wire() as wire:
        chat.ask("hello")
    assert wire.statements == [...] and wire.commits == 2
"""

from __future__ import annotations

import re
import tempfile

from django.db import connection

_CONTROL = re.compile(r"^(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE|END)\b", re.I)
_WRITES = re.compile(r"^(INSERT|UPDATE|DELETE)\b|^SELECT \* FROM llmchat_run_\w+_v\d\(", re.I)


def name_of(sql: str) -> str:
    """``"<VERB> <table>"`` of a statement (a SELECT's own table follows its last FROM; a
    run function's call is ``SELECT <function>``)."""
    sql = sql.strip()
    function = re.match(r"SELECT \* FROM (llmchat_run_\w+)\(", sql)
    if function:
        return "SELECT " + function.group(1)
    found = re.findall(r'(?:INTO|UPDATE|FROM)\s+"?(\w+)"?', sql)
    verb = sql.split()[0].upper()
    if not found:  # SELECT f(...): the function
        return verb + " " + re.split(r"[\s(]", sql.split(None, 1)[1], maxsplit=1)[0]
    return verb + " " + (found[-1] if verb == "SELECT" else found[0])


class Wire:
    """The statements and commits of the default connection inside the block."""

    def __enter__(self) -> Wire:
        connection.ensure_connection()
        self.sent: list[str] = []
        # PostgreSQL: the frontend messages as libpq traced them, ``(kind, text)``: a
        # ``Query`` holds its values quoted in, a ``Parse`` its ``$n`` placeholders
        self.messages: list[tuple[str, str]] = []
        if connection.vendor == "postgresql":
            from psycopg import pq

            self.file = tempfile.TemporaryFile(mode="w+")
            self.pgconn = connection.connection.pgconn
            self.pgconn.trace(self.file.fileno())
            self.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        else:
            connection.connection.set_trace_callback(self._traced)
        return self

    def _traced(self, sql: str) -> None:
        """One statement SQLite runs: the module's own come as comments (``-- PRAGMA``),
        and a trigger's program as its statement again (the same text, with its
        parameters: a statement of its own would differ)."""
        if sql.lstrip().startswith("--") or (self.sent and self.sent[-1] == sql):
            return
        self.sent.append(sql)

    def __exit__(self, *exc) -> None:
        if connection.vendor == "postgresql":
            self.pgconn.untrace()
            self.file.seek(0)
            for line in self.file.read().splitlines():
                fields = line.split("\t")
                if fields[0] == "F" and len(fields) > 2:
                    self.messages.append((fields[2], fields[3] if len(fields) > 3 else ""))
                if fields[0] == "F" and len(fields) > 3 and fields[2] in ("Query", "Parse"):
                    text = fields[3].strip()
                    if fields[2] == "Parse":  # Parse "name" "sql" ...
                        text = text.split('" "', 1)[-1]
                    self.sent.append(text.strip('"'))
            self.file.close()
        else:
            connection.connection.set_trace_callback(None)

    def kinds(self) -> list[str]:
        """The kinds of the frontend messages sent (PostgreSQL): ``Query``, ``Parse``,
        ``Bind``, ``Sync``..."""
        return [kind for kind, _ in self.messages]

    def count(self, statement: str) -> int:
        """How many times ``statement`` (``"BEGIN"``, ``"COMMIT"``) was sent as it is."""
        return sum(1 for sql in self.sent if sql.strip().upper() == statement)

    @property
    def statements(self) -> list[str]:
        return [name_of(sql) for sql in self.sent if not _CONTROL.match(sql.strip())]

    @property
    def commits(self) -> int:
        """Transactions that wrote: a ``BEGIN`` … ``COMMIT`` holding a write, or a write
        outside one (its own transaction)."""
        commits, block, wrote = 0, False, False
        for sql in self.sent:
            sql = sql.strip()
            verb = sql.split()[0].upper() if sql else ""
            if verb == "BEGIN":
                block, wrote = True, False
            elif verb in ("COMMIT", "END"):
                commits += 1 if wrote else 0
                block = False
            elif verb == "ROLLBACK" and not sql.upper().startswith("ROLLBACK TO"):
                block = False
            elif _WRITES.match(sql):
                if block:
                    wrote = True
                else:
                    commits += 1
        return commits
