"""Every module of the package has a test file found from its name, or a line in
``EXEMPT`` saying where it is tested.

A module ``<package>/<name>.py`` is tested in ``test_<name>.py`` or ``test_<name>_*.py``:

* under ``tests/<package>/`` when its package has a folder of tests of its own
  (``tests/api/``, ``tests/providers/``, ``tests/runs/``);
* else anywhere else under ``tests/`` (``tests/loop/``, ``tests/integration/``...),
  unless a module of the same name outside any package owns that file (``values.py``
  owns ``test_values.py``, not ``testing/wire/values.py``);
* or ``test_<package>_<name>*.py`` anywhere (``test_testing_server.py``).

A leading underscore is not part of the name, nor ``llmchat_`` of a management command. A
file named exactly after one module (``test_ui_chats.py``) is not another's by its prefix
(``ui.py``). A module ``<owner>_<part>.py`` beside ``<owner>.py`` is part of it and tested
with it (``providers/anthropic_stream.py`` in ``test_anthropic.py``). A package whose
``__init__.py`` defines functions or classes is one module in parts: the tests named
after the package test each part (``checks/settings.py`` in ``test_checks_and_conf.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import django_llmchat

ROOT = Path(django_llmchat.__file__).parent
TESTS = Path(__file__).parent

# module (relative to django_llmchat/) -> where it is tested, or why it has no file
EXEMPT = {
    "loop/aio.py": "async streams of the sync loop: tests/api/test_sse.py (ASGI)",
    "api/base.py": "the views' shared bases, exercised by every file of tests/api",
    "api/message_serializers.py": "tests/api/test_messages.py and test_branches.py",
    "api/urls.py": "the routes, exercised by every file of tests/api",
    "apps.py": "the AppConfig, exercised by every test",
    "errors.py": "the exceptions, raised and checked across the suite",
    "providers/types.py": "the provider dataclasses, used by every file of tests/providers",
    "testing/pytest_plugin.py": "the fake_llm fixture, used across the suite",
    "testing/wire/anthropic.py": "the fake server's dialects: tests/test_testing_server.py",
    "testing/wire/chat_completions.py": "the fake server's dialects: tests/test_testing_server.py",
    "testing/wire/gemini.py": "the fake server's dialects: tests/test_testing_server.py",
    "testing/wire/render.py": "the fake server's dialects: tests/test_testing_server.py",
    "testing/wire/responses.py": "the fake server's dialects: tests/test_testing_server.py",
    "testing/wire/values.py": "scripted replies, used across the suite",
}


def modules() -> list[Path]:
    return sorted(
        path
        for path in ROOT.rglob("*.py")
        if "migrations" not in path.parts and path.name != "__init__.py"
    )


def _names(module: Path) -> set[str]:
    parts = module.relative_to(ROOT).with_suffix("").parts
    name = parts[-1].lstrip("_")
    if parts[:2] == ("management", "commands"):
        return {name, name.removeprefix("llmchat_")}
    return {name}


def _owns_its_parts(init: Path) -> bool:
    """A package whose ``__init__.py`` defines functions or classes is one module split in
    parts (``checks/``, ``inputs/``, ``mcp/``, ``api/ui/``): its tests test every part."""
    tree = ast.parse(init.read_text())
    return any(
        isinstance(node, ast.FunctionDef | ast.ClassDef) and not node.name.startswith("__")
        for node in tree.body
    )


def _named(stem: str, names: set[str], *, exactly: bool = False) -> bool:
    return any(
        stem == f"test_{n}" or (not exactly and stem.startswith(f"test_{n}_")) for n in names
    )


def files_named_after(module: Path, tests: list[Path], all_modules: list[Path]) -> list[Path]:
    """The test files named after ``module`` (see the module's docstring)."""
    relative = module.relative_to(ROOT)
    package = relative.parts[:-1]
    names = _names(module)
    owner = module.with_name(module.stem.rsplit("_", 1)[0] + ".py")
    if "_" in module.stem.lstrip("_") and owner != module and owner.exists():
        names |= _names(owner)
    if package and _owns_its_parts(module.parent / "__init__.py"):
        names |= {package[-1]}
    folders = {d.name for d in TESTS.iterdir() if d.is_dir() and (ROOT / d.name).is_dir()}
    top_level = {m.stem for m in all_modules if len(m.relative_to(ROOT).parts) == 1}

    def owned_by_another(test: Path) -> bool:
        return any(
            other != module and _named(test.stem, _names(other), exactly=True)
            for other in all_modules
        )

    found = []
    for test in tests:
        where = test.relative_to(TESTS).parts[:-1]
        if package and _named(test.stem, {f"{package[-1]}_{n}" for n in names}):
            found.append(test)
        elif not _named(test.stem, names) or (
            not _named(test.stem, names, exactly=True) and owned_by_another(test)
        ):
            continue
        elif package and package[0] in folders:
            if where[:1] == package[:1]:
                found.append(test)
        elif not (where and where[0] in folders) and (not package or module.stem not in top_level):
            found.append(test)
    return found


def test_every_module_has_a_test_file_named_after_it_or_a_reason():
    tests = sorted(TESTS.rglob("test_*.py"))
    every = modules()
    missing = []
    needless = []
    for module in every:
        key = module.relative_to(ROOT).as_posix()
        found = files_named_after(module, tests, every)
        if not found and key not in EXEMPT:
            missing.append(key)
        if found and key in EXEMPT:
            needless.append(f"{key}: {', '.join(str(t.relative_to(TESTS)) for t in found)}")
    assert missing == [], "modules without a test file named after them (or a line in EXEMPT)"
    assert needless == [], "EXEMPT lists modules whose test file exists"
    known = {m.relative_to(ROOT).as_posix() for m in every}
    assert sorted(set(EXEMPT) - known) == [], "EXEMPT names modules that are gone"


def test_the_rule_finds_the_files_it_names():
    tests = sorted(TESTS.rglob("test_*.py"))
    every = modules()

    def found(name: str) -> list[str]:
        files = files_named_after(ROOT / name, tests, every)
        return sorted(t.relative_to(TESTS).as_posix() for t in files)

    assert found("runs/claims.py") == ["runs/test_claims.py"]
    assert found("runs/admission.py") == ["runs/test_admission.py", "runs/test_admission_gate.py"]
    assert found("providers/anthropic_stream.py") == ["providers/test_anthropic.py"]
    assert found("testing/server.py") == ["test_testing_server.py"]
    assert found("providers/_json.py") == ["providers/test_json.py"]
    assert found("management/commands/llmchat_demo_data.py") == ["test_demo_data.py"]
    # a file of tests/api/ is not the test of a module elsewhere, nor of a same-named one
    assert found("api/base.py") == [] and found("admin/base.py") == ["test_admin_base.py"]
    assert found("testing/wire/values.py") == [] and found("values.py") == ["test_values.py"]
    # nor is a file named exactly after another module
    assert "api/test_ui_chats.py" in found("api/ui/chats.py")
