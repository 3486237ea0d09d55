"""Token estimates: what a message, and what a request sends beside its messages, weighs
in tokens before the vendor counts it.

:func:`estimate_tokens` is the default estimator of every history policy
(:mod:`django_llmchat.loop.history`); ``LLMCHAT["HISTORY"]["estimator"]`` replaces it. The
estimates lean high: a request that fits by them fits the vendor's window.
"""

from __future__ import annotations

import json

from ..providers.types import ProviderMessage, ProviderRequest

# A tool call's and a tool result's framing on the wire, beside their own text: the longest
# of the dialects' (Chat Completions' call, Anthropic's result), so an estimate never falls
# short of what any of them sends.
_CALL_FRAME = len('{"id":"","type":"function","function":{"name":"","arguments":""}},')
_RESULT_FRAME = len(
    '{"role":"user","content":[{"type":"tool_result","tool_use_id":"",'
    '"content":[{"type":"text","text":""}]}]},'
)
_TOOL_FRAME = len('{"type":"function","function":{"name":"","description":"","parameters":}},')


def _size(text: str) -> int:
    """What ``text`` weighs on the wire: its UTF-8 bytes."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _escaped(text: str) -> int:
    """The size of ``text`` sent inside a JSON string (quotes, backslashes and newlines
    escaped): tool arguments travel as JSON in a string, results are often JSON."""
    return _size(text) + text.count('"') + text.count("\\") + text.count("\n")


def estimate_tokens(message: ProviderMessage) -> int:
    """A quick estimate of a message's tokens: about four bytes a token for its text, tool
    calls (with their ids, names, escaped arguments and the wire's JSON framing) and
    reasoning, a thousand for an image or a document, four for the message itself.
    Replace it with ``LLMCHAT["HISTORY"]["estimator"]``."""
    content = message.content
    if message.role == "tool":
        chars = _escaped(content) + _RESULT_FRAME
        chars += len(message.tool_call_id or "") + len(message.tool_name or "")
    else:
        chars = _size(content)
    for call in message.tool_calls:
        arguments = json.dumps(
            call.arguments, ensure_ascii=False, separators=(",", ":"), default=str
        )
        chars += _CALL_FRAME + len(call.call_id or "") + len(call.name) + _escaped(arguments)
        chars += len(call.thought_signature or "") + len(call.item_id or "")
    if message.thinking is not None:
        chars += _size(message.thinking.text or "") + len(message.thinking.signature or "")
    if message.reasoning_items:
        chars += len(json.dumps(message.reasoning_items, default=str))
    tokens = chars // 4 + 4
    for attachment in message.attachments:
        if attachment.mime_type.startswith("text/"):
            tokens += len(attachment.data) // 4
        else:
            tokens += 1000
    return tokens


def _request_overhead(request: ProviderRequest) -> int:
    """Tokens of what a request sends beside its messages: tool definitions (with their
    framing), a schema."""
    chars = 0
    for spec in request.tools:
        chars += _TOOL_FRAME + len(spec.name) + _size(spec.description)
        chars += len(json.dumps(spec.parameters, separators=(",", ":")))
    if request.schema:
        chars += len(json.dumps(request.schema))
    return chars // 4 + 8
