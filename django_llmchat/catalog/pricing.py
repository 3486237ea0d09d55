"""Prices of token usage, from genai-prices or from a stored price table.

Three entry points:

* :func:`price` prices a :class:`~django_llmchat.values.Tokens` for a model id and one of
  our provider names, with the prices genai-prices had in force at a given time.
* :func:`price_from_table` prices tokens with a plain dict of per-million prices, the shape
  stored in ``LLMModel.pricing``.
* :func:`model_pricing` returns that dict for a model, so the registry can store it.

Token semantics differ between us and genai-prices: our ``input_tokens`` exclude cache
reads and cache writes, genai-prices counts them inside its ``input_tokens``. Tiered
(long-context) prices are chosen by the whole prompt: input + cache reads + cache writes.
All money is :class:`~decimal.Decimal` US dollars, never rounded here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

import genai_prices
from genai_prices import types as gp_types
from genai_prices.data_snapshot import get_snapshot

from ..values import Cost, Tokens
from .bundled import bundled_price_tables

__all__ = [
    "GUESS_PROVIDER",
    "PRICE_KEYS",
    "PROVIDER_IDS",
    "find_genai_model",
    "genai_provider_id",
    "model_pricing",
    "price",
    "price_from_table",
    "pricing_table",
]

GUESS_PROVIDER = ""
"""Marker in :data:`PROVIDER_IDS`: no provider hint, genai-prices guesses from the model id."""

PROVIDER_IDS: dict[str, str | None] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
    "xai": "x-ai",
    "deepseek": "deepseek",
    "mistral": "mistral",
    "openrouter": "openrouter",
    # Local models cost nothing we can know: always priced as unknown.
    "ollama": None,
    # Any server speaking the OpenAI wire format: the model id is the only clue.
    "openai_compatible": GUESS_PROVIDER,
}
"""Our provider names -> genai-prices provider ids.

