"""The bundled model data (``bundled.py``): well formed, and a row for every model of our
providers."""

import pytest
from genai_prices.data_snapshot import get_snapshot

from django_llmchat.catalog.pricing import PROVIDER_IDS, model_pricing
from django_llmchat.catalog.registry import bundled_models, sync_models
from django_llmchat.models import LLMModel

CAPABILITIES = {
    "streaming",
    "tools",
    "vision",
    "pdf",
    "thinking",
    "structured_output",
    "prompt_caching",
}


MODALITIES = {"text", "image", "audio", "video", "pdf"}


def test_bundled_data_is_well_formed():
    models = bundled_models()
    keys = [(item["provider"], item["model_id"]) for item in models]
    assert len(keys) == len(set(keys))
    for item in models:
        # a provider genai-prices does not price brings its own prices (the demo)
        assert item["provider"] in PROVIDER_IDS or item["pricing"], item["provider"]
        assert item["name"] and item["family"]
        assert item["context_window"] > 0
        assert item["max_output_tokens"] is None or 0 < item["max_output_tokens"]
        assert set(item["capabilities"]) <= CAPABILITIES
        assert set(item["modalities"]["input"]) <= MODALITIES
        assert item["modalities"]["output"] == ["text"]
        assert ("vision" in item["capabilities"]) == ("image" in item["modalities"]["input"])
        # Every bundled model has a price.
        assert model_pricing(item["model_id"], item["provider"]) is not None, item["model_id"]


@pytest.mark.django_db
def test_every_genai_prices_model_of_our_providers_gets_a_row():
    sync_models()
    providers = {provider.id: provider for provider in get_snapshot().providers}
    for ours in ("openai", "anthropic", "xai", "deepseek", "mistral", "openrouter"):
        expected = {model.id for model in providers[PROVIDER_IDS[ours]].models}
        stored = set(LLMModel.objects.filter(provider=ours).values_list("model_id", flat=True))
        assert expected <= stored, ours

    gemini_ids = set(LLMModel.objects.filter(provider="gemini").values_list("model_id", flat=True))
    assert "gemini-2.0-flash" in gemini_ids
    assert not any(model_id.startswith("claude-") for model_id in gemini_ids)
    assert not LLMModel.objects.filter(provider__in=["ollama", "openai_compatible"]).exists()

    # A model only genai-prices knows: its name and prices, no capability data.
    row = LLMModel.objects.get(provider="xai", model_id="grok-4-0709")
    assert row.name == "Grok 4"
    assert row.context_window == 256_000
    assert row.pricing == {"input_mtok": "3", "output_mtok": "15", "cache_read_mtok": "0.75"}
    assert row.capabilities == []
    assert row.metadata["sources"] == ["genai-prices"]

    # A bundled alias genai-prices resolves: bundled capabilities, genai-prices' prices.
    alias = LLMModel.objects.get(provider="xai", model_id="grok-4")
    assert alias.pricing == row.pricing
    assert alias.metadata["genai_prices"]["model"] == "grok-4-0709"
    assert alias.supports("thinking")
