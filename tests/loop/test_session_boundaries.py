"""The run object and its loop meet through public names only: no module of the run
reads another module's private attribute (``x._name``, ``x`` not ``self``/``cls``, where
``_name`` is defined in another module of the package and not in this one). Django's and
DRF's own privates (``_meta``...) are not the package's and are fenced elsewhere
(tests/test_django_internals.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import django_llmchat

ROOT = Path(django_llmchat.__file__).parent

# the run's modules: its session, its loop, its gate and its drivers
SCOPE = [
    "loop/session.py",
    "loop/run_state.py",
    "loop/runner.py",
    "loop/attempts.py",
    "loop/toolrun.py",
    "loop/steps.py",
    "tasks.py",
    "api/ui/views.py",
    "models/chat.py",
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "runs").glob("*.py")),
]

# (module, attribute) -> why it is allowed
ALLOWED = {
    ("runs/admission.py", "_insert"): "the gate writes the prompt with its attachments "
    "through the chat's own insert (Chat._insert), in the admission's transaction",
    ("runs/admission.py", "_settle_new_row"): "the gate's one call on PostgreSQL inserts "
    "an unsaved chat's row: what Chat.save() settles on a new row first (the title's source)",
    ("runs/admission.py", "_inserted_as"): "and the chat instance follows the row that call "
    "inserted, as after Chat.save()",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_privates(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, module and class
    attributes, and attributes it sets on ``self``/``cls``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
                    elif (
                        isinstance(sub, ast.Attribute)
                        and isinstance(sub.value, ast.Name)
                        and sub.value.id in ("self", "cls")
                    ):
                        names.add(sub.attr)
    return {name for name in names if _private(name)}


def crossings() -> list[str]:
    trees = {
        path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(), str(path))
        for path in ROOT.rglob("*.py")
        if "migrations" not in path.parts
    }
    defined = {module: defined_privates(tree) for module, tree in trees.items()}
    found = []
    for module in SCOPE:
        for node in ast.walk(trees[module]):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in defined[module] or (module, node.attr) in ALLOWED:
                continue
            owners = sorted(other for other, names in defined.items() if node.attr in names)
            if owners:
                found.append(f"{module}:{node.lineno}: {ast.unparse(node)} ({owners[0]})")
    return found


def test_the_run_modules_use_no_private_name_of_another_module():
    assert crossings() == []


def test_the_run_modules_read_nothing_back_with_getattr():
    """The session and its loop know each other's attributes: no ``getattr`` guessing
    whether a run was admitted."""
    found = []
    for module in ("loop/session.py", "loop/run_state.py", "loop/runner.py", "api/ui/views.py"):
        tree = ast.parse((ROOT / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr":
                found.append(f"{module}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_the_check_sees_a_crossing():
    tree = ast.parse("def f(runner):\n    runner._blocked_run(1)\n")
    assert "_blocked_run" not in defined_privates(tree)
    assert [
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and _private(n.attr)
    ] == ["_blocked_run"]
