"""The run's transitions declared once (:mod:`django_llmchat.runs.transitions`), and both
faces held against that table: every write of a run's status by the statements (a scan of
the package's code) and every PL/pgSQL function of ``django_llmchat/sql/`` (its header's
``-- transition:`` lines, and each ``UPDATE`` of ``llmchat_run.status`` in its body). No
database needed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from django_llmchat.models import Run
from django_llmchat.runs import pg, transitions
from django_llmchat.runs.transitions import BY_NAME, TABLE, Transition
from tests.mutation.sql_mutants import functions

PACKAGE = Path(transitions.__file__).resolve().parents[1]
RUNS = PACKAGE / "runs"
DOCS = PACKAGE.parent / "docs" / "runs.md"

# models whose status is theirs, not a run's: a write rooted at one of them is not a run's
OTHER_MODELS = {"Usage", "Chat", "Message", "ToolCall", "IdempotencyKey", "Feedback"}
# names a transition is read from: the table's constants and its two lookups
TABLE_NAMES = {name for name, value in vars(transitions).items() if isinstance(value, Transition)}
LOOKUPS = {"ENDINGS", "STOPS"}


# -- the table ----------------------------------------------------------------------------------
def test_the_table_names_each_transition_once_between_statuses_a_run_has():
    assert len(BY_NAME) == len(TABLE)
    for t in TABLE:
        assert set(t.sources) <= set(Run.STATUSES), t
        assert t.target in Run.STATUSES, t
        assert t.doc, t
    # a finished run never moves again; every status but the new run's is reached
    assert not {s for t in TABLE for s in t.sources} & set(Run.FINISHED)
    assert {t.target for t in TABLE} == set(Run.STATUSES)
    # a new run starts as the model's default status, or running when its caller runs it
    assert {t.target for t in TABLE if not t.sources} == {
        Run._meta.get_field("status").default,
        Run.RUNNING,
    }
    assert set(transitions.ENDINGS) == set(Run.FINISHED) | {Run.AWAITING_APPROVAL, Run.QUEUED}
    assert set(transitions.STOPS) == {Run.CANCELLED, Run.INTERRUPTED}


def test_every_transition_is_made_by_the_statements():
    """SQLite runs every transition as statements: each one is used by the runs package."""
    code = "\n".join(p.read_text() for p in RUNS.glob("*.py") if p.name != "transitions.py")
    used = {name for name in TABLE_NAMES if re.search(rf"\b{name}\b", code)}
    through = {"ENDINGS": transitions.ENDINGS, "STOPS": transitions.STOPS}
    names = {BY_NAME[t.name] for t in TABLE if t in {vars(transitions)[n] for n in used}}
    for lookup, mapping in through.items():
        if re.search(rf"\b{lookup}\b", code):
            names |= set(mapping.values())
    assert names == set(TABLE), sorted(t.name for t in set(TABLE) - names)


def test_the_docs_render_the_table():
    assert transitions.markdown() in DOCS.read_text()


# -- the statements -----------------------------------------------------------------------------
def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path, ast.parse(path.read_text())


def _chain(call: ast.Call) -> list[ast.AST]:
    """The nodes of a call's receiver chain (``Run.objects.filter(...).update``: the filter
    call, the attributes, ``Run``)."""
    found, node = [], call.func
    while True:
        found.append(node)
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return found


def _names(nodes) -> set[str]:
    return {n.id for n in nodes if isinstance(n, ast.Name)} | {
        n.attr for n in nodes if isinstance(n, ast.Attribute)
    }


def _transition_of(value: ast.AST | None, attr: str) -> str | None:
    """``X`` when ``value`` reads ``X.<attr>`` (a transition's sources or target)."""
    if (
        isinstance(value, ast.Attribute)
        and value.attr == attr
        and isinstance(value.value, ast.Name)
    ):
        return value.value.id
    return None


def _parents(tree):
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    return parents


def _function(node, parents):
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return node
    return None


def _read_from_table(name: str, function, module) -> bool:
    """``name`` is one of the table's transitions: a constant of it, or a local variable of
    ``function`` assigned from the table's constants and lookups only."""
    if name in TABLE_NAMES:
        return True
    for node in ast.walk(function or module):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            read = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            from_table = read & (TABLE_NAMES | LOOKUPS)
            # a choice between constants (its test may read anything), or a lookup
            return bool(from_table) and (
                isinstance(node.value, ast.IfExp) or isinstance(node.value, ast.Subscript)
            )
    return False


def _sources_filter(nodes) -> list[str]:
    """The transitions whose sources the chain filters on (``status__in=X.sources``)."""
    found = []
    for node in nodes:
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg == "status__in":
                    found.append(_transition_of(keyword.value, "sources"))
                elif keyword.arg == "status":
                    found.append(None)  # a status compared to something else
    return found


def run_status_writes():
    """Every write of a run's status in the package: (path, line, function, problem or
    None)."""
    for path, tree in _modules():
        parents = _parents(tree)
        where = path.relative_to(PACKAGE)
        functions_by_name = {
            n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            function = _function(node, parents)
            label = (str(where), node.lineno, function.name if function else "")
            keywords = {k.arg: k.value for k in node.keywords}
            callee = node.func
            if isinstance(callee, ast.Attribute) and callee.attr == "update":
                chain = _chain(node)
                if _names(chain) & OTHER_MODELS:
                    continue
                if None in keywords:  # **values: a status could hide in them
                    hidden = [
                        n
                        for n in ast.walk(function or tree)
                        if isinstance(n, ast.Dict)
                        and any(isinstance(k, ast.Constant) and k.value == "status" for k in n.keys)
                    ] + [
                        n
                        for n in ast.walk(function or tree)
                        if isinstance(n, ast.Subscript)
                        and isinstance(n.ctx, ast.Store)
                        and isinstance(n.slice, ast.Constant)
                        and n.slice.value == "status"
                    ]
                    if hidden and "status" not in keywords:
                        yield (*label, "a status written through **values")
                        continue
                if "status" not in keywords:
                    continue
                target = _transition_of(keywords["status"], "target")
                if target is None:
                    yield (*label, "status= is not a transition's .target")
                    continue
                if not _read_from_table(target, function, tree):
                    yield (*label, f"{target} is not read from the table")
                    continue
                if _sources_filter(chain) != [target]:
                    yield (*label, f"not filtered on status__in={target}.sources (only)")
                    continue
                yield (*label, None)
            elif isinstance(callee, ast.Name) and callee.id == "PreparedUpdate":
                model = node.args[0] if node.args else None
                if not (isinstance(model, ast.Name) and model.id == "Run"):
                    continue
                if "status" not in keywords:
                    continue
                target = _transition_of(keywords["status"], "target")
                if target is None or target not in TABLE_NAMES:
                    yield (*label, "status= is not a transition's .target")
                    continue
                where_fn = keywords.get("where")
                if isinstance(where_fn, ast.Name):
                    where_fn = functions_by_name.get(where_fn.id)
                calls = (
                    [n for n in ast.walk(where_fn) if isinstance(n, ast.Call)] if where_fn else []
                )
                if _sources_filter(calls) != [target]:
                    yield (*label, f"where= not filtered on status__in={target}.sources (only)")
                    continue
                yield (*label, None)
        if "runs" not in where.parts:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign):
                continue
            targets = [
                e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])
            ]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else None
            for i, target in enumerate(targets):
                if not (isinstance(target, ast.Attribute) and target.attr == "status"):
                    continue
                if isinstance(target.value, ast.Name) and target.value.id == "chat":
                    continue  # the chat's cached status
                function = _function(node, parents)
                label = (str(where), node.lineno, function.name if function else "")
                if function is not None and function.name in MIRRORS:
                    continue
                value = values[i] if values is not None else node.value
                name = _transition_of(value, "target")
                if name is None or not _read_from_table(name, function, tree):
                    yield (*label, "a run's status set to something else than a transition's")
                    continue
                yield (*label, None)


