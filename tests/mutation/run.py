"""Mutation testing of the core: mutmut over the run package, limits.py and limits_spend.py
(``[tool.mutmut]`` in pyproject.toml), the critical functions first, within a time budget.

    python tests/mutation/run.py                    # make mutation: every mutant
    MUTATION_BUDGET=240 python tests/mutation/run.py

``MUTATION_BUDGET``: seconds the campaign may take (unset or 0: no limit); when it runs out
the campaign stops and the report says what it covered. ``MUTATION_CHILDREN``: mutants run
at once (default: the CPU count). The run starts afresh in ./mutants.

Exit status 1 when a mutant of a critical function (the claim, the fence, admission)
survives and is not listed in tests/mutation/equivalent.toml; a timed-out mutant counts as
killed, and the budget running out is no failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EQUIVALENT = Path(__file__).with_name("equivalent.toml")
# each mutated module, as named in a function's name (``runs.claims.claim``)
MODULES = (
    "runs.admission",
    "runs.base",
    "runs.claims",
    "runs.decisions",
    "runs.execution",
    "runs.limits",
    "limits_spend",
)
# kept for the report after the budget's end
REPORT_SECONDS = 10

CRITICAL = {
    "the claim": [
        "runs.claims.claim",
        "runs.claims._wait_behind",
        "runs.claims._take_updates",
        "runs.claims._resume_soon",
        "runs.claims._busy_or_paused",
        "runs.claims._give_up",
        "runs.claims.wait_for_turn",
    ],
    "the fence": [
        "runs.execution._fenced",
        *(
            f"runs.execution.Execution.{name}"
            for name in (
                "_fenced",
                "poll",
                "renew",
                "fence",
                "finish",
                "pause",
                "requeue",
                "_transition",
                "_ended",
                "step_stored",
            )
        ),
    ],
    "admission": [
        "runs.admission.enqueue",
        "runs.admission._enqueue",
        "runs.admission._place_prompt",
        "runs.admission._admit",
        "runs.admission._lock_user",
        "runs.base._lock",
        "runs.decisions.decide",
        "runs.decisions._decide",
        "runs.limits.admit",
        "runs.limits._verdict",
        "runs.limits.exceeded",
        "runs.limits._send",
        "runs.limits.check",
    ],
}
CRITICAL_FUNCTIONS = [name for names in CRITICAL.values() for name in names]


def split(function: str) -> tuple[str, list[str]]:
    """``runs.execution.Execution.poll`` -> ``("runs.execution", ["Execution", "poll"])``."""
    module = max((m for m in MODULES if function.startswith(f"{m}.")), key=len)
    return module, function.removeprefix(f"{module}.").split(".")


def mangled(function: str) -> str:
    """``runs.execution.Execution.poll`` -> ``django_llmchat.runs.execution.xǁExecutionǁpoll``,
    mutmut's name."""
    module, path = split(function)
    name = f"xǁ{path[0]}ǁ{path[1]}" if len(path) == 2 else f"x_{path[0]}"
    return f"django_llmchat.{module}.{name}"


def function_of(mutant: str) -> str:
    """The inverse: ``django_llmchat.runs.claims.x_claim__mutmut_7`` -> ``runs.claims.claim``."""
    prefix = mutant.rpartition("__mutmut_")[0]
    module, _, name = prefix.removeprefix("django_llmchat.").rpartition(".")
    if name.startswith("xǁ"):
        return f"{module}.{'.'.join(name[2:].split('ǁ'))}"
    return f"{module}.{name.removeprefix('x_')}"


