from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from genai_prices.data_snapshot import get_snapshot

from django_llmchat.models import LLMModel
from django_llmchat.pricing import PROVIDER_IDS, model_pricing
from django_llmchat.registry import bundled_models, find_model, sync_models

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
def test_sync_creates_rows():
    created, updated = sync_models()
    assert updated == 0
    assert created == LLMModel.objects.count()

    row = LLMModel.objects.get(provider="openai", model_id="gpt-4.1-mini")
    assert row.name == "GPT-4.1 mini"
    assert row.family == "gpt-4.1"
    assert row.context_window == 1_047_576
    assert row.max_output_tokens == 32_768
    assert row.modalities == {"input": ["text", "image", "pdf"], "output": ["text"]}
    assert row.supports("tools") and row.supports("vision")
    assert not row.supports("thinking")
    assert row.pricing == model_pricing("gpt-4.1-mini", "openai")
    assert row.pricing["input_mtok"] == "0.4"
    assert row.metadata["sources"] == ["bundled", "genai-prices"]

    reasoner = LLMModel.objects.get(provider="anthropic", model_id="claude-sonnet-4-5")
    assert reasoner.supports("thinking")
    assert reasoner.pricing["input_mtok"]["tiers"] == [{"start": 200000, "price": "6"}]


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


@pytest.mark.django_db
def test_second_sync_changes_nothing(django_assert_max_num_queries):
    created, _ = sync_models()
    assert created > 1000
    before = {row.pk: row.updated_at for row in LLMModel.objects.all()}

    # Savepoint, one SELECT, release: no per-model queries.
    with django_assert_max_num_queries(3):
        assert sync_models() == (0, 0)
    assert {row.pk: row.updated_at for row in LLMModel.objects.all()} == before


@pytest.mark.django_db
def test_first_sync_inserts_in_bulk():
    with CaptureQueriesContext(connection) as queries:
        created, _ = sync_models()
    assert created > 1000
    statements = [query["sql"].split(None, 1)[0].upper() for query in queries]
    assert statements.count("SELECT") == 1
    assert "UPDATE" not in statements
    # Batches of up to 500 rows (fewer where the backend caps query parameters, as SQLite).
    assert statements.count("INSERT") <= created // 50


@pytest.mark.django_db
def test_sync_repairs_changed_rows_only(django_assert_max_num_queries):
    sync_models()
    row = LLMModel.objects.get(provider="gemini", model_id="gemini-2.5-flash")
    LLMModel.objects.filter(pk=row.pk).update(
        capabilities=[], pricing={"input_mtok": "99"}, metadata={"note": "kept"}
    )
    LLMModel.objects.filter(provider="anthropic", model_id="claude-haiku-4-5").update(
        context_window=1
    )

    with django_assert_max_num_queries(4):
        assert sync_models() == (0, 2)

    row.refresh_from_db()
    assert row.supports("thinking")
    assert row.pricing == model_pricing("gemini-2.5-flash", "gemini")
    assert row.metadata["note"] == "kept"
    assert row.metadata["sources"] == ["bundled", "genai-prices"]
    assert LLMModel.objects.get(
        model_id="claude-haiku-4-5", provider="anthropic"
    ).context_window == (200_000)
    assert sync_models() == (0, 0)


@pytest.mark.django_db
def test_sync_leaves_rows_it_has_no_source_for():
    custom = LLMModel.objects.create(
        provider="openai_compatible",
        model_id="my-model",
        name="Mine",
        pricing={"input_mtok": "0.1", "output_mtok": "0.2"},
    )
    sync_models()
    custom.refresh_from_db()
    assert custom.name == "Mine"
    assert custom.pricing == {"input_mtok": "0.1", "output_mtok": "0.2"}


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


@pytest.mark.django_db
def test_sync_command():
    out = StringIO()
    call_command("llmchat_sync_models", stdout=out)
    created = LLMModel.objects.count()
    assert out.getvalue().strip() == f"{created} created, 0 updated"

    out = StringIO()
    call_command("llmchat_sync_models", stdout=out)
    assert out.getvalue().strip() == "0 created, 0 updated"

    LLMModel.objects.filter(provider="openai", model_id="gpt-5").delete()
    out = StringIO()
    call_command("llmchat_sync_models", verbosity=2, stdout=out)
    assert out.getvalue().splitlines() == ["openai: 1 created, 0 updated", "1 created, 0 updated"]
