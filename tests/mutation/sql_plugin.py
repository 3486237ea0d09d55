"""The pytest side of the SQL mutation campaign (``tests/mutation/sql.py``), loaded by it
only: one test session runs every mutant, on one test database created once.

The session first runs the selected tests as they are (the clean run), noting which run
functions each test reaches (the statements it sends naming them, and what those call) and
how long it takes; a test that runs the migrations (which install the functions again) is
left out of the mutants' runs. Then, for each mutant of the plan, in order: the mutated
``CREATE OR REPLACE FUNCTION`` is installed, the tests reaching its function run one after
another (those that killed a mutant of the same function first, then the fastest) until
one fails (killed) or none is left (survived), and the original function is installed
again. A test taking ten times its clean time (and at least 10 s) counts as a failure
(``timeout``, killed). Each test is run with its fixtures set up and torn down as in a
normal run; the database's session fixtures stay up from the clean run to the end.

The plan and the results are JSON files named by ``SQL_MUTATION_PLAN`` and
``SQL_MUTATION_RESULTS``; ``SQL_MUTATION_DEADLINE`` (seconds since the epoch) stops the
campaign, the mutants not run then reported as such.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections import Counter

import pytest
from _pytest.runner import runtestprotocol

_NAME = re.compile(r"\bllmchat_run_\w+_v\d+\b")


class MutantTimeout(Exception):
    """A test ran far past its clean time."""


class _SessionOnly:
    """What the next test needs set up: the session alone (every narrower fixture of the
    test run torn down, the database kept)."""

    def __init__(self, session) -> None:
        self.session = session

    def listchain(self):
        return [self.session]


class _Recorder:
    """The run functions named by the statements sent while a test runs (every thread)."""

    def __init__(self) -> None:
        self.names: set[str] | None = None
        self.migrated = False
        self.in_call = False

    def __enter__(self):
        from django.db.backends import utils
        from django.db.models.signals import post_migrate

        self.utils = utils
        self.original = utils.CursorWrapper._execute
        recorder = self

        def _execute(cursor, sql, params, *ignored):
            if recorder.names is not None and isinstance(sql, str):
                recorder.names.update(_NAME.findall(sql))
            return recorder.original(cursor, sql, params, *ignored)

        utils.CursorWrapper._execute = _execute
        post_migrate.connect(self._migrated, dispatch_uid="sql-mutation-migrated")
        return self

    def _migrated(self, **kwargs) -> None:
        if self.in_call:
            self.migrated = True

    def __exit__(self, *exc) -> None:
        from django.db.models.signals import post_migrate

        self.utils.CursorWrapper._execute = self.original
        post_migrate.disconnect(dispatch_uid="sql-mutation-migrated")


_recorder = _Recorder()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _recorder.in_call = True
    try:
        return (yield)
    finally:
        _recorder.in_call = False


def _closure(names: set[str], calls: dict[str, list[str]]) -> set[str]:
    found, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(calls.get(name, ()))
    return found


def _connect():
    """A connection of its own to the test database (the one the session created)."""
    import psycopg
    from django.db import connections

    settings = connections["default"].settings_dict
    return psycopg.connect(
        dbname=settings["NAME"],
        user=settings["USER"] or None,
        password=settings["PASSWORD"] or None,
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        autocommit=True,
    )


def _run(item, session, limit: float) -> tuple[bool, bool]:
    """Run one test: (failed, timed out)."""

    def expire(signum, frame):
        raise MutantTimeout(f"{item.nodeid} ran over {limit:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    timed_out = False
    try:
        reports = runtestprotocol(item, log=False, nextitem=_SessionOnly(session))
    except MutantTimeout:  # outside the test's own phases
        reports, timed_out = [], True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    for report in reports:
        if report.failed and "MutantTimeout" in str(report.longrepr):
            timed_out = True
    return timed_out or any(r.failed for r in reports), timed_out


def pytest_runtestloop(session):
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        raise session.Interrupted(f"{session.testsfailed} errors during collection")
    if session.config.option.collectonly:
        return True
    with open(os.environ["SQL_MUTATION_PLAN"]) as f:
        plan = json.load(f)
    results_path = os.environ["SQL_MUTATION_RESULTS"]
    deadline = float(os.environ.get("SQL_MUTATION_DEADLINE") or "inf")
    write = session.config.pluginmanager.get_plugin("terminalreporter").write
    items = session.items
    results = {"clean": {}, "mutants": {}}

    # the clean run: every test as it is, reporting as usual
    started = time.monotonic()
    reached: dict[str, set[str]] = {}
    seconds: dict[str, float] = {}
    migrating = set()
    with _recorder:
        for i, item in enumerate(items):
            _recorder.names, _recorder.migrated = set(), False
            began = time.monotonic()
            nextitem = items[i + 1] if i + 1 < len(items) else _SessionOnly(session)
            item.ihook.pytest_runtest_protocol(item=item, nextitem=nextitem)
            seconds[item.nodeid] = time.monotonic() - began
            reached[item.nodeid] = _closure(_recorder.names, plan["calls"])
            if _recorder.migrated:
                migrating.add(item.nodeid)
        _recorder.names = None
    results["clean"] = {
        "seconds": time.monotonic() - started,
        "tests": len(items),
        "failed": session.testsfailed,
        "migrating": sorted(migrating),
        "reached": dict(Counter(name for names in reached.values() for name in names)),
    }
    if session.testsfailed:
        _save(results_path, results)
        session._setupstate.teardown_exact(None)
        return True

    usable = [item for item in items if item.nodeid not in migrating]
    signal.signal(signal.SIGTERM, _stop)  # stopped: the report of what was run
    killers: dict[str, Counter] = {}
    database = _connect()
    write("\nmutants ")
    try:
        for mutant in plan["mutants"]:
            if time.time() >= deadline:
                break
            function = mutant["function"]
            began = time.monotonic()
            try:
                database.execute(mutant["statement"])
            except Exception as error:  # a mutant PostgreSQL does not take
                results["mutants"][mutant["id"]] = {"status": "invalid", "error": str(error)}
                write("!")
                continue
            kills = killers.setdefault(function, Counter())
            tests = sorted(
                (item for item in usable if function in reached[item.nodeid]),
                key=lambda item: (-kills[item.nodeid], seconds[item.nodeid]),
            )
            status, killer, ran = "survived", None, 0
            try:
                for item in tests:
                    if time.time() >= deadline:
                        status = "not run"
                        break
                    ran += 1
                    failed, timed_out = _run(item, session, max(10.0, 10 * seconds[item.nodeid]))
                    if failed:
                        status, killer = ("timeout" if timed_out else "killed"), item.nodeid
                        kills[item.nodeid] += 1
                        break
            finally:
                database.execute(plan["originals"][function])
            if status == "not run":
                break
            results["mutants"][mutant["id"]] = {
                "status": status,
                "tests": ran,
                "of": len(tests),
                "killer": killer,
                "seconds": time.monotonic() - began,
            }
            write({"killed": ".", "timeout": "T", "survived": "S"}[status], flush=True)
            _save(results_path, results)  # what was run so far, if the run is stopped
    finally:
        database.close()
        _save(results_path, results)
        write("\n")
        session._setupstate.teardown_exact(None)
    return True


def _stop(signum, frame):
    raise KeyboardInterrupt


def _save(path: str, results: dict) -> None:
    with open(path, "w") as f:
        json.dump(results, f)