``None``: never priced. :data:`GUESS_PROVIDER`: let genai-prices pick the provider from the
model id. A name missing from this table is passed to genai-prices as it is.
"""

PRICE_KEYS = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok")
"""The keys of a price table that :func:`price_from_table` reads (USD per million tokens)."""

_MILLION = Decimal(1_000_000)

# A rate is a flat price per million tokens, or a base price with (start, price) tiers.
_Tiers = tuple[tuple[int, Decimal], ...]
_Rate = Decimal | tuple[Decimal, _Tiers]


class _Counts(NamedTuple):
    input: int
    output: int
    cache_read: int
    cache_write: int
    thinking: int

    @property
    def prompt(self) -> int:
        """The whole prompt, as the tier thresholds count it."""
        return self.input + self.cache_read + self.cache_write


def _counts(tokens: Tokens) -> _Counts | None:
    """Token counts with ``None`` read as 0, or ``None`` when neither input nor output is known."""
    if tokens.input_tokens is None and tokens.output_tokens is None:
        return None
    return _Counts(
        tokens.input_tokens or 0,
        tokens.output_tokens or 0,
        tokens.cache_read_tokens or 0,
        tokens.cache_write_tokens or 0,
        tokens.thinking_tokens or 0,
    )


def _rate_at(rate: _Rate, prompt_tokens: int) -> Decimal:
    """The price per million that applies to a prompt of ``prompt_tokens`` tokens.

    Crossing a tier's start prices every token at that tier's rate (genai-prices' rule: the
    highest tier whose start is below the prompt size wins).
    """
    if isinstance(rate, Decimal):
        return rate
    base, tiers = rate
    applicable = base
    for start, tier_price in tiers:
        if prompt_tokens > start:
            applicable = tier_price
    return applicable


def _part(count: int, rate: _Rate | None, prompt_tokens: int) -> Decimal | None:
    if count == 0:
        return Decimal(0)
    if rate is None:
        return None
    return count * _rate_at(rate, prompt_tokens) / _MILLION


def _cost(counts: _Counts, rates: Mapping[str, _Rate]) -> Cost:
    """Price ``counts`` with ``rates``; parts always add up to ``total``."""
    input_rate = rates.get("input_mtok")
    output_rate = rates.get("output_mtok")
    if input_rate is None and output_rate is None:
        return Cost()  # not priced per token (images, audio, search...)
    prompt = counts.prompt
    # Without a cache price, cached tokens are billed as ordinary input (as genai-prices does).
    cache_read_rate = rates.get("cache_read_mtok", input_rate)
    cache_write_rate = rates.get("cache_write_mtok", input_rate)

    parts = {
        "input": _part(counts.input, input_rate, prompt),
        "output": _part(counts.output, output_rate, prompt),
        "cache_read": _part(counts.cache_read, cache_read_rate, prompt),
        "cache_write": _part(counts.cache_write, cache_write_rate, prompt),
    }
    known = [value for value in parts.values() if value is not None]
    total = sum(known, Decimal(0)) if len(known) == len(parts) else None
    thinking = _part(counts.thinking, output_rate, prompt)
    return Cost(**parts, thinking=thinking, total=total)


# -- genai-prices ------------------------------------------------------------------------


def genai_provider_id(provider: str | None) -> tuple[bool, str | None]:
    """``(priced, provider_id)`` for one of our provider names.

    ``priced`` is False for providers that are never priced (local models); ``provider_id``
    is ``None`` when genai-prices should guess the provider from the model id.
    """
    if provider is None:
        return True, None
    if provider in PROVIDER_IDS:
        mapped = PROVIDER_IDS[provider]
        if mapped is None:
            return False, None
        return True, mapped or None
    return True, provider


def find_genai_model(
    model_id: str, provider: str | None = None
) -> tuple[gp_types.Provider, gp_types.ModelInfo] | None:
    """The genai-prices provider and model ``model_id`` resolves to, or ``None``."""
    priced, provider_id = genai_provider_id(provider)
    if not priced or not model_id:
        return None
    try:
        return get_snapshot().find_provider_model(model_id, None, provider_id, None)
    except LookupError:
        return None


def _rate_from_genai(value: object) -> _Rate | None:
    if isinstance(value, gp_types.TieredPrices):
        return value.base, tuple((tier.start, tier.price) for tier in value.tiers)
    if isinstance(value, Decimal):
        return value
    return None


def _rates_from_model_price(model_price: gp_types.ModelPrice) -> dict[str, _Rate]:
    rates: dict[str, _Rate] = {}
    for key, value in vars(model_price).items():
        if key.startswith("_"):
            continue
        rate = _rate_from_genai(value)
        if rate is not None:
            rates[key] = rate
    return rates


def price(
    tokens: Tokens,
    model_id: str,
    provider: str | None = None,
    *,
    at: datetime | None = None,
) -> Cost:
    """The cost of ``tokens`` on ``model_id`` at time ``at`` (default: now), from genai-prices.

    ``provider`` is one of our provider names (see :data:`PROVIDER_IDS`); ``None`` lets
    genai-prices guess it from the model id. A model genai-prices does not know is priced
    with the bundled data's own table when it has one (the offline demo model). Unknown
    model or provider, or no token counts at all: a :class:`Cost` whose every field is
    ``None``.
    """
    counts = _counts(tokens)
    if counts is None:
        return Cost()
    priced, provider_id = genai_provider_id(provider)
    if not priced or not model_id:
        return Cost()
    # Prices can depend on the time of day (off-peak rates): cache them per minute.
    when = at or datetime.now(UTC)
    key = (model_id, provider_id, when.replace(second=0, microsecond=0))
    rates = _RATES_CACHE.get(key)
    if rates is None:
        usage = genai_prices.Usage(
            input_tokens=counts.prompt,
            cache_read_tokens=counts.cache_read,
            cache_write_tokens=counts.cache_write,
            output_tokens=counts.output,
        )
        try:
            calculation = genai_prices.calc_price(
                usage, model_id, provider_id=provider_id, genai_request_timestamp=at
            )
        except (LookupError, ValueError):  # unknown model or provider; data it rejects
            table = _bundled_table(model_id, provider)
            return price_from_table(tokens, table) if table else Cost()
        rates = _rates_from_model_price(calculation.model_price)
        if len(_RATES_CACHE) > 512:
            _RATES_CACHE.clear()
        _RATES_CACHE[key] = rates
    return _cost(counts, rates)


def _bundled_table(model_id: str, provider: str | None) -> dict[str, Any] | None:
    """The bundled data's own price table for a model genai-prices does not know."""
    tables = bundled_price_tables()
    if provider is not None:
        return tables.get((provider, model_id))
    return next((t for (_, m), t in sorted(tables.items()) if m == model_id), None)


