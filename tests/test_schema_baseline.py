"""The release baseline: migrations ``0001_baseline`` (the schema, from the models, with
the full-text search the models cannot express) and ``0002_run_functions`` (the run
functions of ``django_llmchat/sql/v1/``, PostgreSQL only) leave an empty database with the
schema the 23 migrations before them left, as recorded in ``tests/fixtures/schema/``
(``postgresql.txt``, ``sqlite.txt``: :mod:`tests.schema_snapshot`), written from that
chain before it was replaced.

One difference is by design: the chain installed ``llmchat_run_enqueue_v1`` and
``llmchat_run_enqueue_v2`` (which called v1 and then opened the first attempt); the
baseline installs one ``llmchat_run_enqueue_v1`` with v2's arguments and both bodies
folded. :func:`expected` applies that to the recorded snapshot before comparing. The
lines of ``llmchat_run_store_last_step_v2`` (installed beside ``_v1``) and of
``llmchat_run_leaf_v1`` (its body now PL/pgSQL) were recorded from the chain's third
migration, ``0003_run_functions_v2``; those of ``llmchat_run_enqueue_v3`` and
``llmchat_run_store_last_step_v3`` from ``0004_run_functions_v3``. After the baseline
come only the migrations installing a version of the run functions (``sql/v<N>/``, one
each, PostgreSQL only), and ``0006_search_index_batches`` (SQLite only: the table
``llmchat_search_mark`` and the triggers indexing messages in batches, recorded in
``sqlite.txt`` from it): the schema of the other tables is the baseline's.

``0001_baseline`` replaces the old chain (``replaces``): a database that applied all 23 is
treated as migrated to it, and ``0002_run_functions`` then installs the functions (and
drops the two enqueue functions the old chain left).

**Folding a later migration into the baseline** (for example an ``0024_...`` adding an
index, merged from another branch), from the repository's root:

0. First record the schema the chain as merged gives (``0001_baseline``,
   ``0002_run_functions``, the new migration, depending on ``0002_run_functions``): that
   is what the rebuilt baseline must give. On both databases::

       python tests/schema_snapshot.py
       DATABASE_URL=postgres://postgres@127.0.0.1:5432/NAME python tests/schema_snapshot.py

1. Make sure the database schema a migration writes is in the models (an index in the
   model's ``Meta.indexes``); delete the migration file, and write its name into
   ``replaces`` of ``django_llmchat/migrations/0001_baseline.py`` (and into
   :data:`REPLACED` below) if any database may have applied it. (Keeping it instead as
   ``0003_...``, depending on ``0002_run_functions``, is allowed too: at most three
   migrations; then only step 0 and the snapshots' commit apply.)
2. Regenerate the schema operations of 0001 from the models::

       mv django_llmchat/migrations/0001_baseline.py /tmp/0001_baseline.py
       mv django_llmchat/migrations/0002_run_functions.py /tmp/0002_run_functions.py
       python manage.py makemigrations django_llmchat --name baseline

   and copy into the new file, from ``/tmp/0001_baseline.py``: the module docstring,
   ``replaces``, the imports of ``_search`` and the last operation
   (``migrations.RunPython(_search.forwards, _search.backwards, elidable=False)``). Put
   ``0002_run_functions.py`` back (it depends on ``0001_baseline``).
3. ``python manage.py makemigrations --check django_llmchat`` says nothing to do.
4. ``python -m pytest tests/test_schema_baseline.py`` on SQLite, and with ``DATABASE_URL``
   on PostgreSQL: the rebuilt chain gives the schema recorded in step 0. Commit the
   snapshots with the migrations (``git diff tests/fixtures/schema/`` shows just the
   folded change).
"""

from __future__ import annotations

import difflib
import re

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

from tests.schema_snapshot import fixture, snapshot

APP = "django_llmchat"
BASELINE = [(APP, "0001_baseline"), (APP, "0002_run_functions")]
# the migrations written before the first release, which 0001_baseline replaces
REPLACED = [
    "0001_initial",
    "0002_chat_interrupt_reason",
    "0003_drop_redundant_fk_indexes",
    "0004_runs",
    "0005_history_summaries",
    "0006_chat_client_id",
    "0007_usage_dashboard",
    "0008_limits",
    "0009_usage_pending_attempts",
    "0010_idempotency_keys",
    "0011_usage_ledger",
    "0012_feedback",
    "0013_message_tree",
    "0014_run_functions",
    "0015_run_enqueue_v2",
    "0016_run_reserved_cost",
    "0017_idempotency_key_per_chat",
    "0018_chat_retention_indexes",
    "0019_message_search",
    "0020_chat_title_source",
    "0021_forks_and_shares",
    "0022_chat_archive_pin_tags",
    "0023_chat_double_texting",
]

pytestmark = pytest.mark.django_db(transaction=True)

