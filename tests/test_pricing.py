"""Prices computed by hand from the genai-prices data, checked against ``pricing``."""

from datetime import UTC, datetime
from decimal import Decimal as D

import genai_prices
import pytest
from genai_prices.data_snapshot import get_snapshot

from django_llmchat.catalog.pricing import (
    PRICE_KEYS,
    PROVIDER_IDS,
    model_pricing,
    price,
    price_from_table,
)
from django_llmchat.values import COST_FIELDS, Cost, Tokens

# A fixed request time keeps scheduled price changes in the data out of the numbers.
AT = datetime(2025, 11, 1, 12, 0, tzinfo=UTC)
UNKNOWN = Cost()


def assert_parts_add_up(cost: Cost) -> None:
    parts = [cost.input, cost.output, cost.cache_read, cost.cache_write]
    assert all(isinstance(value, D) for value in [*parts, cost.total])
    assert sum(parts) == cost.total


def genai_total(tokens: Tokens, model_id: str, provider_id: str) -> D:
    """genai-prices' own total, for the same usage in its token semantics."""
    usage = genai_prices.Usage(
        input_tokens=tokens.input_tokens + tokens.cache_read_tokens + tokens.cache_write_tokens,
        cache_read_tokens=tokens.cache_read_tokens,
        cache_write_tokens=tokens.cache_write_tokens,
        output_tokens=tokens.output_tokens,
    )
    return genai_prices.calc_price(
        usage, model_id, provider_id=provider_id, genai_request_timestamp=AT
    ).total_price


# -- Anthropic: cache reads and writes priced apart, outside input_tokens ---------------


def test_anthropic_cache_reads_and_writes():
    # claude-haiku-4-5: $1 input, $5 output, $0.10 cache read, $1.25 cache write per MTok.
    tokens = Tokens(
        input_tokens=1_000,
        output_tokens=500,
        cache_read_tokens=3_000,
        cache_write_tokens=2_000,
        thinking_tokens=200,
    )
    cost = price(tokens, "claude-haiku-4-5", "anthropic", at=AT)
    assert cost.input == D("0.001")  # 1000 * 1 / 1e6
    assert cost.cache_read == D("0.0003")  # 3000 * 0.10 / 1e6
    assert cost.cache_write == D("0.0025")  # 2000 * 1.25 / 1e6
    assert cost.output == D("0.0025")  # 500 * 5 / 1e6
    assert cost.thinking == D("0.001")  # 200 * 5 / 1e6, inside output
    assert cost.total == D("0.0063")  # thinking not added again
    assert_parts_add_up(cost)
    assert cost.total == genai_total(tokens, "claude-haiku-4-5", "anthropic")


def test_dated_model_id_prices_like_its_alias():
    tokens = Tokens(input_tokens=1_000, output_tokens=500, cache_read_tokens=3_000)
    dated = price(tokens, "claude-haiku-4-5-20251001", "anthropic", at=AT)
    assert dated == price(tokens, "claude-haiku-4-5", "anthropic", at=AT)
    assert dated.total == D("0.0038")


# -- OpenAI: no cache-write price, reasoning inside output ------------------------------


def test_openai_cached_input():
    # gpt-4o: $2.50 input, $10 output, $1.25 cached input per MTok.
    tokens = Tokens(input_tokens=2_000, output_tokens=1_000, cache_read_tokens=8_000)
    cost = price(tokens, "gpt-4o", "openai", at=AT)
    assert cost == Cost(
        input=D("0.005"),
        output=D("0.01"),
        cache_read=D("0.01"),
        cache_write=D("0"),
        thinking=D("0"),
        total=D("0.025"),
    )
    assert cost.total == genai_total(
        Tokens(**tokens.to_dict(), cache_write_tokens=0), "gpt-4o", "openai"
    )


