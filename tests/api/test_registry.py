"""``models/`` (``api/registry.py``): the model registry over REST, by pages of a bounded size."""

import pytest

from .conftest import ids, url

pytestmark = pytest.mark.django_db


def test_pages_by_number(api, registry):
    assert len(ids(api.get(url("model-list"), {"page": "1", "page_size": "3"}))) == 3
    assert len(ids(api.get(url("model-list"), {"page": "2", "page_size": "3"}))) == 1
    assert len(ids(api.get(url("model-list"), {"page": "last", "page_size": "3"}))) == 1
    assert api.get(url("model-list"), {"page": "3", "page_size": "3"}).status_code == 404
    wide = ids(api.get(url("model-list"), {"min_context_window": " 1048576 "}))
    assert wide == ["gemini-2.5-flash"]


def test_model_list_page_size_in_range(api, registry):
    body = api.get(url("model-list"), {"page_size": "2"}).json()
    assert len(body["results"]) == 2 and body["next"]
