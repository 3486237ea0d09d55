"""Scripted replies and faults, and how each vendor's wire format spells them.

A :class:`Reply` says *what* the model answers (text, tool calls, thinking, usage, finish
reason); a :class:`Fault` says *how the exchange goes wrong* (an error status, a stream cut
short, an error event mid-stream, slow bytes). The renderers below turn a reply into the
exact JSON body or Server-Sent Events frames the vendor would send:

* ``chat_completions``: OpenAI Chat Completions (and every OpenAI-compatible server);
* ``responses``: OpenAI Responses;
* ``anthropic``: Anthropic Messages;
* ``gemini``: Gemini ``generateContent`` / ``streamGenerateContent``.

Token counts follow each vendor's own bookkeeping so that a correct parser reads back
exactly the :class:`~django_llmchat.values.Tokens` the reply was scripted with: OpenAI and
Gemini count cache reads (and writes) *inside* the prompt count, Anthropic beside it;
Gemini counts thinking tokens *beside* the output count, OpenAI and Anthropic inside it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .anthropic import AnthropicRenderer
from .chat_completions import ChatCompletionsRenderer
from .gemini import GeminiRenderer
from .render import ERROR_TEXT, Renderer, error_text, sse
from .responses import ResponsesRenderer
from .values import FORMATS, NORMALIZED_FINISH_REASONS, Fault, RecordedRequest, Reply, ToolCall

__all__ = [
    "FORMATS",
    "NORMALIZED_FINISH_REASONS",
    "ERROR_TEXT",
    "Fault",
    "Reply",
    "ToolCall",
    "RecordedRequest",
    "Renderer",
    "AnthropicRenderer",
    "ChatCompletionsRenderer",
    "GeminiRenderer",
    "ResponsesRenderer",
    "coerce",
    "error_text",
    "renderer_for",
    "sse",
]


_RENDERERS: dict[str, type[Renderer]] = {
    "chat_completions": ChatCompletionsRenderer,
    "responses": ResponsesRenderer,
    "anthropic": AnthropicRenderer,
    "gemini": GeminiRenderer,
}


def renderer_for(fmt: str, **options: Any) -> Renderer:
    """The renderer of one wire format (see :data:`FORMATS`)."""
    try:
        cls = _RENDERERS[fmt]
    except KeyError:
        raise ValueError(f"unknown wire format {fmt!r}; expected one of {FORMATS}") from None
    if cls is ChatCompletionsRenderer:
        return cls(options.get("reasoning_field"))
    return cls()


def coerce(item: Any) -> Reply | Fault | Callable[[RecordedRequest], Any]:
    """Accept the shorthand forms :meth:`FakeProviderServer.script` takes."""
    if isinstance(item, Reply | Fault) or callable(item):
        return item
    if isinstance(item, str):
        return Reply(text=item)
    if isinstance(item, Mapping):
        return Reply(**item)
    raise TypeError(f"cannot script {item!r}: expected a Reply, a Fault, a str or a callable")