def mutmut(args: list[str], deadline: float | None, log) -> str:
    """Run ``mutmut run``; "done", "failed", or "budget" (stopped at the deadline)."""
    command = [str(Path(sys.executable).with_name("mutmut")), "run", *args]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        process.wait(timeout=None if deadline is None else max(0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        # the mutants under test go with it; their results were never written
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return "budget"
    return "done" if process.returncode == 0 else "failed"


def results() -> dict[str, tuple[str, str]]:
    """Each mutant's function and status: killed, timeout, survived or not run."""
    from mutmut.stats import status_by_exit_code

    found = {}
    for module in MODULES:
        meta = ROOT / "mutants" / "django_llmchat" / f"{module.replace('.', '/')}.py.meta"
        codes = _exit_codes(meta)
        for mutant, code in codes.items():
            status = status_by_exit_code[code]
            if status in ("not checked", "skipped", "check was interrupted by user"):
                status = "not run"
            elif status == "no tests":  # no selected test calls the function
                status = "survived"
            elif status not in ("survived", "timeout"):
                status = "killed"  # the tests failed (or the process crashed)
            found[mutant] = (function_of(mutant), status)
    return found


def _exit_codes(meta: Path) -> dict[str, int]:
    """A module's results; none when the file is missing or was cut off mid-write (mutmut
    killed at the budget's end while writing it): its mutants then count as not run."""
    try:
        return json.loads(meta.read_text())["exit_code_by_key"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return {}


def change(mutant: str) -> tuple[str, str]:
    """The mutated lines, before and after, whitespace folded: how the list names a mutant."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    module, _ = split(function_of(mutant))
    path = f"django_llmchat/{module.replace('.', '/')}.py"
    diff = get_diff_for_mutant(mutant, path=path).splitlines()
    removed = [line[1:] for line in diff if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in diff if line.startswith("+") and not line.startswith("+++")]
    return fold(" / ".join(removed)), fold(" / ".join(added))


def fold(text: str) -> str:
    return " ".join(text.split())


def main() -> int:
    started = time.monotonic()
    os.chdir(ROOT)  # mutmut works in ./mutants
    budget = float(os.environ.get("MUTATION_BUDGET") or 0)
    deadline = started + budget - REPORT_SECONDS if budget else None
    children = os.environ.get("MUTATION_CHILDREN") or str(os.cpu_count() or 1)
    os.environ.pop("DATABASE_URL", None)  # SQLite: a mutant's tests run in a second or two

    shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    (ROOT / "mutants").mkdir()
    log_path = ROOT / "mutants" / "mutmut.log"
    phases = [
        ("critical functions", [f"{mangled(name)}__mutmut_*" for name in CRITICAL_FUNCTIONS]),
        ("the rest", []),  # every mutant not run yet
    ]
    stop = "done"
    with log_path.open("w") as log:
        for title, patterns in phases:
            print(f"mutmut: {title} ...", flush=True)
            stop = mutmut(["--max-children", children, *patterns], deadline, log)
            if stop == "failed":  # once more: a thread test of the clean run can be flaky
                print("mutmut: the clean run failed, once more ...", flush=True)
                stop = mutmut(["--max-children", children, *patterns], deadline, log)
            if stop != "done":
                break
    elapsed = time.monotonic() - started
    if stop == "failed":
        print(log_path.read_text()[-6000:])
        print("mutmut failed (the clean test run or its setup): see above")
        return 2
    return report(results(), elapsed, budget, stop == "budget")


def report(found: dict[str, tuple[str, str]], elapsed: float, budget: float, cut: bool) -> int:
    listed = tomllib.loads(EQUIVALENT.read_text())["mutant"]
    by_change = {(e["function"], fold(e["original"]), fold(e["mutated"])): e for e in listed}
    equivalent, survivors, matched = {}, {}, set()
    for mutant, (function, status) in sorted(found.items()):
        if status != "survived":
            continue
        key = (function, *change(mutant))
        if key in by_change:
            equivalent[mutant] = by_change[key]
            matched.add(key)
        else:
            survivors[mutant] = key
    counts: dict[str, Counter] = {}
    for mutant, (function, status) in found.items():
        if mutant in equivalent:
            status = "equivalent"
        counts.setdefault(function, Counter())[status] += 1

    columns = ("mutants", "run", "killed", "timeout", "equivalent", "survived", "not run")

    def row(label: str, c: Counter) -> str:
        c = Counter(c)
        c["mutants"] = sum(c[s] for s in columns[2:])
        c["run"] = c["mutants"] - c["not run"]
        return f"  {label:<34}" + "".join(f"{c[s]:>11}" for s in columns)

    def total(functions) -> Counter:
        return sum((counts.get(f, Counter()) for f in functions), Counter())

    ran = sum(1 for _, status in found.values() if status != "not run")
    print()
    print(
        f"Mutation testing of runs/, limits.py and limits_spend.py: {ran} of {len(found)} "
        f"mutants run in {elapsed:.0f} s"
        + (f" (budget {budget:.0f} s{', used up' if cut else ''})" if budget else "")
    )
    print(f"  {'':<34}" + "".join(f"{s:>11}" for s in columns))
    for group, functions in CRITICAL.items():
        print(f"{group}:")
        for function in functions:
            print(row(function, counts.get(function, Counter())))
    others = sorted(set(counts) - set(CRITICAL_FUNCTIONS))
    print(row("critical functions", total(CRITICAL_FUNCTIONS)))
    print(row("other functions", total(others)))
    print(row("all", total(counts)))

    if equivalent:
        print("\nEquivalent (tests/mutation/equivalent.toml):")
        for mutant, entry in equivalent.items():
            number = mutant.rpartition("__mutmut_")[2]
            print(f"  {entry['function']} ({number}): {entry['original']}  ->  {entry['mutated']}")
            print(f"      {fold(entry['why'])}")
    critical = {m: k for m, k in survivors.items() if k[0] in CRITICAL_FUNCTIONS}
    elsewhere = {m: k for m, k in survivors.items() if m not in critical}
    for title, group in (("in critical functions", critical), ("elsewhere", elsewhere)):
        if group:
            print(f"\nSurvivors {title} (neither killed nor listed as equivalent):")
            for mutant, (function, before, after) in group.items():
                number = mutant.rpartition("__mutmut_")[2]
                print(f"  {function} ({number}): {before}  ->  {after}")
    unused = [e for key, e in by_change.items() if key not in matched]
    if unused and not cut:
        print("\nListed as equivalent but not a survivor of this run (killed, or changed):")
        for entry in unused:
            print(f"  {entry['function']}: {entry['original']}  ->  {entry['mutated']}")
    if critical:
        print(f"\nFAILED: {len(critical)} surviving mutants in critical functions")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
