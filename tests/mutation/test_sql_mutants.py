"""The SQL mutation campaign's mutants (``tests/mutation/sql_mutants.py``): every run
function read, the fenced conditions each dropped in turn, a ``SET`` list left alone, and
each entry of ``sql_equivalent.toml`` naming a mutant the functions still have (no
database needed: the campaign itself runs on PostgreSQL, ``make sql-mutation``)."""

from __future__ import annotations

import re

from django_llmchat.runs import pg
from tests.mutation import sql
from tests.mutation.sql_mutants import functions, mutants


def test_every_run_function_is_read_and_mutated_once_per_change():
    found = functions()
    assert set(found) == set(pg.FUNCTIONS) == set(sql.CRITICAL_FUNCTIONS) | set(sql.OTHERS)
    for function in found.values():
        made = mutants(function)
        assert made, function.name
        assert len({m.key for m in made}) == len(made), f"{function.name}: two mutants alike"
        for m in made:
            assert m.statement.startswith(f"CREATE OR REPLACE FUNCTION {function.name}(")
            assert m.statement != function.statement and m.original != m.mutated


def test_each_condition_of_the_fence_is_dropped_in_turn_and_no_set_is_touched():
    made = mutants(functions()["llmchat_run_end_v1"])
    fence = "WHERE r.id = p_run AND r.attempt = p_attempt AND r.status = 'running'"
    assert {m.mutated for m in made if m.original == fence and m.kind == "condition removed"} == {
        "WHERE r.attempt = p_attempt AND r.status = 'running'",
        "WHERE r.id = p_run AND r.status = 'running'",
        "WHERE r.id = p_run AND r.attempt = p_attempt",
    }
    assert "WHERE r.id = p_run AND r.attempt = p_attempt AND r.status <> 'running'" in {
        m.mutated for m in made
    }
    # the assignments of an UPDATE's SET list are not comparisons
    assert not [m for m in made if re.search(r"SET status <> p_status", m.mutated)]


def test_each_equivalent_listed_is_a_mutant_of_the_functions_as_written():
    keys = {m.key for f in functions().values() for m in mutants(f)}
    listed = sql.equivalents()
    assert listed and set(listed) <= keys, sorted(set(listed) - keys)
    assert all(entry["why"].strip() for entry in listed.values())
