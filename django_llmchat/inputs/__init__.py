"""What an API user may send: every rule, in one place.

The REST API (messages, inline streams, chats) and ``ui/chat`` call these functions;
call them from your own views too. Each one checks one kind of input and returns it
(cleaned where said), or raises :class:`~django_llmchat.errors.InputError` with the
field and the reason, which the API answers with a 400 ``{field: [reason]}``.

Python code is trusted and checked by none of this: ``chat.params``, ``Agent.history``,
``chat.with_history("myapp.policy")`` keep full control.

=========================  ====================================================
rule                       function (setting)
=========================  ====================================================
a prompt's text            :func:`check_text` (``MAX_CONTENT_LENGTH``)
its files                  :func:`check_attachments` (``MAX_ATTACHMENTS``,
                           ``MAX_ATTACHMENT_SIZE``, ``ALLOWED_ATTACHMENT_TYPES``)
both                       :func:`check_prompt`
provider, model            :func:`check_provider`, :func:`check_model`
                           (``PROVIDERS``, ``ALLOWED_MODELS``)
a chat made on defaults    :func:`check_default_model` (``DEFAULT_PROVIDER``,
                           ``DEFAULT_MODEL``)
request parameters         :func:`check_params` (vendor options:
                           :mod:`django_llmchat.vendor_options`)
``max_tokens``             :func:`check_max_tokens` (the model registry)
history policy             :func:`check_history` (``HISTORY_PROCESSORS``,
                           ``TOKEN_ESTIMATORS``)
tools, context             :func:`check_tools`, :func:`check_context`
a chat's tags              :func:`check_tags` (:data:`MAX_TAGS`, :data:`TAG_MAX_LENGTH`)
a whole chat               :func:`check_chat` (create or update)
=========================  ====================================================

Files are checked in ``inputs_files``, JSON values and parameters in ``inputs_values``,
providers, models and history policies in ``inputs_models``; every name is importable
from here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..conf import settings
from ..errors import InputError
from ..models.tags import MAX_TAGS, TAG_MAX_LENGTH, TAG_PATTERN, check_tag, check_tags
from .files import SIGNATURES as SIGNATURES
from .files import SNIFFABLE as SNIFFABLE
from .files import TEXT_TYPES as TEXT_TYPES
from .files import (
    check_attachment,
    check_attachments,
    sniff,
)
from .json_values import (
    MAX_JSON_DEPTH,
    MAX_TOOLS,
    check_context,
    check_json,
    check_params,
    check_tools,
)
from .model_choices import (
    _check_summary,
    check_default_model,
    check_history,
    check_max_tokens,
    check_model,
    check_model_id,
    check_provider,
    configured_providers,
    model_allowed,
)

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_TAGS",
    "MAX_TOOLS",
    "TAG_MAX_LENGTH",
    "TAG_PATTERN",
    "InputError",
    "check_attachment",
    "check_attachments",
    "check_chat",
    "check_choice",
    "check_context",
    "check_default_model",
    "check_history",
    "check_json",
    "check_max_tokens",
    "check_model",
    "check_model_id",
    "check_params",
    "check_prompt",
    "check_provider",
    "check_tag",
    "check_tags",
    "check_text",
    "check_tools",
    "configured_providers",
    "model_allowed",
    "sniff",
]


# -- text -----------------------------------------------------------------------------------
def check_text(text: Any, *, field: str = "content", required: bool = True) -> str:
    """A prompt's text: a string without NUL characters, at most
    ``LLMCHAT["MAX_CONTENT_LENGTH"]`` characters, and (``required``) not blank."""
    if not isinstance(text, str):
        raise InputError(field, "must be a string")
    if "\x00" in text:
        raise InputError(field, "must not contain null characters")
    if required and not text.strip():
        raise InputError(field, "must not be empty")
    limit = settings.MAX_CONTENT_LENGTH
    if limit and len(text) > limit:
        raise InputError(field, f"is too long ({len(text)} characters; at most {limit})")
    return text


def check_prompt(
    text: Any,
    files: Iterable[Any] = (),
    *,
    text_field: str = "content",
    files_field: str = "attachments",
) -> tuple[str, list[tuple[str, bytes, str]]]:
    """A new user message: its text (:func:`check_text`) and files
    (:func:`check_attachments`); returns them ready for ``chat.ask_later(text,
    attachments=files)``."""
    return check_text(text, field=text_field), check_attachments(files, field=files_field)


# -- a chat ---------------------------------------------------------------------------------
_CHAT_FIELDS = {
    "provider": check_provider,
    "model_id": check_model_id,
    "params": check_params,
    "tools": check_tools,
    "context": check_context,
}


def check_chat(values: Mapping[str, Any], chat: Any = None) -> dict[str, Any]:
    """The fields an API user sends to create a chat (``chat`` ``None``) or to change
    ``chat``: each field's own rule, then :func:`check_choice`. Returns the values to
    save (``title`` and ``history`` included, unchanged; other keys are refused)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in _CHAT_FIELDS:
            out[key] = _CHAT_FIELDS[key](value)
        elif key in ("title", "history"):
            out[key] = value
        else:
            raise InputError(str(key)[:64], "unknown field")
    title = out.get("title")
    if title is not None and (not isinstance(title, str) or len(title) > 255 or "\x00" in title):
        raise InputError("title", "must be a string of at most 255 characters without NUL")
    return check_choice(out, chat)


def check_choice(values: dict[str, Any], chat: Any = None) -> dict[str, Any]:
    """What the fields of a chat say together, with the chat's (or the defaults') other
    values: a ``provider`` or ``model_id`` sent is a configured and allowed pair
    (:func:`check_model`; a chat left on the project's defaults is the project's);
    ``params.max_tokens`` fits the model, also the chat's own params when its model
    changes (:func:`check_max_tokens`); the history policy sent passes
    :func:`check_history`, and the chat's own has its summary model re-checked when the
    model changes."""
    provider = values.get("provider") or (chat.provider if chat else settings.DEFAULT_PROVIDER)
    model_id = values.get("model_id") or (chat.model_id if chat else settings.DEFAULT_MODEL)
    switched = "provider" in values or "model_id" in values
    if switched:
        check_model(provider, model_id)
    if "params" in values:
        check_max_tokens(values["params"], provider, model_id)
    elif switched and chat is not None:
        check_max_tokens(chat.params, provider, model_id, kept=True)
    if "history" in values:
        values["history"] = check_history(values["history"], provider=provider, model_id=model_id)
    elif switched and chat is not None and isinstance(chat.history, dict):
        _check_summary(chat.history, provider, model_id, "history")
    return values