_ENQUEUE = re.compile(r"^function llmchat_run_enqueue_v(?P<version>[12])\((?P<rest>.*)$")


def _folded(lines: list[str]) -> list[str]:
    """The run functions with ``llmchat_run_enqueue_v2`` folded into ``_v1``: its
    arguments and result under v1's name, its body and description not compared (the
    folded body is v1's and v2's together); the old v1 (fewer arguments) gone."""
    found = []
    names = {m["version"] for line in lines if (m := _ENQUEUE.match(line))}
    for line in lines:
        match = _ENQUEUE.match(line)
        if match is None:
            found.append(line)
        elif match["version"] == max(names):
            found.append("function llmchat_run_enqueue_v1(" + match["rest"].split(" body ")[0])
    return sorted(found)


def expected(vendor: str) -> str:
    """The recorded schema, with the differences the baseline makes by design."""
    return "\n".join(_folded(fixture(vendor).read_text().splitlines())) + "\n"


def _compare(actual: str, vendor: str) -> None:
    want = expected(vendor)
    got = "\n".join(_folded(actual.splitlines())) + "\n"
    diff = "".join(
        difflib.unified_diff(
            want.splitlines(True), got.splitlines(True), f"recorded ({vendor})", "migrated"
        )
    )
    assert got == want, diff


@pytest.fixture
def migrated_afresh():
    """The app's tables dropped (its migrations reversed) and migrated again."""
    call_command("migrate", APP, "zero", verbosity=0)
    try:
        call_command("migrate", APP, verbosity=0)
    finally:
        call_command("migrate", verbosity=0)


@pytest.mark.skipif(
    connection.vendor not in ("postgresql", "sqlite"), reason="snapshots of PostgreSQL, SQLite"
)
def test_an_empty_database_migrates_to_the_schema_the_replaced_chain_gave(migrated_afresh):
    _compare(snapshot(connection), connection.vendor)


def test_the_baseline_replaces_the_old_chain_and_only_run_functions_follow_it():
    """``0001_baseline`` and ``0002_run_functions``, then at most one more migration
    changing the tables, and the migrations installing the run functions of each later
    version (PostgreSQL only)."""
    from django_llmchat.migrations._sql import PostgreSQLOnly

    loader = MigrationLoader(connection, ignore_no_migrations=True)
    mine = sorted(key for key in loader.disk_migrations if key[0] == APP)
    assert mine[:2] == BASELINE, mine
    later = [loader.disk_migrations[key] for key in mine[2:]]
    other = [m.name for m in later if not all(isinstance(o, PostgreSQLOnly) for o in m.operations)]
    assert len(other) <= 1, other
    assert loader.disk_migrations[BASELINE[0]].replaces == [(APP, name) for name in REPLACED]
    assert not loader.disk_migrations[BASELINE[1]].replaces


def test_a_database_that_applied_the_old_chain_is_migrated_to_the_baseline():
    """Its rows in django_migrations name the 23 old migrations: 0001_baseline counts as
    applied, and migrating runs 0002_run_functions (the functions of v1, again)."""
    recorder = MigrationRecorder(connection)
    before = {key for key in recorder.applied_migrations() if key[0] == APP}
    try:
        recorder.migration_qs.filter(app=APP).delete()
        for name in REPLACED:
            recorder.record_applied(APP, name)
        loader = MigrationLoader(connection)
        assert BASELINE[0] in loader.applied_migrations
        assert BASELINE[1] not in loader.applied_migrations
        assert BASELINE[1] in loader.graph.forwards_plan(loader.graph.leaf_nodes(APP)[0])
        call_command("migrate", APP, verbosity=0)
        applied = {key for key in recorder.applied_migrations() if key[0] == APP}
        assert set(BASELINE) <= applied
    finally:
        recorder.migration_qs.filter(app=APP).delete()
        for app, name in sorted(before):
            recorder.record_applied(app, name)


def test_the_folding_of_the_enqueue_functions_is_what_the_comparison_leaves_out():
    recorded = fixture("postgresql").read_text().splitlines()
    old_chain = ("function llmchat_run_enqueue_v1(", "function llmchat_run_enqueue_v2(")
    assert sum(line.startswith(old_chain) for line in recorded) == 2
    folded = [line for line in _folded(recorded) if line.startswith(old_chain)]
    assert len(folded) == 1 and folded[0].startswith("function llmchat_run_enqueue_v1(")
    # version 3's is compared as it is
    assert any(line.startswith("function llmchat_run_enqueue_v3(") for line in _folded(recorded))
    assert "p_attempt jsonb" in folded[0] and "attempt_id bigint" in folded[0]
    # every other run function is compared with its body and description
    assert (
        sum(" body " in line for line in _folded(recorded))
        == sum(" body " in line for line in recorded) - 2
    )
