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
"""

from __future__ import annotations

import codecs
import math
import mimetypes
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .conf import settings
from .errors import InputError
from .tags import MAX_TAGS, TAG_MAX_LENGTH, TAG_PATTERN, check_tag, check_tags

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

MAX_JSON_DEPTH = 16
MAX_TOOLS = 128


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


# -- attachments ----------------------------------------------------------------------------
# Leading bytes of the formats we can recognise.
SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"ID3", "audio/mpeg"),
    (b"OggS", "audio/ogg"),
    (b"fLaC", "audio/flac"),
    (b"PK\x03\x04", "application/zip"),
)
# Types we know how to recognise: a file claiming one of them must match.
SNIFFABLE = {mime for _, mime in SIGNATURES} | {"image/webp", "audio/wav", "text/plain"}
# Text types a client may name for content that decodes as text.
TEXT_TYPES = {
    "application/json",
    "application/xml",
    "application/x-yaml",
    "application/yaml",
    "application/javascript",
}
_CONTROL = set(range(0, 32)) - {9, 10, 12, 13, 27}


def _is_text(head: bytes) -> bool:
    if not head:
        return False
    if any(byte in _CONTROL for byte in head):
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return True


def sniff(head: bytes, declared: str | None = None) -> str | None:
    """The MIME type the first bytes show, or ``None`` when they show nothing known. Text
    keeps a declared ``text/*`` (or JSON, XML, YAML) type."""
    for signature, mime in SIGNATURES:
        if head.startswith(signature):
            return mime
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if _is_text(head):
        if declared and (declared.startswith("text/") or declared in TEXT_TYPES):
            return declared
        return "text/plain"
    return None


def _read(file: Any, limit: int | None) -> tuple[str, bytes, str, int | None]:
    """``(name, bytes, declared type, size)`` of an uploaded file or a ``(name, bytes[,
    type])`` tuple; a file whose size is over ``limit`` is not read, else at most one
    byte past it is."""
    if isinstance(file, tuple) and len(file) in (2, 3):
        name, data = file[0], file[1]
        declared = file[2] if len(file) == 3 else None
        if not isinstance(data, bytes | bytearray):
            raise TypeError("a file tuple holds (filename, bytes[, MIME type])")
        return str(name or ""), bytes(data), str(declared or ""), len(data)
    name = str(getattr(file, "name", "") or "")
    declared = str(getattr(file, "content_type", None) or "")
    size = getattr(file, "size", None)
    size = size if isinstance(size, int) else None
    if limit is not None and size is not None and size > limit:
        return name, b"", declared, size
    return name, file.read(limit + 1 if limit is not None else -1), declared, size


def check_attachment(file: Any, *, field: str = "attachments") -> tuple[str, bytes, str]:
    """One file: an uploaded file (``request.FILES``) or ``(filename, bytes[, declared
    type])``. It is not empty, at most ``LLMCHAT["MAX_ATTACHMENT_SIZE"]`` bytes, and of a
    type in ``LLMCHAT["ALLOWED_ATTACHMENT_TYPES"]``, that type sniffed from its bytes
    (a file claiming a type we recognise must hold it); returns ``(filename, bytes,
    type)``, the name's extension following the type (``evil.html`` holding text is
    ``evil.txt``), as it will be stored."""
    from .models.attachment import name_for_type

    limit = settings.MAX_ATTACHMENT_SIZE
    name, data, declared, size = _read(file, limit)
    name = os.path.basename(name.replace("\\", "/")).replace("\x00", "")[:200] or "attachment"
    if limit is not None and size is not None and size > limit:
        raise InputError(field, f"{name}: too large ({size} bytes; at most {limit})")
    if limit is not None and len(data) > limit:
        raise InputError(field, f"{name}: too large (more than {limit} bytes)")
    if not data:
        raise InputError(field, f"{name}: the file is empty")
    declared = declared.split(";")[0].strip().lower()
    if not declared or declared == "application/octet-stream":
        declared = (mimetypes.guess_type(name)[0] or "").lower()
    mime = sniff(data[:8192], declared or None)
    if mime is None:
        if declared in SNIFFABLE or declared.startswith("text/"):
            raise InputError(field, f"{name}: the content is not {declared}")
        mime = declared or "application/octet-stream"
    allowed = [m.lower() for m in settings.ALLOWED_ATTACHMENT_TYPES or []]
    if mime not in allowed:
        raise InputError(
            field, f"{name}: type {mime} is not allowed (allowed: {', '.join(allowed)})"
        )
    return name_for_type(name, mime), data, mime


def check_attachments(
    files: Iterable[Any], *, field: str = "attachments"
) -> list[tuple[str, bytes, str]]:
    """At most ``LLMCHAT["MAX_ATTACHMENTS"]`` files, each passing
    :func:`check_attachment`."""
    files = list(files)
    limit = settings.MAX_ATTACHMENTS
    if limit is not None and len(files) > limit:
        raise InputError(field, f"too many files ({len(files)}; at most {limit})")
    return [check_attachment(f, field=field) for f in files]


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


# -- providers and models -------------------------------------------------------------------
def configured_providers() -> list[str]:
    """The providers an API user may choose: those in ``LLMCHAT["PROVIDERS"]`` and the
    built-in ones the environment configures (their API key variable, or Ollama's URL),
    narrowed to those ``LLMCHAT["ALLOWED_MODELS"]`` names when it is set."""
    from .providers import API_KEY_ENV, BASE_URL_ENV, PROVIDERS

    names = set(settings.PROVIDERS or {})
    for name in PROVIDERS:
        envs = (*API_KEY_ENV.get(name, ()), *BASE_URL_ENV.get(name, ()))
        if any(os.environ.get(env) for env in envs):
            names.add(name)
    allowed = settings.ALLOWED_MODELS
    if allowed is not None:
        names &= {entry.split("/", 1)[0] for entry in allowed}
    return sorted(names)


def model_allowed(provider: str, model_id: str) -> bool:
    """Whether ``LLMCHAT["ALLOWED_MODELS"]`` (when set) lists ``provider/model_id`` or
    ``provider/*``."""
    allowed = settings.ALLOWED_MODELS
    if allowed is None:
        return True
    return f"{provider}/{model_id}" in allowed or f"{provider}/*" in allowed


def check_provider(provider: Any, *, field: str = "provider") -> str:
    """A configured provider's name (:func:`configured_providers`)."""
    if not isinstance(provider, str):
        raise InputError(field, "must be a string")
    names = configured_providers()
    if provider not in names:
        raise InputError(
            field,
            f"provider {provider[:64]!r} is not configured; one of: {', '.join(names) or '-'}",
        )
    return provider


def check_model_id(model_id: Any, *, field: str = "model_id") -> str:
    """A model id: a string that is not blank."""
    if not isinstance(model_id, str):
        raise InputError(field, "must be a string")
    if not model_id.strip():
        raise InputError(field, "must not be empty")
    return model_id


def check_model(provider: str, model_id: str, *, field: str = "model_id") -> None:
    """The model ``model_id`` of ``provider``: the provider is configured and
    ``LLMCHAT["ALLOWED_MODELS"]`` allows the model (the reason on ``field``)."""
    if provider not in configured_providers():
        raise InputError(field, f"provider {provider[:64]!r} is not configured")
    if not model_allowed(provider, model_id):
        raise InputError(field, f"model {model_id[:64]!r} of {provider[:64]!r} is not allowed")


def check_default_model(*, field: str = "id") -> None:
    """For a chat an API user makes without choosing its model (``ui/chat`` on first
    use): the project's defaults pass :func:`check_model`. The reason names the settings,
    not their values."""
    provider, model_id = settings.DEFAULT_PROVIDER, settings.DEFAULT_MODEL
    if provider not in configured_providers():
        raise InputError(
            field,
            'a new chat cannot be made: the default provider (LLMCHAT["DEFAULT_PROVIDER"]) '
            "is not configured; use the id of an existing chat",
        )
    if not model_allowed(provider, model_id):
        raise InputError(
            field,
            'a new chat cannot be made: the default model (LLMCHAT["DEFAULT_MODEL"]) is '
            'not in LLMCHAT["ALLOWED_MODELS"]; use the id of an existing chat',
        )


# -- JSON values and request parameters -----------------------------------------------------
def check_json(value: Any, *, field: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """What JSON columns store everywhere: finite numbers, no NUL characters (PostgreSQL),
    nesting at most ``max_depth`` levels."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            raise InputError(field, f"nested deeper than {max_depth} levels")
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str) or "\x00" in key:
                    raise InputError(field, "keys must be strings without NUL")
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            if "\x00" in item:
                raise InputError(field, "strings must not contain NUL characters")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InputError(field, "numbers must be finite")
        elif item is not None and not isinstance(item, bool | int):
            raise InputError(field, f"unsupported value {type(item).__name__}")
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_params(params: Any, *, field: str = "params") -> dict[str, Any]:
    """A chat's request parameters: an object; the types of those the providers read
    (``temperature``, ``top_p``, ``max_tokens``, ``stop``, ``thinking``,
    ``parallel_tool_calls``); vendor options under a provider's name, each in that
    provider's allowlist (:func:`django_llmchat.vendor_options.problems`). Every
    problem is a reason."""
    from .providers import PROVIDERS
    from .vendor_options import problems

    if not isinstance(params, dict):
        raise InputError(field, "must be an object")
    check_json(params, field=field)
    errors: list[str] = []

    def number(key: str, low: float, high: float) -> None:
        value = params.get(key)
        if value is not None and (not _is_number(value) or not low <= value <= high):
            errors.append(f"{key} must be a number between {low:g} and {high:g}")

    number("temperature", 0, 2)
    number("top_p", 0, 1)
    max_tokens = params.get("max_tokens")
    if max_tokens is not None and (
        type(max_tokens) is not int or not 1 <= max_tokens <= 10_000_000
    ):
        errors.append("max_tokens must be an integer between 1 and 10000000")
    for key in ("stop", "stop_sequences"):
        value = params.get(key)
        if value is not None and not (
            isinstance(value, str)
            or (isinstance(value, list) and all(isinstance(v, str) for v in value))
        ):
            errors.append(f"{key} must be a string or a list of strings")
    thinking = params.get("thinking")
    if thinking is not None and not isinstance(thinking, dict | bool):
        errors.append("thinking must be an object")
    ptc = params.get("parallel_tool_calls")
    if ptc is not None and not isinstance(ptc, bool):
        errors.append("parallel_tool_calls must be a boolean")
    names = sorted(set(PROVIDERS) | set(settings.PROVIDERS or {}))
    for name in names:
        if name in params and not isinstance(params[name], dict):
            errors.append(f"{name} (provider options) must be an object")
    if not errors:
        errors.extend(problems(params, [n for n in names if n in params]))
    if errors:
        raise InputError(field, *errors)
    return params


def check_max_tokens(
    params: Mapping[str, Any] | None,
    provider: str,
    model_id: str,
    *,
    field: str = "params",
    kept: bool = False,
) -> None:
    """``params["max_tokens"]`` is at most the model's ``max_output_tokens`` in the model
    registry (when it knows the model). ``kept``: the params are the chat's own, kept
    while its model changes (the reason says to send lower ones)."""
    max_tokens = params.get("max_tokens") if isinstance(params, Mapping) else None
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        return
    from .models import LLMModel

    info = LLMModel.objects.filter(provider=provider, model_id=model_id).first()
    ceiling = info.max_output_tokens if info is not None else None
    if ceiling and max_tokens > ceiling:
        reason = f"max_tokens must be at most {ceiling} for {model_id[:64]}"
        if kept:
            reason += f" (the chat's is {max_tokens}: send params with the new model)"
        raise InputError(field, reason)


def check_tools(tools: Any, *, field: str = "tools") -> list[str]:
    """Names of registered tools (never dotted paths) or of the tools of configured MCP
    servers (``mcp:<server>``), at most :data:`MAX_TOOLS`; returned without repeats."""
    from .tools import registered_tools

    if not isinstance(tools, list) or not all(isinstance(n, str) for n in tools):
        raise InputError(field, "must be a list of tool names")
    if len(tools) > MAX_TOOLS:
        raise InputError(field, f"at most {MAX_TOOLS} tools")
    known = registered_tools()
    unknown = [name for name in tools if name not in known and not _mcp_spec(name)]
    if unknown:
        raise InputError(field, f"unknown tools: {', '.join(repr(n[:64]) for n in unknown[:5])}")
    return list(dict.fromkeys(tools))


_MCP_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def _mcp_spec(name: str) -> bool:
    """``mcp:<server>`` or ``mcp:<server>/<tool>,<tool>`` of a server configured in
    ``LLMCHAT["MCP_SERVERS"]`` (the project's choice, as registered tools are)."""
    if not name.startswith("mcp:"):
        return False
    server, slash, names = name[4:].partition("/")
    if server not in (settings.MCP_SERVERS or {}):
        return False
    return not slash or all(_MCP_TOOL_NAME.fullmatch(n) for n in names.split(","))


def check_context(context: Any, *, field: str = "context") -> dict[str, Any]:
    """A chat's context: an object without the reserved keys (``skills``,
    ``token_usage``)."""
    from .context import Context

    if not isinstance(context, dict):
        raise InputError(field, "must be an object")
    check_json(context, field=field)
    reserved = sorted(set(context) & set(Context.RESERVED_KEYS))
    if reserved:
        raise InputError(field, f"reserved keys: {', '.join(reserved)}")
    return context


# -- history --------------------------------------------------------------------------------
def _name_problem(kind: str, value: Any, builtin: tuple[str, ...], registered: dict) -> str | None:
    """Why ``value`` is not a name an API user may give (``None`` when it is, or when it
    is absent)."""
    if value is None or (isinstance(value, str) and (value in builtin or value in registered)):
        return None
    known = ", ".join([*builtin, *sorted(registered)]) or "none registered"
    if not isinstance(value, str) or not value:
        return f"{kind} must be a name (one of: {known})"
    if "." in value:
        return (
            f"{kind} {value[:64]!r}: dotted paths are not accepted; give a registered "
            f"name (one of: {known})"
        )
    return f"{kind} {value[:64]!r} is not registered (one of: {known})"


def _check_summary(data: dict[str, Any], provider: str, model_id: str, field: str) -> None:
    """The summary model runs on a configured provider, and is an allowed model of it
    (when the policy chooses either)."""
    summary_provider = data.get("summary_provider")
    summary_model = data.get("summary_model")
    if not summary_provider and not summary_model:
        return
    if isinstance(summary_provider, str) and summary_provider:
        names = configured_providers()
        if summary_provider not in names:
            raise InputError(
                f"{field}.summary_provider",
                f"provider {summary_provider[:64]!r} is not configured; one of: "
                f"{', '.join(names) or '-'}",
            )
    on = summary_provider if isinstance(summary_provider, str) and summary_provider else provider
    model = summary_model if isinstance(summary_model, str) and summary_model else model_id
    if not model_allowed(on, model):
        key = "summary_model" if summary_model else "summary_provider"
        raise InputError(f"{field}.{key}", f"model {model[:64]!r} of {on[:64]!r} is not allowed")


def check_history(
    value: Any,
    *,
    provider: str | None = None,
    model_id: str | None = None,
    field: str = "history",
) -> Any:
    """A chat's history policy (``None``: the agent's or the project's): a built-in
    strategy or a name in ``LLMCHAT["HISTORY_PROCESSORS"]``, or an object of history
    options whose ``strategy`` is one and whose ``estimator`` is a name in
    ``LLMCHAT["TOKEN_ESTIMATORS"]``: names, never dotted paths (nothing is imported). The
    summary model, with the chat's ``provider`` and ``model_id`` (the defaults when not
    given), obeys :func:`check_model`. A problem of one option is reported on
    ``history.<option>``."""
    from .history_policy import STRATEGIES, history_problems, registered_estimators
    from .history_policy import registered_processors as processors

    if value is None:
        return None
    check_json(value, field=field)
    if not isinstance(value, str | dict):
        raise InputError(field, f"must be a strategy or an object, got {type(value).__name__}")
    if isinstance(value, dict):  # a whole number of tokens may be written 600.0 (JSON's 600)
        value = {
            key: int(item)
            if key in ("margin", "summary_max_tokens")
            and isinstance(item, float)
            and item.is_integer()
            and item >= 0
            else item
            for key, item in value.items()
        }
    data = {"strategy": value} if isinstance(value, str) else value
    where = field if isinstance(value, str) else f"{field}.strategy"
    found = _name_problem("strategy", data.get("strategy"), STRATEGIES, processors())
    if found:
        raise InputError(where, found)
    found = _name_problem("estimator", data.get("estimator"), (), registered_estimators())
    if found:
        raise InputError(f"{field}.estimator", found)
    problems = history_problems(value)
    if problems:
        key, sentence = problems[0]
        raise InputError(f"{field}.{key}" if key and isinstance(value, dict) else field, sentence)
    if isinstance(value, dict):
        _check_summary(
            value,
            provider or settings.DEFAULT_PROVIDER,
            model_id or settings.DEFAULT_MODEL,
            field,
        )
    return value


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
