"""The feature matrix of the docs, generated from the providers' declared capabilities.

``python -m django_llmchat.providers.matrix docs/providers/matrix.md`` rewrites the table
between the markers of that page; a test fails when the page is out of date.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import provider_classes

START = "<!-- matrix:start -->"
END = "<!-- matrix:end -->"

COLUMNS = (
    ("streaming", "Streaming"),
    ("tools", "Tools"),
    ("parallel_tool_calls", "Parallel calls"),
    ("vision", "Images"),
    ("pdf", "PDF"),
    ("thinking", "Thinking"),
    ("structured_output", "Structured output"),
    ("prompt_caching", "Prompt caching"),
    ("citations", "Citations"),
    ("server_tools", "Server tools"),
)


def _cell(value: object) -> str:
    if value is True:
        return "yes"
    if value is False:
        return "—"
    return str(value)


def feature_matrix() -> str:
    """The Markdown table: one row per provider name, one column per capability."""
    header = "| provider | wire protocol | " + " | ".join(t for _, t in COLUMNS) + " |"
    rule = "|" + "---|" * (len(COLUMNS) + 2)
    rows = [header, rule]
    for name, cls in provider_classes().items():
        caps = cls.capabilities
        protocol = cls.__module__.rsplit(".", 1)[-1].replace("_", " ")
        cells = " | ".join(_cell(getattr(caps, attr)) for attr, _ in COLUMNS)
        rows.append(f"| `{name}` | {protocol} | {cells} |")
    return "\n".join(rows)


def render(page: str) -> str:
    """``page`` with the table between the markers replaced by a fresh one."""
    head, _, rest = page.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{feature_matrix()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else "docs/providers/matrix.md")
    path.write_text(render(path.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