def test_openai_cache_writes_without_a_price_are_billed_as_input():
    tokens = Tokens(input_tokens=1_000, output_tokens=0, cache_write_tokens=1_000)
    cost = price(tokens, "gpt-4o", "openai", at=AT)
    assert cost.cache_write == D("0.0025")  # 1000 * 2.50 / 1e6
    assert cost.total == D("0.005")
    assert cost.total == genai_total(
        Tokens(**tokens.to_dict(), cache_read_tokens=0), "gpt-4o", "openai"
    )


def test_openai_reasoning_tokens_are_inside_output():
    # gpt-5: $1.25 input, $10 output per MTok.
    tokens = Tokens(input_tokens=10_000, output_tokens=3_000, thinking_tokens=2_000)
    cost = price(tokens, "gpt-5", "openai", at=AT)
    assert cost.input == D("0.0125")
    assert cost.output == D("0.03")
    assert cost.thinking == D("0.02")
    assert cost.total == D("0.0425")


def test_price_changes_follow_the_request_time():
    # o3 dropped from $10/$40 to $2/$8 per MTok on 2025-06-10.
    tokens = Tokens(input_tokens=1_000_000, output_tokens=1_000_000)
    before = price(tokens, "o3", "openai", at=datetime(2025, 5, 1, tzinfo=UTC))
    after = price(tokens, "o3", "openai", at=datetime(2025, 7, 1, tzinfo=UTC))
    assert (before.input, before.output, before.total) == (D(10), D(40), D(50))
    assert (after.input, after.output, after.total) == (D(2), D(8), D(10))


def test_time_of_day_prices():
    # DeepSeek: $0.27 input / $1.10 output 00:30-16:30 UTC, half that off-peak.
    tokens = Tokens(input_tokens=1_000_000, output_tokens=1_000_000)
    peak = price(tokens, "deepseek-chat", "deepseek", at=datetime(2025, 11, 1, 10, tzinfo=UTC))
    off_peak = price(tokens, "deepseek-chat", "deepseek", at=datetime(2025, 11, 1, 20, tzinfo=UTC))
    assert peak.total == D("1.37")
    assert off_peak.total == D("0.685")


# -- tiered (long-context) prices -------------------------------------------------------


def test_gemini_long_context_tier():
    # gemini-2.5-pro: $1.25 input / $10 output up to 200k prompt tokens, $2.50 / $15 above.
    long_prompt = price(
        Tokens(input_tokens=250_000, output_tokens=1_000), "gemini-2.5-pro", "gemini", at=AT
    )
    assert long_prompt.input == D("0.625")  # 250000 * 2.50 / 1e6: every token at the tier rate
    assert long_prompt.output == D("0.015")  # 1000 * 15 / 1e6
    assert long_prompt.total == D("0.64")

    short_prompt = price(
        Tokens(input_tokens=100_000, output_tokens=1_000), "gemini-2.5-pro", "gemini", at=AT
    )
    assert short_prompt.input == D("0.125")
    assert short_prompt.output == D("0.01")
    assert short_prompt.total == D("0.135")


def test_tier_threshold_counts_cached_prompt_tokens():
    # claude-sonnet-4-5 above 200k: $6 input, $0.60 cache read, $7.50 cache write, $22.50 output.
    tokens = Tokens(
        input_tokens=150_000,
        output_tokens=2_000,
        cache_read_tokens=40_000,
        cache_write_tokens=20_000,
    )  # prompt = 210k tokens
    cost = price(tokens, "claude-sonnet-4-5", "anthropic", at=AT)
    assert cost.input == D("0.9")
    assert cost.cache_read == D("0.024")
    assert cost.cache_write == D("0.15")
    assert cost.output == D("0.045")
    assert cost.total == D("1.119")
    assert_parts_add_up(cost)
    assert cost.total == genai_total(tokens, "claude-sonnet-4-5", "anthropic")


def test_tier_starts_above_its_threshold():
    # Exactly 200k prompt tokens is still the base rate.
    cost = price(Tokens(input_tokens=200_000, output_tokens=0), "gemini-2.5-pro", "gemini", at=AT)
    assert cost.input == D("0.25")


# -- unknown prices ---------------------------------------------------------------------

TOKENS = Tokens(input_tokens=1_000, output_tokens=1_000)


