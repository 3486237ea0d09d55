"""The model list's filters (``api/filters.py``): capability, search, integer bounds in ASCII
digits; bad values answer 4xx, never 500."""

import pytest

from .conftest import ids, url

pytestmark = pytest.mark.django_db


def test_models_list_and_filters(api, registry):
    assert ids(api.get(url("model-list"))) == [
        "claude-haiku-4-5",
        "gemini-2.5-flash",
        "gpt-4.1",
        "gpt-4.1-mini",
    ]
    assert ids(api.get(url("model-list"), {"provider": "openai"})) == ["gpt-4.1", "gpt-4.1-mini"]
    assert ids(api.get(url("model-list"), {"family": "claude-haiku"})) == ["claude-haiku-4-5"]
    assert ids(api.get(url("model-list"), {"capability": "vision"})) == [
        "claude-haiku-4-5",
        "gpt-4.1",
    ]
    assert ids(api.get(url("model-list") + "?capability=vision&capability=streaming")) == [
        "gpt-4.1"
    ]
    assert ids(api.get(url("model-list"), {"search": "4.1-MINI"})) == ["gpt-4.1-mini"]
    assert ids(api.get(url("model-list"), {"search": "flash"})) == ["gemini-2.5-flash"]
    assert ids(
        api.get(url("model-list"), {"min_context_window": 1_000_000, "provider": "gemini"})
    ) == ["gemini-2.5-flash"]
    assert ids(api.get(url("model-list"), {"provider": "nope"})) == []
    row = api.get(url("model-detail", pk=registry[0].pk)).json()
    assert row["capabilities"] == ["streaming", "tools", "vision"]
    assert api.get(url("model-detail", pk=10**6)).status_code == 404


@pytest.mark.parametrize(
    "params",
    [
        {"capability": 'tools"]'},
        {"capability": "%"},
        {"min_context_window": "abc"},
        {"min_context_window": "NaN"},
        {"search": "a\x00"},
        {"page": "abc"},
        {"page": "999999999999999999999"},
    ],
)
def test_bad_model_filters_are_4xx(api, registry, params):
    response = api.get(url("model-list"), params)
    assert 400 <= response.status_code < 500, response.content


@pytest.mark.parametrize(
    "params",
    [
        {"capability": ""},
        {"min_context_window": "0.5"},
        {"page_size": "null"},
        {"page_size": "0"},
        {"page_size": "501"},
        {"page_size": "-1"},
    ],
)
def test_model_list_inputs_the_schema_refuses_are_400s(api, registry, params):
    response = api.get(url("model-list"), params)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [next(iter(params))]


@pytest.mark.parametrize(
    "params",
    [
        {"page": "\u0661"},  # Arabic-Indic 1: int() reads it, the schema's integer does not
        {"page": "\uff11"},  # full-width 1
        {"page": "0"},
        {"page": "-1"},
        {"page": "abc"},
        {"min_context_window": "\u0663"},
        {"min_context_window": "\uff13"},
        {"min_context_window": "3.0"},
        {"capability": "tools\n"},
    ],
)
def test_numbers_are_ascii_digits_and_names_whole(api, registry, params):
    response = api.get(url("model-list"), params)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [next(iter(params))]


def test_huge_numbers_in_filters(api, registry):
    assert ids(api.get(url("model-list"), {"min_context_window": "9" * 40})) == []
