"""``manage.py llmchat_sync_models``: the registry's rows from the bundled data."""

from io import StringIO

import pytest
from django.core.management import call_command

from django_llmchat.models import LLMModel


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