# (model, provider, minute) -> rates; tiers are resolved per prompt size in _cost
_RATES_CACHE: dict[tuple, dict[str, _Rate]] = {}


# -- price tables (LLMModel.pricing) ----------------------------------------------------


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        result = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return result if result.is_finite() and result >= 0 else None


def _rate_from_json(value: Any) -> _Rate | None:
    if isinstance(value, Mapping):
        base = _decimal(value.get("base"))
        if base is None:
            return None
        tiers: list[tuple[int, Decimal]] = []
        for tier in value.get("tiers") or ():
            if not isinstance(tier, Mapping):
                return None
            start, tier_price = tier.get("start"), _decimal(tier.get("price"))
            if isinstance(start, bool) or not isinstance(start, int) or tier_price is None:
                return None
            tiers.append((start, tier_price))
        tiers.sort(key=lambda item: item[0])
        return base, tuple(tiers)
    return _decimal(value)


def _rate_to_json(rate: _Rate) -> str | dict[str, Any]:
    if isinstance(rate, Decimal):
        return str(rate)
    base, tiers = rate
    return {
        "base": str(base),
        "tiers": [{"start": start, "price": str(tier_price)} for start, tier_price in tiers],
    }


def price_from_table(tokens: Tokens, pricing: Mapping[str, Any] | None) -> Cost:
    """The cost of ``tokens`` with a price table as stored in ``LLMModel.pricing``.

    ``pricing`` maps ``input_mtok``, ``output_mtok``, ``cache_read_mtok`` and
    ``cache_write_mtok`` to USD per million tokens, each a decimal string (or number) or
    ``{"base": "1.25", "tiers": [{"start": 200000, "price": "2.5"}]}``. Other keys are
    ignored. An empty or unusable table prices nothing: every field ``None``.
    """
    counts = _counts(tokens)
    if counts is None or not pricing:
        return Cost()
    rates: dict[str, _Rate] = {}
    for key in PRICE_KEYS:
        if key in pricing and pricing[key] is not None:
            rate = _rate_from_json(pricing[key])
            if rate is None:
                return Cost()  # a malformed price: unknown, never a wrong number
            rates[key] = rate
    return _cost(counts, rates)


def _standing_prices(model: gp_types.ModelInfo, at: datetime) -> gp_types.ModelPrice:
    """The model's standard prices as of ``at``, independent of the time of day.

    Date-bound price changes apply from their start date. Daily windows (DeepSeek's peak
    and off-peak hours) are read as active, so a table holds the peak rate: an upper bound
    rather than a figure that flips with the clock.
    """
    if isinstance(model.prices, gp_types.ModelPrice):
        return model.prices
    chosen = model.prices[0].prices
    for conditional in model.prices:
        constraint = conditional.constraint
        if (
            constraint is None
            or isinstance(constraint, gp_types.TimeOfDateConstraint)
            or constraint.active(at)
        ):
            chosen = conditional.prices
    return chosen


def pricing_table(model: gp_types.ModelInfo, *, at: datetime | None = None) -> dict[str, Any]:
    """The JSON price table of a genai-prices model (see :func:`price_from_table`)."""
    prices = _standing_prices(model, at or datetime.now(tz=UTC))
    return {key: _rate_to_json(rate) for key, rate in _rates_from_model_price(prices).items()}


def model_pricing(
    model_id: str, provider: str | None = None, *, at: datetime | None = None
) -> dict[str, Any] | None:
    """The price table of ``model_id`` in the ``LLMModel.pricing`` shape, or ``None``.

    Besides the four token keys, the table keeps the model's other genai-prices keys
    (``cache_write_1h_mtok``, ``web_searches_kcount``...) in the same shape, for display.
    """
    found = find_genai_model(model_id, provider)
    if found is None:
        table = _bundled_table(model_id, provider)
        return dict(table) if table else None
    return pricing_table(found[1], at=at)
