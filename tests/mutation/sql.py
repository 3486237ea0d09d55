"""Mutation testing of the run functions on PostgreSQL (``django_llmchat/sql/``): each
PL/pgSQL function's mutants (``tests/mutation/sql_mutants.py``) installed one at a time in
the test database, and the PostgreSQL tests reaching the function run against it, the
critical functions first, within a time budget.

    DATABASE_URL=postgres://... python tests/mutation/sql.py     # make sql-mutation
    SQL_MUTATION_BUDGET=180 python tests/mutation/sql.py
    python tests/mutation/sql.py llmchat_run_claim_v4            # one function's mutants
    python tests/mutation/sql.py llmchat_run_claim_v4:1,26       # two of them

``SQL_MUTATION_BUDGET``: seconds the campaign may take (unset or 0: no limit). One pytest
session does it all (``tests/mutation/sql_plugin.py``): the test database is created once,
the tests of :data:`TESTS` run once as they are, then each mutant is installed
(``CREATE OR REPLACE FUNCTION``), the tests reaching it run until one fails, and the
function as written is installed again.

Exit status 1 when a mutant of a critical function (the claim, the fence, admission)
survives and is not listed in tests/mutation/sql_equivalent.toml; 2 when the clean run
fails or there is no PostgreSQL. A timed-out mutant counts as killed, and the budget
running out is no failure (the report says what was left).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.mutation.sql_mutants import fold, functions, mutants  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EQUIVALENT = Path(__file__).with_name("sql_equivalent.toml")
# the PostgreSQL tests of the run transitions: the tests of each module of runs/ (each
# transition one at a time, on its own chat among bystanders), the functions' own tests
# (test_pg.py) and the admission races (test_admission_gate.py)
TESTS = ["tests/runs"]
# kept for the report after the budget's end
REPORT_SECONDS = 5

CRITICAL = {
    "the claim": ["llmchat_run_claim_v4"],
    "the fence": ["llmchat_run_end_v1", "llmchat_run_store_last_step_v3"],
    "admission": ["llmchat_run_enqueue_v5"],
}
CRITICAL_FUNCTIONS = [name for names in CRITICAL.values() for name in names]
# the rest, run after the critical functions
OTHERS = [
    "llmchat_run_interrupt_v1",
    "llmchat_run_release_v1",
    "llmchat_run_place_prompt_v1",
    "llmchat_run_leaf_v1",
]


def equivalents() -> dict[tuple[str, str, str], dict]:
    listed = tomllib.loads(EQUIVALENT.read_text()).get("mutant", [])
    return {(e["function"], fold(e["original"]), fold(e["mutated"])): e for e in listed}


def main(argv: list[str]) -> int:
    started = time.monotonic()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        print("the SQL mutation campaign runs on PostgreSQL: set DATABASE_URL=postgres://...")
        return 2
    budget = float(os.environ.get("SQL_MUTATION_BUDGET") or 0)
    found = functions()
    order = [*CRITICAL_FUNCTIONS, *OTHERS]
    missing = set(found) - set(order)
    if missing:  # a new function: critical or not, say so above
        print(f"functions neither critical nor listed in OTHERS: {sorted(missing)}")
        return 2
    # each argument a function, or function:n,m (those mutants of it)
    picked = {a.partition(":")[0]: a.partition(":")[2] for a in argv}
    chosen = list(picked) or order
    unknown = set(chosen) - set(order)
    if unknown:
        print(f"no such function: {sorted(unknown)}")
        return 2
    listed = equivalents()
    every = {name: mutants(found[name]) for name in order}
    planned = [
        m
        for name in order
        if name in chosen
        for m in every[name]
        if not picked.get(name) or str(m.number) in picked[name].split(",")
    ]
    # listed equivalents last: each runs every test reaching its function
    planned.sort(key=lambda m: m.key in listed)
    plan = {
        "calls": {name: sorted(f.calls(found)) for name, f in found.items()},
        "originals": {name: f.statement for name, f in found.items()},
        "mutants": [
            {"id": f"{m.function}:{m.number}", "function": m.function, "statement": m.statement}
            for m in planned
        ],
    }
    with tempfile.TemporaryDirectory() as folder:
        plan_path, results_path = Path(folder, "plan.json"), Path(folder, "results.json")
        plan_path.write_text(json.dumps(plan))
        env = {
            **os.environ,
            "SQL_MUTATION_PLAN": str(plan_path),
            "SQL_MUTATION_RESULTS": str(results_path),
            "SQL_MUTATION_DEADLINE": str(time.time() + budget - REPORT_SECONDS) if budget else "",
            # a statement waiting on a mutant's lock (or looping) fails instead of hanging
            "PGOPTIONS": "-c statement_timeout=20s -c lock_timeout=20s",
        }
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "tests.mutation.sql_plugin",
            "--create-db",
            *TESTS,
        ]
        print(f"SQL mutation: {len(planned)} mutants; the clean run first ...", flush=True)
        process = subprocess.run(command, cwd=ROOT, env=env)
        results = json.loads(results_path.read_text()) if results_path.exists() else None
    if results is not None:  # each mutant's tests and time, for a closer look
        (ROOT / "mutants").mkdir(exist_ok=True)
        (ROOT / "mutants" / "sql-results.json").write_text(json.dumps(results, indent=1))
    elapsed = time.monotonic() - started
    if results is None or results["clean"].get("failed") != 0:
        print("the clean test run failed (or its setup): see above")
        return 2
    if process.returncode:  # stopped (SIGINT, SIGTERM): the mutants run until then
        print(f"pytest stopped (exit status {process.returncode}): a report of what was run")
    return report(every, chosen, results, listed, elapsed, budget)


def report(every, chosen, results, listed, elapsed, budget) -> int:
    ran = results["mutants"]
    status = {}
    for found in every.values():
        for m in found:
            result = ran.get(f"{m.function}:{m.number}")
            state = result["status"] if result else "not run"
            if state == "survived" and m.key in listed:
                state = "equivalent"
            status[m] = state
    columns = ("mutants", "killed", "timeout", "equivalent", "survived", "invalid", "not run")
    counts = {name: Counter(status[m] for m in found) for name, found in every.items()}

    def row(label, c):
        c = Counter(c)
        c["mutants"] = sum(c[s] for s in columns[1:])
        return f"  {label:<34}" + "".join(f"{c[s]:>11}" for s in columns)

    total = sum(status[m] != "not run" for m in status if m.function in chosen)
    clean = results["clean"]
    print()
    print(
        f"Mutation testing of the run functions (django_llmchat/sql/): {total} of "
        f"{sum(len(every[n]) for n in chosen)} mutants run in {elapsed:.0f} s"
        + (f" (budget {budget:.0f} s)" if budget else "")
        + f"; the clean run: {clean['tests']} tests in {clean['seconds']:.0f} s"
    )
    print(f"  {'':<34}" + "".join(f"{s:>11}" for s in columns))
    for group, names in CRITICAL.items():
        print(f"{group}:")
        for name in names:
            print(row(name, counts[name]))
    print("the rest:")
    for name in OTHERS:
        print(row(name, counts[name]))
    print(row("critical functions", sum((counts[n] for n in CRITICAL_FUNCTIONS), Counter())))
    print(row("all", sum(counts.values(), Counter())))
    if clean["migrating"]:
        print(f"\nLeft out of the mutants' runs (they run the migrations): {clean['migrating']}")

    shown = [m for m in status if status[m] == "equivalent"]
    if shown:
        print("\nEquivalent (tests/mutation/sql_equivalent.toml):")
        for m in shown:
            print(f"  {m.function} ({m.number}, {m.kind}): {m.original}  ->  {m.mutated}")
            print(f"      {fold(listed[m.key]['why'])}")
    invalid = [m for m in status if status[m] == "invalid"]
    if invalid:
        print("\nNot installed (PostgreSQL refused the mutated function):")
        for m in invalid:
            error = ran[f"{m.function}:{m.number}"]["error"].splitlines()[0]
            print(f"  {m.function} ({m.number}): {m.original}  ->  {m.mutated}: {error}")
    survivors = [m for m in status if status[m] == "survived"]
    critical = [m for m in survivors if m.function in CRITICAL_FUNCTIONS]
    elsewhere = [m for m in survivors if m not in critical]
    for title, group in (("in critical functions", critical), ("elsewhere", elsewhere)):
        if group:
            print(f"\nSurvivors {title} (neither killed nor listed as equivalent):")
            for m in group:
                print(f"  {m.function} ({m.number}, {m.kind}): {m.original}  ->  {m.mutated}")
    keys = {m.key for found in every.values() for m in found if status[m] == "equivalent"}
    complete = all(status[m] != "not run" for m in status if m.function in chosen)
    unused = [e for key, e in listed.items() if key not in keys and key[0] in chosen]
    if unused and complete:
        print("\nListed as equivalent but not a survivor of this run (killed, or changed):")
        for entry in unused:
            print(f"  {entry['function']}: {entry['original']}  ->  {entry['mutated']}")
    if critical:
        print(f"\nFAILED: {len(critical)} surviving mutants in critical functions")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
