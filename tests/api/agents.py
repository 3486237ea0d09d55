"""Agents used by the API tests (importable by dotted path)."""

from django_llmchat.agents import Agent
from django_llmchat.guardrails import GuardrailResult, guardrail


@guardrail(id="no_secrets", phases=("before",))
def no_secrets(text, *, phase, context):
    if "secret" in text:
        return GuardrailResult.block("no secrets here")
    return None


class Strict(Agent):
    model = "gpt-4.1-mini"
    guardrails = [no_secrets]


@guardrail(id="no_leaks", phases=("after",))
def no_leaks(text, *, phase, context):
    if "secret" in text:
        return GuardrailResult.block("the reply told a secret")
    return None


class Careful(Agent):
    model = "gpt-4.1-mini"
    guardrails = [no_leaks]
