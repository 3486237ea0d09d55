"""The model registry's rows (``models/llm_model.py``): ``find_model`` and an exact id winning."""

import pytest

from django_llmchat.catalog.registry import find_model, sync_models
from django_llmchat.models import LLMModel


@pytest.mark.django_db
def test_find_model(django_assert_num_queries):
    sync_models()
    with django_assert_num_queries(1):
        row = find_model("claude-haiku-4-5-20251001")
    assert (row.provider, row.model_id) == ("anthropic", "claude-haiku-4-5")
    assert find_model("claude-haiku-4-5-20251001", "anthropic") == row
    assert find_model("claude-haiku-4-5", "anthropic") == row

    assert find_model("gpt-4o-2024-08-06", "openai").model_id == "gpt-4o"
    assert find_model("gpt-4.1-2025-04-14").model_id == "gpt-4.1"
    # The dated id genai-prices knows for a "-latest" alias.
    assert find_model("claude-3-5-haiku-20241022").model_id == "claude-3-5-haiku-latest"
    assert find_model("gemini-2.5-pro").provider == "gemini"

    assert find_model("gpt-4o", "anthropic") is None
    assert find_model("no-such-model") is None
    assert find_model("") is None
    assert find_model(None) is None


@pytest.mark.django_db
def test_find_model_exact_id_wins():
    LLMModel.objects.create(provider="openai", model_id="gpt-4o", name="GPT-4o")
    dated = LLMModel.objects.create(
        provider="openai", model_id="gpt-4o-2024-08-06", name="GPT-4o 2024-08-06"
    )
    assert find_model("gpt-4o-2024-08-06", "openai") == dated
