"""The package's modules import each other without a circle.

Every ``import`` counts, at module level or inside a function (a function-level import
that closes a circle only hides it until the function runs); imports under
``if TYPE_CHECKING:`` are for type checkers and do not count.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import django_llmchat

ROOT = Path(django_llmchat.__file__).parent
PACKAGE = "django_llmchat"


def module_names() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = (PACKAGE, *path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_only(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST):
    """Import statements anywhere in ``tree``, skipping ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from . import x`` of a submodule ``x``
    is an edge to ``x``, not to the package)."""
    modules = module_names()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                subs = [f"{target}.{alias.name}" for alias in node.names]
                targets = [sub for sub in subs if sub in modules] or [target]
            for target in targets:
                while target and target not in modules:  # a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_the_check_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    # and it reads function-level imports and skips TYPE_CHECKING ones
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .hidden import X\n"
        "def f():\n    from .late import Y\n"
    )
    assert sorted(n.module for n in _imports(tree)) == ["late", "typing"]


def test_the_vendor_modules_import_their_parsers_at_module_level():
    graph = import_graph()
    for vendor in ("anthropic", "gemini", "openai_chat", "openai_responses"):
        module = f"{PACKAGE}.providers.{vendor}"
        assert {f"{module}_stream", f"{module}_wire"} <= graph[module]
        assert module not in graph[f"{module}_stream"]


@pytest.mark.parametrize(
    "first", ["loop.runner", "tasks", "runs", "loop.transcript", "models.chat"]
)
def test_each_layer_imports_alone_in_a_fresh_interpreter(first):
    # a module imported on its own once the app registry is ready (a worker, a script)
    code = (
        "import django; django.setup(); "
        f"import importlib; importlib.import_module('{PACKAGE}.{first}')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PATH": "",
            "PYTHONPATH": str(ROOT.parent),
        },
        cwd=str(ROOT.parent),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
