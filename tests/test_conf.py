"""The settings (``conf.py``): read again on override_settings."""

import pytest
from django.test import override_settings

from django_llmchat.conf import settings as llm_settings


def test_conf_reloads_on_override_settings():
    assert llm_settings.MAX_STEPS == 16
    with override_settings(LLMCHAT={"MAX_STEPS": 3}):
        assert llm_settings.MAX_STEPS == 3
    assert llm_settings.MAX_STEPS == 16
    with pytest.raises(AttributeError, match="NOPE"):
        _ = llm_settings.NOPE