# functions setting a run object's status to the one they were told was written
MIRRORS = {
    "_ended": "Execution._ended: the status of the transition its caller just made",
}


def test_every_python_write_of_a_runs_status_is_a_transition_of_the_table():
    writes = list(run_status_writes())
    bad = [w for w in writes if w[3] is not None]
    assert not bad, "\n".join(f"{p}:{line} ({fn}): {why}" for p, line, fn, why in bad)
    # the scan sees them: every module of the package that changes a run's status
    assert {w[0] for w in writes} >= {
        "runs/admission.py",
        "runs/claims.py",
        "runs/decisions.py",
        "runs/execution.py",
    }
    assert len(writes) >= 10


@pytest.mark.parametrize(
    "code, problem",
    [
        ("Run.objects.filter(pk=1).update(status=Run.FAILED)", "not a transition's .target"),
        ("Run.objects.filter(pk=1, status=Run.RUNNING).update(status=GIVE_UP.target)", "only"),
        (
            "Run.objects.filter(pk=1, status__in=CLAIM.sources).update(status=GIVE_UP.target)",
            "only",
        ),
        ("Run.objects.filter(pk=1).update(**{'status': 'failed'})", "**values"),
        ("run.status = Run.FAILED", "something else"),
    ],
)
def test_the_scan_finds_a_write_outside_the_table(code, problem, tmp_path, monkeypatch):
    module = tmp_path / "runs" / "rogue.py"
    module.parent.mkdir()
    module.write_text(f"def rogue(run):\n    {code}\n")
    monkeypatch.setattr(
        "tests.runs.test_transitions._modules", lambda: [(module, ast.parse(module.read_text()))]
    )
    monkeypatch.setattr("tests.runs.test_transitions.PACKAGE", tmp_path)
    found = [w[3] for w in run_status_writes()]
    assert found and problem in (found[0] or ""), found


