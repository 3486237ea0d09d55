"""The model registry's admin (``admin/registry.py``): prices and capabilities edited as
fields."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client


def test_llm_model_form_edits_prices_and_capabilities_as_fields(admin_client):
    from django_llmchat.models import LLMModel

    model = LLMModel.objects.create(
        provider="openai",
        model_id="gpt-x",
        name="GPT X",
        capabilities=["streaming", "custom_flag"],
        modalities={"input": ["text"], "output": ["text"]},
        pricing={
            "input_mtok": {"base": "1.25", "tiers": [{"start": 200000, "price": "2.5"}]},
            "output_mtok": "10",
            "web_searches_kcount": "25",
        },
    )
    url = reverse("admin:django_llmchat_llmmodel_change", args=[model.pk])
    html = admin_client.get(url).content.decode()
    assert 'type="checkbox" name="capabilities" value="tools"' in html
    assert 'value="custom_flag"' in html  # a stored value the choices do not list is kept
    assert 'name="output_mtok"' in html and 'value="10"' in html
    assert "$2.5 above 200,000 prompt tokens" in html
    assert '<textarea name="pricing"' not in html and '<textarea name="capabilities"' not in html
    response = admin_client.post(
        url,
        {
            "provider": "openai",
            "model_id": "gpt-x",
            "name": "GPT X",
            "family": "",
            "context_window": "1000",
            "max_output_tokens": "",
            "capabilities": ["streaming", "tools", "custom_flag"],
            "input_modalities": ["text", "image"],
            "output_modalities": ["text"],
            "output_mtok": "12.50",
            "cache_read_mtok": "0.3",
            "cache_write_mtok": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    model.refresh_from_db()
    assert model.capabilities == ["streaming", "tools", "custom_flag"]
    assert model.modalities == {"input": ["text", "image"], "output": ["text"]}
    assert model.pricing == {
        "input_mtok": {"base": "1.25", "tiers": [{"start": 200000, "price": "2.5"}]},
        "output_mtok": "12.5",
        "cache_read_mtok": "0.3",
        "web_searches_kcount": "25",
    }
    bad = admin_client.post(url, {"provider": "openai", "model_id": "gpt-x", "name": "X",
                                  "output_mtok": "-1"})  # fmt: skip
    assert bad.status_code == 200
    assert "Ensure this value is greater than or equal to 0." in bad.content.decode()
