"""Every ```python block in the docs runs (blocks of one page share a namespace)."""

import re
import sys
import types
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# Blocks that configure a project rather than run (settings files) are marked by their
# first line.
SKIP_MARKERS = ("# settings.py",)


def pages():
    for path in sorted(DOCS.rglob("*.md")):
        blocks = [b for b in BLOCK.findall(path.read_text()) if not b.startswith(SKIP_MARKERS)]
        if blocks:
            yield pytest.param(path, blocks, id=str(path.relative_to(DOCS)))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path, blocks", list(pages()))
def test_docs_examples_run(path, blocks):
    # a real module, so classes defined in the examples (agents) import by dotted path
    name = "docs_" + re.sub(r"\W", "_", str(path.relative_to(DOCS).with_suffix("")))
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        for code in blocks:
            exec(compile(code, str(path), "exec"), module.__dict__)
    finally:
        sys.modules.pop(name, None)