# -- the PL/pgSQL functions ---------------------------------------------------------------------
_HEADER = re.compile(
    r"^-- transition: (?P<name>\w+) (?P<sources>\S+) -> (?P<target>\w+)(?:\s{2,}.*)?$", re.M
)
_UPDATE = re.compile(
    r"\bUPDATE\s+llmchat_run\b(?:\s+(?!SET\b)\w+)?\s+SET\s+(?P<set>.*?)\s+WHERE\s+"
    r"(?P<where>.*?)(?:;|\bRETURNING\b)",
    re.S | re.I,
)
_SET_STATUS = re.compile(r"(?:^|,)\s*status\s*=\s*(?:'(?P<literal>\w+)'|(?P<param>p_\w+))", re.I)
_WHERE_STATUS = re.compile(
    r"\b(?:\w+\.)?status\s*(?:=\s*(?P<value>'\w+'|[\w.]+)|IN\s*\((?P<values>[^)]*)\))", re.I
)


def _header(function) -> str:
    """The comment block right above the function's CREATE."""
    text = function.path.read_text()
    start = text.index(function.statement)
    lines = text[:start].rstrip("\n").split("\n")
    block = []
    for line in reversed(lines):
        if not line.startswith("--"):
            break
        block.append(line)
    return "\n".join(reversed(block))


def _strings(values: str) -> set[str]:
    found = {v.strip() for v in values.split(",")}
    assert all(re.fullmatch(r"'\w+'", v) for v in found), values
    return {v.strip("'") for v in found}


def declared(function) -> list[tuple[str, tuple[str, ...], str]]:
    """The transitions a function's header declares: (name, sources, target)."""
    found = []
    for match in _HEADER.finditer(_header(function)):
        sources = () if match["sources"] == "(none)" else tuple(match["sources"].split("|"))
        found.append((match["name"], sources, match["target"]))
    return found


def written(function) -> set[tuple[str | None, str]]:
    """The (from, to) pairs of run statuses the function's body writes: each UPDATE of
    llmchat_run setting its status (a literal, or a parameter the body refuses outside a
    literal list), from the statuses its WHERE allows; and an INSERT of a run, from none
    to the model's default status or one assigned to the row."""
    body = re.sub(r"--[^\n]*", "", function.body)
    pairs = set()
    for update in _UPDATE.finditer(body):
        target = _SET_STATUS.search(update["set"])
        if target is None:
            continue  # no status written (a lease, a stop asked for)
        if target["literal"]:
            targets = {target["literal"]}
        else:
            guard = re.search(
                rf"\bIF\s+{target['param']}\s+NOT\s+IN\s*\((?P<values>[^)]*)\)\s+THEN\s+RAISE\b",
                body,
                re.I,
            )
            assert guard, f"{function.name}: status = {target['param']} with no guard on it"
            targets = _strings(guard["values"])
        found = list(_WHERE_STATUS.finditer(update["where"]))
        assert len(found) == 1, f"{function.name}: its UPDATE's WHERE names the status once"
        where = found[0]
        if where["values"] is not None:
            sources = _strings(where["values"])
        else:
            assert where["value"].startswith("'"), (
                f"{function.name}: WHERE status = {where['value']}: name the statuses"
            )
            sources = {where["value"].strip("'")}
        pairs |= {(s, t) for s in sources for t in targets}
    if re.search(r"\bINSERT\s+INTO\s+llmchat_run\b", body, re.I):
        assigned = set(re.findall(r"\b\w+\.status\s*:=\s*'(\w+)'", body))
        default = Run._meta.get_field("status").default
        pairs |= {(None, t) for t in assigned | {default}}
    return pairs


def test_every_sql_function_declares_the_transitions_its_updates_make():
    found = functions()
    assert set(found) == set(pg.FUNCTIONS)
    declaring = {}
    for name, function in found.items():
        header = declared(function)
        for t_name, sources, target in header:
            assert t_name in BY_NAME, f"{name}: no transition {t_name!r} in the table"
            t = BY_NAME[t_name]
            assert target == t.target, f"{name}: {t_name} goes to {t.target}, not {target}"
            # a function may make a transition from some of its sources (the rest: statements)
            assert sources and set(sources) <= set(t.sources) or sources == t.sources == (), (
                f"{name}: {t_name} leaves {t.sources}, not {sources}"
            )
            assert name in t.function.split(", "), f"{t_name}: the table does not name {name}"
            declaring.setdefault(t_name, set()).add(name)
        pairs = {(s, t) for _, sources, t in header for s in sources or (None,)}
        assert written(function) == pairs, (name, written(function), pairs)
    for t in TABLE:  # each function the table names declares the transition
        for name in filter(None, t.function.split(", ")):
            assert name in declaring.get(t.name, set()), f"{name} does not declare {t.name}"


def test_the_sql_parse_reads_literals_lists_and_guarded_parameters():
    function = functions()["llmchat_run_end_v1"]
    assert written(function) == {
        ("running", t)
        for t in ("succeeded", "failed", "cancelled", "interrupted", "awaiting_approval", "queued")
    }
    assert written(functions()["llmchat_run_claim_v4"]) == {
        ("queued", "running"),
        ("running", "running"),
    }
    assert written(functions()["llmchat_run_enqueue_v5"]) == {(None, "queued"), (None, "running")}
    assert written(functions()["llmchat_run_release_v1"]) == set()
