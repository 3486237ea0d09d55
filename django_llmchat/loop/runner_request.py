"""The provider request of one step of a run: the agent's instructions and the skills'
catalog as system messages, the run's tools (and the skill loader), the parameters, the
schema, and the history with each tool result right after its call."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..providers.types import ProviderMessage, ProviderRequest, ToolSpec
from ..skills import ACTIVATE_TOOL

if TYPE_CHECKING:
    from .runner import Runner

__all__ = ["provider_request", "results_after_calls"]


def provider_request(runner: Runner, history: list[ProviderMessage]) -> ProviderRequest:
    """The request of ``runner``'s chat (its agent, context, tools) on ``history``."""
    system: list[ProviderMessage] = []
    if runner.agent is not None:
        text = runner.agent.render_instructions(runner.context)
        if text:
            system.append(ProviderMessage(role="system", content=text))
    if runner.context.skills is not None and runner.context.skills.skills:
        system.append(ProviderMessage(role="system", content=runner.context.skills.catalog()))
    specs = [t.spec() for t in runner.tools.values()]
    if runner.context.skills is not None and runner.context.skills.skills:
        specs.append(
            ToolSpec(
                name=ACTIVATE_TOOL,
                description="Load the full instructions of one of the available skills.",
                parameters={
                    "type": "object",
                    "properties": {
                        "name": {
                            "type": "string",
                            "enum": sorted(runner.context.skills.skills),
                        }
                    },
                    "required": ["name"],
                },
            )
        )
    params = {**(runner.agent.params if runner.agent else {}), **(runner.chat.params or {})}
    return ProviderRequest(
        model_id=runner.chat.model_id,
        messages=system + results_after_calls(history),
        tools=specs,
        params=params,
        schema=runner.chat.schema,
        chat=runner.chat,
    )


def results_after_calls(history: list[ProviderMessage]) -> list[ProviderMessage]:
    """Providers want each tool result right after the message that called it; a result
    stored later is moved up to its call. Results pair with their calls by the stored
    call (vendors repeat or omit call ids), by id only for messages built by hand."""

    def key(ref: int | None, call_id: str | None) -> Any:
        return ("ref", ref) if ref is not None else ("id", call_id)

    results: dict[Any, ProviderMessage] = {}
    for m in history:
        if m.role == "tool" and (m.tool_call_ref is not None or m.tool_call_id):
            results.setdefault(key(m.tool_call_ref, m.tool_call_id), m)
    if not results:
        return history
    ordered: list[ProviderMessage] = []
    placed: set[int] = set()  # ids of the result messages already in place
    for m in history:
        if m.role == "tool" and id(m) in placed:
            continue
        ordered.append(m)
        if m.role == "tool":
            placed.add(id(m))  # an orphan result (its call is not here) keeps its place
        for call in m.tool_calls:
            result = results.get(key(call.ref, call.call_id))
            if result is not None and id(result) not in placed:
                ordered.append(result)
                placed.add(id(result))
    return ordered
