"""``LLMCHAT["REDACT"]``: one hook over every text a request sends, at the egress.

The hook is a callable (or its dotted path) ``redact(text, *, field, chat=None) -> str``.
:func:`redact_request` applies it to a :class:`ProviderRequest` before any wire protocol
encodes it, so every dialect (OpenAI Responses, Chat Completions and its compatible
vendors, Anthropic, Gemini) sends the same redacted values. ``field`` says what the text
is (:data:`FIELDS`); ``chat`` is the request's chat (``None`` outside one, e.g. a request
built by hand).

What is left as it is: tool definitions and the output schema (the developer's, not the
user's), images and PDFs (bytes), reasoning replayed verbatim because the vendor signs or
encrypts it (a thinking text with a signature, encrypted reasoning items), and vendor
options under ``params``.

With ``LLMCHAT["REDACT_STORED"]`` the same hook runs before a message, its reasoning, its
raw vendor body and its tool calls' arguments are stored (see
:mod:`django_llmchat.models.protected`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from django.utils.module_loading import import_string

from ..conf import DEFAULTS, settings
from .types import AttachmentData, ProviderMessage, ProviderRequest

Redactor = Callable[..., str]

FIELDS = (
    "system",
    "user",
    "assistant",
    "thinking",
    "tool_arguments",
    "tool_result",
    "attachment",
    "filename",
    "raw",
)
"""The ``field`` values the hook receives: the role of a message's text (``system``,
``user``, ``assistant``; a tool message's text is ``tool_result``), unsigned ``thinking``,
each string value of a tool call's arguments (``tool_arguments``), a text attachment's
content (``attachment``) and any attachment's ``filename``; ``raw`` (stored only) for the
string values of the vendor's response body kept on ``Message.raw``."""

ROLE_FIELDS = {"system": "system", "user": "user", "assistant": "assistant", "tool": "tool_result"}

TEXT_TYPES = ("application/json", "application/xml")
"""Attachment types besides ``text/*`` whose bytes are text (UTF-8) to redact."""


def load_redactor(value: Any) -> Redactor | None:
    """The hook a ``REDACT`` value names: ``None``, a callable or a dotted path (an
    ``ImportError`` when the path does not import, ``TypeError`` when it is no callable)."""
    if value is None:
        return None
    hook = import_string(value) if isinstance(value, str) else value
    if not callable(hook):
        raise TypeError(f"LLMCHAT['REDACT'] must be a callable or its dotted path, not {value!r}")
    return hook


def _setting(name: str) -> Any:
    try:
        return getattr(settings, name)
    except Exception:  # ImproperlyConfigured outside a Django project
        return DEFAULTS[name]


def redactor() -> Redactor | None:
    """The configured ``LLMCHAT["REDACT"]`` hook, or ``None``."""
    return load_redactor(_setting("REDACT"))


def stored_redactor() -> Redactor | None:
    """The hook when ``LLMCHAT["REDACT_STORED"]`` asks for it before storing, else ``None``."""
    return redactor() if _setting("REDACT_STORED") else None


def redact_text(redact: Redactor, text: str, field: str, chat: Any) -> str:
    if not text:
        return text
    out = redact(text, field=field, chat=chat)
    if not isinstance(out, str):
        raise TypeError(
            f"LLMCHAT['REDACT'] returned {type(out).__name__} for a {field} text: it must "
            "return a str"
        )
    return out


def redact_values(redact: Redactor, value: Any, field: str, chat: Any) -> Any:
    """``value`` with every string inside it (dict values, list items; never dict keys)
    redacted: a tool call's arguments stay the JSON they were, with the same keys."""
    if isinstance(value, str):
        return redact_text(redact, value, field, chat)
    if isinstance(value, dict):
        return {k: redact_values(redact, v, field, chat) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_values(redact, v, field, chat) for v in value]
    return value


def is_text_type(mime_type: str) -> bool:
    return mime_type.startswith("text/") or mime_type in TEXT_TYPES


def _attachment(redact: Redactor, att: AttachmentData, chat: Any) -> AttachmentData:
    data = att.data
    if is_text_type(att.mime_type):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None  # not text after all: sent (and decoded by the dialect) as it is
        if text is not None:
            data = redact_text(redact, text, "attachment", chat).encode("utf-8")
    filename = redact_text(redact, att.filename, "filename", chat)
    return dataclasses.replace(att, data=data, filename=filename)


def _message(redact: Redactor, msg: ProviderMessage, chat: Any) -> ProviderMessage:
    changes: dict[str, Any] = {
        "content": redact_text(redact, msg.content, ROLE_FIELDS.get(msg.role, msg.role), chat)
    }
    if msg.attachments:
        changes["attachments"] = [_attachment(redact, a, chat) for a in msg.attachments]
    if msg.tool_calls:
        changes["tool_calls"] = [
            dataclasses.replace(
                call, arguments=redact_values(redact, call.arguments, "tool_arguments", chat)
            )
            for call in msg.tool_calls
        ]
    thinking = msg.thinking
    if thinking is not None and thinking.text and not thinking.signature:
        changes["thinking"] = dataclasses.replace(
            thinking, text=redact_text(redact, thinking.text, "thinking", chat)
        )
    return dataclasses.replace(msg, **changes)


def redact_request(request: ProviderRequest, redact: Redactor | None = None) -> ProviderRequest:
    """``request`` as it may leave: a copy with the hook applied to every text it sends
    (``request`` itself when no hook is configured)."""
    redact = redact if redact is not None else redactor()
    if redact is None:
        return request
    chat = request.chat
    return dataclasses.replace(
        request, messages=[_message(redact, m, chat) for m in request.messages]
    )


__all__ = [
    "FIELDS",
    "load_redactor",
    "redact_request",
    "redact_text",
    "redact_values",
    "redactor",
    "stored_redactor",
]
