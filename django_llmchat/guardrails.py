"""Guardrails: checks that run before a run (on the prompt) and after each response.

A guardrail passes, transforms the text, or blocks. A block ends the run with a
``GuardrailTripwire`` event and stores nothing the guardrail rejected; a transform stores
the transformed text and emits ``GuardrailModification``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BEFORE, AFTER = "before", "after"


@dataclass(frozen=True, slots=True)
class GuardrailResult:
    """What a guardrail decided: ``action`` is ``pass``, ``transform`` or ``block``."""

    action: str = "pass"
    text: str | None = None
    reason: str | None = None

    @classmethod
    def passed(cls) -> GuardrailResult:
        return cls("pass")

    @classmethod
    def transform(cls, text: str) -> GuardrailResult:
        return cls("transform", text=text)

    @classmethod
    def block(cls, reason: str) -> GuardrailResult:
        return cls("block", reason=reason)


class Guardrail:
    """Subclass and implement ``check``; ``phases`` says when it runs."""

    id: str = ""
    phases: tuple[str, ...] = (BEFORE, AFTER)

    def __init__(self) -> None:
        if not self.id:
            self.id = type(self).__name__

    def check(self, text: str, *, phase: str, context: Any) -> GuardrailResult | None:
        """Return ``None`` or ``GuardrailResult.passed()`` to let ``text`` through."""
        raise NotImplementedError


class FunctionGuardrail(Guardrail):
    def __init__(self, func: Callable[..., Any], *, id: str | None = None, phases=None):
        self.func = func
        self.id = id or func.__name__
        self.phases = tuple(phases or (BEFORE, AFTER))

    def check(self, text: str, *, phase: str, context: Any) -> GuardrailResult | None:
        return self.func(text, phase=phase, context=context)


def guardrail(func=None, *, id: str | None = None, phases: tuple[str, ...] | None = None):
    """Decorate ``f(text, *, phase, context) -> GuardrailResult | None``."""

    def wrap(f):
        return FunctionGuardrail(f, id=id, phases=phases)

    return wrap(func) if func is not None else wrap


def screen(guardrails: list[Guardrail], text: str, phase: str, context: Any) -> tuple:
    """Run the ``phase`` guardrails over ``text``, in order: ``(text, modifications,
    tripwire)``, the text as the transforms left it, a ``GuardrailModification`` event per
    transform, and the ``GuardrailTripwire`` event of the first block (the rest do not
    run), or ``None``."""
    from .events import GuardrailModification, GuardrailTripwire

    modified: list[Any] = []
    for g in guardrails:
        if phase not in g.phases:
            continue
        decision = g.check(text, phase=phase, context=context) or GuardrailResult()
        if decision.action == "block":
            tripwire = GuardrailTripwire(guardrail_id=g.id, reason=decision.reason, phase=phase)
            return text, modified, tripwire
        if decision.action == "transform" and decision.text is not None:
            text = decision.text
            modified.append(
                GuardrailModification(guardrail_id=g.id, phase=phase, message_indices=[-1])
            )
    return text, modified, None


def as_guardrail(obj: Any) -> Guardrail:
    if isinstance(obj, Guardrail):
        return obj
    if isinstance(obj, type) and issubclass(obj, Guardrail):
        return obj()
    if callable(obj):
        return FunctionGuardrail(obj)
    raise TypeError(f"not a guardrail: {obj!r}")
