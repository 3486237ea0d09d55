"""What ``POST ui/chat`` reads of the AI SDK's request: the body of its
``DefaultChatTransport``, the new user message's text and files (checked by the rules of
a REST message, :mod:`django_llmchat.inputs`) and the answers to tool approvals."""

from __future__ import annotations

import base64
import binascii
import re

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from ... import inputs
from ...errors import InputError
from ..errors import invalid
from ..fields import DOUBLE_TEXTING_HELP, DoubleTextingField, StrictCharField
from ..ids import CLIENT_ID_PATTERN, is_call_id

__all__ = ["UIChatSerializer", "UIMessageSerializer", "approvals_of", "prompt_of"]

_CLIENT_ID = re.compile(CLIENT_ID_PATTERN)
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*?);base64,")


_C = r"[A-Za-z0-9_\-:~]"  # a character of a client-made id but the dot
# CLIENT_ID_PATTERN but "." and ".." (a URL's path segments), without a lookahead
CLIENT_ID_SCHEMA_PATTERN = (
    rf"^({_C}[A-Za-z0-9_\-.:~]{{0,254}}|\.{_C}[A-Za-z0-9_\-.:~]{{0,253}}"
    rf"|\.\.[A-Za-z0-9_\-.:~]{{1,253}})$"
)


@extend_schema_field({"type": "string", "pattern": CLIENT_ID_SCHEMA_PATTERN})
class _ClientIdField(StrictCharField):
    """A chat id or the id a client made for it."""


@extend_schema_field({"type": "string", "pattern": r"^[^\x00]*$"})
class _MessageIdField(serializers.CharField):
    """A UI message's id: any text but a NUL (which DRF refuses)."""


class UIMessageSerializer(serializers.Serializer):
    id = _MessageIdField(allow_blank=True, required=False)
    role = serializers.ChoiceField(
        ["user", "assistant"],
        error_messages={
            "invalid_choice": '"{input}" is not a role a client sends: "user" or "assistant" '
            "(a client cannot send system messages)"
        },
    )
    parts = serializers.ListField(child=serializers.DictField(), allow_empty=True)
    metadata = serializers.JSONField(required=False, allow_null=True)


class UIChatSerializer(serializers.Serializer):
    """The body ``DefaultChatTransport`` posts (other fields, from its ``body`` option,
    are ignored)."""

    id = _ClientIdField(
        max_length=255,
        help_text="The chat: a chat id of yours, or an id the client made up (the chat is "
        "created, owned by you, on first use).",
    )
    messages = serializers.ListField(
        child=UIMessageSerializer(),
        required=False,
        help_text="The client's messages: the last one is the new user message (or the "
        "assistant message carrying answers to tool approvals); the ones before it, by "
        "their ids, are the path it continues (the chat's active path: the ordinary "
        "append; a shorter prefix: a new branch after its last message).",
    )
    message = UIMessageSerializer(
        required=False, help_text="Instead of `messages`: the last message alone."
    )
    trigger = serializers.ChoiceField(
        ["submit-message", "regenerate-message"], default="submit-message"
    )
    messageId = serializers.CharField(  # noqa: N815 - the protocol's name
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="The message to regenerate (the last reply is replaced, and kept as an "
        "alternative), or the user message a `submit-message` edits.",
    )

    double_texting = DoubleTextingField(
        required=False,
        help_text=DOUBLE_TEXTING_HELP.replace("this message", "a new user message"),
    )

    def validate_id(self, value: str) -> str:
        if not _CLIENT_ID.fullmatch(value) or value in (".", ".."):
            raise ValidationError(
                "must be 1-255 letters, digits or '-_.:~' (the id is part of the resume URL)"
            )
        return value

    def validate(self, attrs):
        last = attrs.get("message")
        if last is None and attrs.get("messages"):
            last = attrs["messages"][-1]
        if attrs["trigger"] == "submit-message" and last is None:
            raise ValidationError({"messages": ["send at least the new message"]})
        attrs["last"] = last
        if attrs["trigger"] == "submit-message" and last["role"] == "user":
            # the rules of a REST message (django_llmchat.inputs), before anything is stored
            field = "message" if attrs.get("message") is not None else "messages"
            attrs["prompt"], attrs["attachments"] = prompt_of(last, field=field)
        return attrs


def prompt_of(message: dict, *, field: str = "messages") -> tuple[str, list[tuple]]:
    """The text and attachments of a UI user message (file parts as ``data:`` URLs),
    checked as a REST message is (:mod:`django_llmchat.inputs`): the text within
    ``MAX_CONTENT_LENGTH``, the files by count, size, emptiness and sniffed type. A
    message may be files alone. Refusals are on ``field``."""
    texts: list[str] = []
    files: list[tuple] = []
    for index, part in enumerate(message.get("parts") or []):
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise ValidationError({field: [f"part {index}: text must be a string"]})
            texts.append(text)
        elif kind == "file":
            files.append(_file(index, part, field))
    text = "\n\n".join(t for t in texts if t)
    try:
        text = inputs.check_text(text, field=field, required=not files)
    except InputError as exc:
        raise ValidationError({field: [f"the text {reason}" for reason in exc.reasons]}) from None
    try:
        return text, inputs.check_attachments(files, field=field)
    except InputError as exc:
        raise invalid(exc) from None


def _file(index: int, part: dict, field: str) -> tuple[str, bytes, str]:
    """``(filename, bytes, declared type)`` of a file part (the type is checked with the
    bytes, by the input rules)."""
    url = part.get("url")
    found = _DATA_URL.match(url) if isinstance(url, str) else None
    if found is None:
        raise ValidationError(
            {field: [f"part {index}: a file part's url must be a base64 data: URL"]}
        )
    try:
        data = base64.b64decode(url[found.end() :], validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError({field: [f"part {index}: the data: URL is not base64"]}) from None
    mime = part.get("mediaType") or found.group("mime") or ""
    name = part.get("filename") or "file"
    return (str(name)[:255], data, str(mime))


def approvals_of(message: dict) -> list[tuple[str, str, str]]:
    """``(call id, "approved" | "denied", toolCallId)`` for each answered approval of a UI
    assistant message."""
    out = []
    for part in message.get("parts") or []:
        kind = part.get("type")
        if not isinstance(kind, str) or not (kind.startswith("tool-") or kind == "dynamic-tool"):
            continue
        approval = part.get("approval")
        if part.get("state") != "approval-responded" or not isinstance(approval, dict):
            continue
        if not is_call_id(approval.get("id")) or not isinstance(approval.get("approved"), bool):
            raise ValidationError(
                {
                    "messages": [
                        "an approval needs an id (a tool call's: 1-255 characters, no control "
                        "characters) and approved (true or false)"
                    ]
                }
            )
        decision = "approved" if approval["approved"] else "denied"
        out.append((approval["id"], decision, str(part.get("toolCallId") or approval["id"])))
    return out
