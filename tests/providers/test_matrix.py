from pathlib import Path

from django_llmchat.providers.matrix import render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "providers" / "matrix.md"


def test_docs_matrix_is_up_to_date():
    text = PAGE.read_text()
    assert render(text) == text, (
        "docs/providers/matrix.md is stale: run "
        "python -m django_llmchat.providers.matrix docs/providers/matrix.md"
    )
