"""Fixtures of the loop tests."""

import pytest

from django_llmchat.models import Chat

# every wire protocol: Responses, Chat Completions, Anthropic Messages, Gemini
PROVIDERS = [
    ("openai", "gpt-4.1-mini", {}),
    ("openai", "gpt-4.1-mini", {"api": "chat_completions"}),
    ("anthropic", "claude-haiku-4-5", {}),
    ("gemini", "gemini-2.5-flash", {}),
]


@pytest.fixture(params=PROVIDERS, ids=lambda p: p[0] + ("-cc" if p[2] else ""))
def provider_chat(request, fake_llm):
    """A chat on each wire protocol in turn, the fake provider configured for it."""
    provider, model, options = request.param
    fake_llm.configure(provider, model)
    if options:
        from django.test import override_settings

        from django_llmchat.conf import settings as llm

        providers = {k: dict(v) for k, v in llm.PROVIDERS.items()}
        providers[provider].update(options)
        o = override_settings(LLMCHAT={**llm.user_settings, "PROVIDERS": providers})
        o.enable()
        request.addfinalizer(o.disable)
    return Chat.objects.create(provider=provider, model_id=model)