@pytest.mark.parametrize(
    ("model_id", "provider"),
    [
        ("no-such-model", "openai"),
        ("gpt-4o", "anthropic"),
        ("llama3.2", "ollama"),
        ("gpt-4o", "ollama"),  # local: never priced
        ("gpt-4o", "no-such-provider"),
        ("my-fine-tune", "openai_compatible"),
        ("", "openai"),
    ],
)
def test_unknown_model_or_provider_is_all_none(model_id, provider):
    cost = price(TOKENS, model_id, provider, at=AT)
    assert cost == UNKNOWN
    assert all(getattr(cost, name) is None for name in COST_FIELDS)
    assert not cost.is_known


def test_openai_compatible_guesses_the_provider_from_the_model_id():
    assert price(TOKENS, "gpt-4o", "openai_compatible", at=AT).total == D("0.0125")
    assert price(TOKENS, "claude-haiku-4-5", None, at=AT).total == D("0.006")


def test_provider_table_uses_genai_prices_ids():
    known = {provider.id for provider in get_snapshot().providers}
    assert PROVIDER_IDS["gemini"] == "google"
    assert PROVIDER_IDS["xai"] == "x-ai"
    assert PROVIDER_IDS["ollama"] is None
    for name, provider_id in PROVIDER_IDS.items():
        if provider_id:
            assert provider_id in known, name
    assert price(TOKENS, "grok-4", "xai", at=AT).total == D("0.018")  # $3 + $15 per MTok


# -- token counts that are not reported -------------------------------------------------


def test_missing_counts_are_zero_when_input_or_output_is_known():
    cost = price(Tokens(input_tokens=1_000), "gpt-4o", "openai", at=AT)
    assert cost.input == D("0.0025")
    assert cost.output == cost.cache_read == cost.cache_write == cost.thinking == D(0)
    assert cost.total == D("0.0025")

    cost = price(Tokens(output_tokens=1_000), "gpt-4o", "openai", at=AT)
    assert cost.input == D(0)
    assert cost.total == D("0.01")


@pytest.mark.parametrize(
    "tokens",
    [Tokens(), Tokens(cache_read_tokens=1_000), Tokens(thinking_tokens=10)],
)
def test_no_input_or_output_count_is_unknown(tokens):
    assert price(tokens, "gpt-4o", "openai", at=AT) == UNKNOWN
    assert price_from_table(tokens, {"input_mtok": "1", "output_mtok": "2"}) == UNKNOWN


# -- price tables -----------------------------------------------------------------------


def test_price_from_table_flat():
    table = {
        "input_mtok": "1.25",
        "output_mtok": "10",
        "cache_read_mtok": "0.125",
        "cache_write_mtok": "1.5",
    }
    tokens = Tokens(
        input_tokens=4_000,
        output_tokens=2_000,
        cache_read_tokens=10_000,
        cache_write_tokens=1_000,
        thinking_tokens=500,
    )
    cost = price_from_table(tokens, table)
    assert cost == Cost(
        input=D("0.005"),
        output=D("0.02"),
        cache_read=D("0.00125"),
        cache_write=D("0.0015"),
        thinking=D("0.005"),
        total=D("0.02775"),
    )
    assert_parts_add_up(cost)


def test_price_from_table_tiers():
    table = {
        "input_mtok": {"base": "1.25", "tiers": [{"start": 200000, "price": "2.5"}]},
        "output_mtok": {"base": "10", "tiers": [{"start": 200000, "price": "15"}]},
        "cache_read_mtok": {"base": "0.125", "tiers": [{"start": 200000, "price": "0.25"}]},
    }
    below = price_from_table(Tokens(input_tokens=100_000, output_tokens=1_000), table)
    assert (below.input, below.output, below.total) == (D("0.125"), D("0.01"), D("0.135"))
    above = price_from_table(
        Tokens(input_tokens=190_000, output_tokens=1_000, cache_read_tokens=20_000), table
    )
    assert above.input == D("0.475")  # 190000 * 2.50 / 1e6
    assert above.cache_read == D("0.005")  # 20000 * 0.25 / 1e6
    assert above.output == D("0.015")
    assert above.total == D("0.495")


