"""What an ended provider attempt is billed for: :class:`Received`, what a streamed
attempt received so far, and :func:`billed`, the tokens of an ended attempt (the vendor's
counts when they came, else estimated), used by every attempt of
:class:`~django_llmchat.loop.attempts.ProviderAttempts` and by a title's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..events import ReasoningDelta, StreamEvent, TextDelta, TokenUsageDone, ToolCallDelta
from ..models import Usage
from ..providers.types import ProviderMessage, ProviderResponse
from ..values import Thinking, Tokens

__all__ = ["Received", "billed"]


class Received:
    """What one streamed attempt received so far: the text, reasoning and tool-call
    argument fragments, and the vendor's usage once it arrived. An attempt that ends
    before its response does (stopped, its stream dropped or broken) is billed from it:
    :func:`billed`."""

    __slots__ = ("arguments", "reasoning", "text", "tokens")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.arguments: list[str] = []  # every provider streams a call's arguments as deltas
        self.tokens: Tokens | None = None

    def add(self, event: StreamEvent) -> None:
        kind = type(event)
        if kind is TextDelta:
            self.text.append(event.content)
        elif kind is ReasoningDelta:
            self.reasoning.append(event.content)
        elif kind is ToolCallDelta:
            if event.name:
                self.arguments.append(event.name)
            self.arguments.append(event.arguments_delta)
        elif kind is TokenUsageDone:
            self.tokens = event.token_usage

    @property
    def anything(self) -> bool:
        """Whether the vendor sent anything of an answer (else it charged nothing)."""
        return bool(self.text or self.reasoning or self.arguments) or self.tokens is not None

    def message(self) -> ProviderMessage:
        """What streamed, as one assistant message (what the token estimator weighs)."""
        reasoning = "".join(self.reasoning)
        return ProviderMessage(
            role="assistant",
            content="".join(self.text) + "".join(self.arguments),
            thinking=Thinking(reasoning) if reasoning else None,
        )


def billed(
    pending: Usage | None,
    received: Received,
    answer: ProviderResponse | None,
    weigh: Callable[[ProviderMessage], int],
) -> tuple[Tokens | None, bool]:
    """The tokens an ended attempt is billed for and whether they are estimated: the
    vendor's counts when they arrived (with its ``answer``, the response it ended
    with, else in its stream); else, for what they leave out, the request's input
    tokens as its pending row estimated them and the output as the token estimator
    weighs the answer (a vendor that reported no usage) or, for an attempt that ended
    before its response (stopped, its stream dropped or broken), what streamed (text,
    reasoning, tool-call arguments). ``(None, False)`` when nothing of an answer came
    (a refused request: the vendor charged nothing)."""
    if answer is not None:
        tokens = answer.tokens
        message = ProviderMessage(
            role="assistant",
            content=answer.content,
            tool_calls=list(answer.tool_calls),
            thinking=answer.thinking,
        )
    elif not received.anything:
        return None, False
    else:
        tokens = received.tokens or Tokens()
        message = received.message()
    filled: dict[str, int] = {}
    if tokens.input_tokens is None and pending is not None:
        if pending.input_tokens is not None:
            filled["input_tokens"] = pending.input_tokens
    if tokens.output_tokens is None:
        weighed = bool(message.content or message.tool_calls or message.thinking)
        filled["output_tokens"] = weigh(message) if weighed else 0
        if message.thinking is not None and tokens.thinking_tokens is None:
            filled["thinking_tokens"] = weigh(
                ProviderMessage(role="assistant", thinking=message.thinking)
            )
    return (replace(tokens, **filled) if filled else tokens), bool(filled)
