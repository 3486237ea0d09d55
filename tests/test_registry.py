import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat.catalog.pricing import model_pricing
from django_llmchat.catalog.registry import sync_models
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
