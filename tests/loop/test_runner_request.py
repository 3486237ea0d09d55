"""The provider request of a step (django_llmchat.loop.runner_request)."""

from __future__ import annotations


def test_results_move_up_to_their_calls_in_requests():
    from django_llmchat.loop.runner_request import results_after_calls
    from django_llmchat.providers.types import ProviderMessage, ToolCallData

    history = [
        ProviderMessage(role="user", content="q"),
        ProviderMessage(
            role="assistant", tool_calls=[ToolCallData("c1", "t"), ToolCallData("c2", "t")]
        ),
        ProviderMessage(role="user", content="new question"),
        ProviderMessage(role="tool", content="r2", tool_call_id="c2"),
        ProviderMessage(role="tool", content="r1", tool_call_id="c1"),
    ]
    ordered = results_after_calls(history)
    assert [(m.role, m.content) for m in ordered] == [
        ("user", "q"),
        ("assistant", ""),
        ("tool", "r1"),
        ("tool", "r2"),
        ("user", "new question"),
    ]
