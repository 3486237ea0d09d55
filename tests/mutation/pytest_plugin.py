"""Loaded by mutmut's test runs only (``[tool.mutmut]`` in pyproject.toml).

The run package and limits.py compile some statements once per process (``prepared.py``),
from functions such as ``runs.execution._fenced``: a mutant of such a function would be
called only by the first test that compiles the statement, and never in a mutant's process
forked after the clean run had compiled them all. Forgetting the compiled SQL before each test makes
every test that runs a statement build it again, through the mutant under test.
"""

import os

import pytest


@pytest.fixture(autouse=True)
def _compile_again():
    # imported here: a plugin is loaded before pytest-django sets Django up
    from django_llmchat.db.prepared import PreparedInsert, PreparedQuery
    from django_llmchat.runs import (
        admission,
        base,
        claims,
        decisions,
        execution,
        limits,
        limits_spend,
    )

    for module in (admission, base, claims, decisions, execution, limits, limits_spend):
        for value in vars(module).values():
            if isinstance(value, PreparedQuery | PreparedInsert):
                value._compiled.clear()
    limits_spend._QUERIES.clear()
    limits.forget()


def pytest_collection_modifyitems(items):
    """The clean run in the suite's own order (mutmut passes the tests as a set): tests
    that wait on threads writing to the in-memory SQLite database are written against the
    tests run before them in their file, not any others. A mutant's tests keep mutmut's
    order, the fastest first (a flaky failure there counts a kill, and never fails the
    campaign)."""
    if os.environ.get("MUTANT_UNDER_TEST", ""):
        return
    position = {}
    for item in items:
        path, line, _ = item.reportinfo()
        position[item] = (str(path), line or 0, item.nodeid)
    items.sort(key=position.__getitem__)
