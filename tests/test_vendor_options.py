"""Vendor options API users may send (``vendor_options.py``): per wire protocol an
allowlist, nested where an option is an object; a field the library writes itself is
refused saying who sets it; a provider class may declare its own allowlist."""

from __future__ import annotations

import pytest

from django_llmchat.errors import ArgumentError
from django_llmchat.providers.openai_chat import ChatCompletionsProvider
from django_llmchat.vendor_options import ALLOWED, OWNED, allowed_for, check, problems


def test_each_provider_gets_its_protocols_allowlist(settings):
    assert allowed_for("openai") is ALLOWED["responses"]
    assert allowed_for("anthropic") is ALLOWED["anthropic"]
    assert allowed_for("gemini") is ALLOWED["gemini"]
    assert allowed_for("ollama") is ALLOWED["chat_completions"]


def test_allowed_and_nested_options_pass():
    params = {
        "openai": {"reasoning": {"effort": "low"}, "service_tier": "flex"},
        "gemini": {"generationConfig": {"topK": 3}, "labels": {"any": "value"}},
    }
    assert problems(params, ["openai", "gemini"]) == []
    check(params, ["openai", "gemini"])
    # options of a provider not among those checked are not looked at
    assert problems({"anthropic": {"model": "x"}}, ["openai"]) == []


def test_each_refusal_names_the_field_and_why():
    params = {
        "openai": {"model": "gpt-5", "reasoning": {"effort": "low", "budget": 1}, "temp": 1},
        "gemini": {"generationConfig": "not an object"},
    }
    assert problems(params, ["openai", "gemini"]) == [
        "openai.model is set by the library (the chat's model_id); it cannot be sent",
        "openai.reasoning.budget is not an allowed vendor option (allowed: effort, summary)",
        "openai.temp is not an allowed vendor option (allowed: "
        + ", ".join(sorted(ALLOWED["responses"]))
        + ")",
        "gemini.generationConfig must be an object",
    ]
    with pytest.raises(ArgumentError) as refused:
        check(params, ["openai", "gemini"])
    assert str(refused.value).startswith("openai.model is set by the library")
    assert OWNED["messages"] == "the transcript"


def test_a_provider_class_declares_its_own(monkeypatch):
    class Declared(ChatCompletionsProvider):
        vendor_options = {"only_this": True}

    monkeypatch.setattr("django_llmchat.providers.provider_class", lambda name: Declared)
    assert allowed_for("custom") == {"only_this": True}
    assert problems({"custom": {"seed": 1}}, ["custom"]) == [
        "custom.seed is not an allowed vendor option (allowed: only_this)"
    ]


def test_an_unknown_protocol_allows_nothing(monkeypatch):
    monkeypatch.setattr("django_llmchat.providers.provider_class", lambda name: object)
    assert allowed_for("other") == {}
    assert problems({"other": {"x": 1}}, ["other"]) == [
        "other.x is not an allowed vendor option (allowed: none)"
    ]