def test_price_from_table_several_tiers_and_numbers():
    table = {
        "input_mtok": {
            "base": 1,
            "tiers": [{"start": 300_000, "price": 3}, {"start": 100_000, "price": 2}],
        },
        "output_mtok": 4,
    }
    assert price_from_table(Tokens(input_tokens=150_000, output_tokens=0), table).input == D("0.3")
    assert price_from_table(Tokens(input_tokens=400_000, output_tokens=0), table).input == D("1.2")


def test_price_from_table_missing_cache_prices_bill_as_input():
    table = {"input_mtok": "2", "output_mtok": "8"}
    cost = price_from_table(
        Tokens(
            input_tokens=1_000, output_tokens=0, cache_read_tokens=1_000, cache_write_tokens=500
        ),
        table,
    )
    assert cost.cache_read == D("0.002")
    assert cost.cache_write == D("0.001")
    assert cost.total == D("0.005")


def test_price_from_table_unknown():
    assert price_from_table(TOKENS, {}) == UNKNOWN
    assert price_from_table(TOKENS, None) == UNKNOWN
    assert price_from_table(TOKENS, {"web_searches_kcount": "10"}) == UNKNOWN
    assert price_from_table(TOKENS, {"input_mtok": "cheap", "output_mtok": "1"}) == UNKNOWN
    assert price_from_table(TOKENS, {"input_mtok": {"tiers": []}, "output_mtok": "1"}) == UNKNOWN
    # An input-only table (an embedding model) cannot price generated tokens.
    embed = price_from_table(TOKENS, {"input_mtok": "0.02"})
    assert embed.input == D("0.00002")
    assert embed.output is None
    assert embed.total is None
    assert price_from_table(
        Tokens(input_tokens=1_000, output_tokens=0), {"input_mtok": "0.02"}
    ).total == D("0.00002")


def test_model_pricing_shape():
    assert model_pricing("gemini-2.5-pro", "gemini", at=AT) == {
        "input_mtok": {"base": "1.25", "tiers": [{"start": 200000, "price": "2.5"}]},
        "output_mtok": {"base": "10", "tiers": [{"start": 200000, "price": "15"}]},
        "cache_read_mtok": {"base": "0.125", "tiers": [{"start": 200000, "price": "0.25"}]},
        "web_searches_kcount": "35",
    }
    haiku = model_pricing("claude-haiku-4-5-20251001", "anthropic", at=AT)
    assert {key: haiku[key] for key in PRICE_KEYS} == {
        "input_mtok": "1",
        "output_mtok": "5",
        "cache_read_mtok": "0.1",
        "cache_write_mtok": "1.25",
    }
    assert model_pricing("no-such-model", "openai") is None
    assert model_pricing("llama3.2", "ollama") is None


def test_model_pricing_holds_the_peak_rate_of_daily_windows():
    table = model_pricing("deepseek-chat", "deepseek", at=AT)
    assert (table["input_mtok"], table["output_mtok"]) == ("0.27", "1.1")


@pytest.mark.parametrize(
    ("model_id", "provider"),
    [
        ("claude-haiku-4-5", "anthropic"),
        ("claude-sonnet-4-5", "anthropic"),
        ("gpt-4.1-mini", "openai"),
        ("gemini-2.5-pro", "gemini"),
        ("gemini-2.5-flash", "gemini"),
        ("grok-4", "xai"),
        ("mistral-small-latest", "mistral"),
    ],
)
@pytest.mark.parametrize("prompt", [10_000, 300_000])
def test_table_prices_match_live_prices(model_id, provider, prompt):
    tokens = Tokens(
        input_tokens=prompt,
        output_tokens=3_000,
        cache_read_tokens=prompt // 4,
        cache_write_tokens=prompt // 10,
        thinking_tokens=1_000,
    )
    table = model_pricing(model_id, provider, at=AT)
    assert price_from_table(tokens, table) == price(tokens, model_id, provider, at=AT)
