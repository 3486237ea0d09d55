"""The house's map and import rules (docs/architecture.md) hold.

import-linter checks the contracts of ``pyproject.toml`` on the package as it is; this
module runs them and holds the page to the package: every package and top-level module is
on the map, every contract is named on the page, and the top level stays small.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from importlinter.cli import lint_imports

import django_llmchat

ROOT = Path(django_llmchat.__file__).parent
REPO = ROOT.parent
PAGE = REPO / "docs" / "architecture.md"
# the modules directly in the package (``__init__.py`` aside): the rest lives in packages
TOP_LEVEL_AT_MOST = 20


def contracts() -> list[dict]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return config["tool"]["importlinter"]["contracts"]


def test_the_import_rules_hold():
    code = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True)
    assert code == 0, "an import breaks a rule of docs/architecture.md: run `lint-imports`"


def test_every_package_and_top_level_module_is_on_the_map():
    table = PAGE.read_text().split("## The map", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    mapped = set(re.findall(r"`([a-z_]+)(?:/|\.py)", " ".join(first_cells)))
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in ROOT.glob("*.py") if p.name != "__init__.py"}
    assert sorted((packages | modules) - mapped) == []
    assert sorted(mapped - packages - modules - {"sql", "django_llmchat", "__init__"}) == []


def test_the_top_level_stays_small():
    modules = sorted(p.name for p in ROOT.glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= TOP_LEVEL_AT_MOST, modules


def test_every_contract_is_on_the_page():
    page = PAGE.read_text()
    for contract in contracts():
        assert f"Contract `{contract['id']}`" in page or f"`{contract['id']}`:" in page, contract[
            "id"
        ]


def test_the_layers_on_the_page_are_the_contract():
    (layers,) = [c for c in contracts() if c["id"] == "layers"]
    block = PAGE.read_text().split("```text", 1)[1].split("```", 1)[0]
    drawn = [line.split("  ")[0].strip() for line in block.strip().splitlines()]
    declared = [
        " | ".join(name.removeprefix("django_llmchat.") for name in layer.split(" | "))
        for layer in layers["layers"]
    ]
    assert drawn == declared


def test_every_exception_to_the_layers_is_explained_on_the_page():
    page = PAGE.read_text()
    for contract in contracts():
        for ignored in contract.get("ignore_imports", []):
            importer, imported = (
                part.strip().removeprefix("django_llmchat.") for part in ignored.split("->")
            )
            assert f"`{importer}` -> `{imported}`" in page, ignored
