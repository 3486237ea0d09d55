"""The transitions as one call each on PostgreSQL: the functions of ``django_llmchat/sql/``
(installed by migrations, named with their version), called here and nowhere else.

Each transition has two faces behind one Python function of this package: on PostgreSQL,
when the functions of :data:`FUNCTIONS` are installed, one ``SELECT`` of the function (one
round trip, no ``BEGIN``/``COMMIT`` of its own: the statement is its transaction, or a
part of the caller's); elsewhere (SQLite, another backend, a database migrated without
them) the statements of the other modules, in a transaction. Values reach the functions
already prepared by Django (:func:`django_llmchat.db.prepared.row_json`): encrypted at rest,
redacted, as an INSERT of the row would store them.
"""

from __future__ import annotations

import logging
import threading

from django.db import connections
from django.db.models import signals

from ..db.prepared import execute

logger = logging.getLogger("django_llmchat.runs")

VERSION = 5
"""The newest version of the functions this code calls: ``django_llmchat/sql/v<N>/`` holds
what version N added or changed, each function named with the version it came in
(``llmchat_<transition>_v<N>``), installed by a migration of its own."""

FUNCTIONS = (
    "llmchat_run_leaf_v1",
    "llmchat_run_place_prompt_v1",
    "llmchat_run_release_v1",
    "llmchat_run_enqueue_v5",
    "llmchat_run_claim_v4",
    "llmchat_run_store_last_step_v3",
    "llmchat_run_end_v1",
    "llmchat_run_interrupt_v1",
)

SIGNATURES = {
    "llmchat_run_leaf_v1": "bigint, bigint",
    "llmchat_run_place_prompt_v1": "bigint, bigint, bigint, bigint",
    "llmchat_run_release_v1": "bigint, bigint",
    "llmchat_run_enqueue_v5": (
        "bigint, jsonb, jsonb, jsonb, boolean, boolean, text, timestamptz, timestamptz, "
        "bigint, jsonb, bigint, bigint, bigint, jsonb, boolean"
    ),
    "llmchat_run_claim_v4": (
        "bigint, bigint, boolean, text, text, timestamptz, timestamptz, integer, bigint, bigint, "
        "jsonb, bigint, bigint"
    ),
    "llmchat_run_store_last_step_v3": "bigint, integer, bigint, jsonb, jsonb, text, text",
    "llmchat_run_end_v1": (
        "bigint, integer, bigint, text, text, text, text, timestamptz, bigint, bigint"
    ),
    "llmchat_run_interrupt_v1": "bigint, bigint, text, text, bigint, bigint",
}
"""The arguments this code calls each function with: a database whose function has
others (migrated to an older version) runs the statements instead."""

_installed: dict[str, bool] = {}
_mutex = threading.Lock()


def available(using: str, *models) -> bool:
    """Whether database ``using`` runs the transitions as functions: PostgreSQL with this
    version's functions installed, with the arguments of :data:`SIGNATURES` (checked once
    per process and database), and no
    ``pre_save``/``post_save`` receiver on ``models`` (rows a function writes send no
    signal: with a receiver the ORM writes them)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return False
    for model in models:
        if signals.pre_save.has_listeners(model) or signals.post_save.has_listeners(model):
            return False
    found = _installed.get(using)
    if found is None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM unnest(%s::text[]) AS f(signature) "
                "WHERE to_regprocedure(f.signature) IS NOT NULL",
                [[f"{name}({SIGNATURES[name]})" for name in FUNCTIONS]],
            )
            found = cursor.fetchone()[0] == len(FUNCTIONS)
        if not found:
            logger.warning(
                "database %r has not the run functions of version %d (migrate "
                "django_llmchat): its runs take several statements per transition",
                using,
                VERSION,
            )
        with _mutex:
            _installed[using] = found
    return found


def forget() -> None:
    """Check the databases again at the next transition (after a migration in this
    process: the tests' databases)."""
    with _mutex:
        _installed.clear()


_SQL: dict[str, str] = {}


def call(using: str, function: str, *args: tuple) -> tuple:
    """``SELECT * FROM function(args...)``, each argument a ``(value, SQL type)`` pair:
    the one row of its OUT parameters."""
    sql = _SQL.get(function)
    if sql is None:
        casts = ", ".join(f"%s::{kind}" for _, kind in args)
        sql = _SQL[function] = f"SELECT * FROM {function}({casts})"
    return execute(connections[using], sql, [value for value, _ in args], _one_row)


def _one_row(cursor) -> tuple:
    return cursor.fetchone()


def _forget_after_migrate(**kwargs) -> None:
    forget()


signals.post_migrate.connect(_forget_after_migrate, dispatch_uid="llmchat-run-functions")
