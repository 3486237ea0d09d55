"""This project's own export (``{"format": "django-llmchat-export", "version": 1}``)
read into conversations: every chat with its settings, branches, tool calls and results,
thinking, tokens, summaries, attachments and ratings."""

from __future__ import annotations

import base64
import binascii
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError

from ..models import Chat, Message, ToolCall
from .imports_conversation import (
    Conversation,
    ImportFormatError,
    _answer_every_call,
    _Node,
    _shaped,
    _when,
)

_CHAT_SETTINGS = (
    "provider",
    "model_id",
    "agent",
    "params",
    "schema",
    "tools",
    "context",
    "history",
    "client_id",
    "retention_days",
)


def read_export(data: Any) -> list[Conversation]:
    """The chats of a django-llmchat export (every user's in it), not stored yet."""
    if not isinstance(data, dict) or data.get("format") != "django-llmchat-export":
        raise ImportFormatError('a django-llmchat export has "format": "django-llmchat-export"')
    if data.get("version") != 1:
        raise ImportFormatError(
            f"version {data.get('version')!r} of the export is not read here (1 is)"
        )
    out = []
    users = data.get("users") or []
    if not isinstance(users, list) or not all(isinstance(e, dict) for e in users):
        raise ImportFormatError('"users" must be a list of objects')
    for number, entry in enumerate(users):
        ratings = _shaped(_ratings, f"user {number}", entry)
        chats = entry.get("chats") or []
        if not isinstance(chats, list) or not all(isinstance(c, dict) for c in chats):
            raise ImportFormatError(f'user {number}: "chats" must be a list of objects')
        for chat in chats:
            out.append(_shaped(_export_chat, f"chat {chat.get('id')}", chat, ratings))
    return out


def _ratings(entry: dict[str, Any]) -> dict[Any, list[dict[str, Any]]]:
    ratings: dict[Any, list[dict[str, Any]]] = {}
    for row in entry.get("feedback") or []:
        ratings.setdefault(row.get("message"), []).append(row)
    return ratings


_PLAIN = ("content", "finish_reason", "thinking_signature")
_TOKENS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "thinking_tokens",
)


def _settings(chat: dict[str, Any], where: str) -> dict[str, Any]:
    """The chat's settings of the export, each checked as its column checks it (a
    length, a count that is not negative...)."""
    settings = {}
    for name in _CHAT_SETTINGS:
        if chat.get(name) is None:
            continue
        try:
            settings[name] = Chat._meta.get_field(name).clean(chat[name], None)
        except ValidationError as exc:
            problem = " ".join(exc.messages)
            raise ImportFormatError(f"{where}: {name} {chat[name]!r}: {problem}") from None
    return settings


def _export_chat(chat: dict[str, Any], ratings: dict[Any, list[dict[str, Any]]]) -> Conversation:
    where = f"chat {chat.get('id')}"
    out = Conversation(
        source=f"llmchat:{chat.get('id')}",
        title=str(chat.get("title") or "")[:255],
        settings=_settings(chat, where),
        created_at=_when(chat.get("created_at"), where),
        updated_at=_when(chat.get("updated_at"), where),
    )
    index: dict[Any, int] = {}
    calls_of: dict[int, dict[str, ToolCall]] = {}
    last_on_path = None
    for entry in chat.get("messages") or []:
        mwhere = f"{where}, message {entry.get('id')}"
        role = entry.get("role")
        if role not in Message.ROLES:
            raise ImportFormatError(
                f"{mwhere}: role {role!r} is not one of {', '.join(Message.ROLES)}"
            )
        node = _Node(_export_message(entry, role, mwhere))
        node.created_at = _when(entry.get("created_at"), mwhere)
        _link(node, entry, index, mwhere)
        if role == "tool":
            node.answers = _answered(out, node.parent, entry.get("tool_call_id"), calls_of, mwhere)
        _files(out, node, entry, mwhere)
        node.ratings = ratings.get(entry.get("id"), [])
        out.nodes.append(node)
        here = len(out.nodes) - 1
        index[entry.get("id")] = here
        calls_of[here] = {c.call_id: c for c in node.calls}
        if entry.get("on_path", True) and role != "system" and node.summary_until is None:
            last_on_path = here
    out.leaf = last_on_path
    _answer_every_call(out)
    return out


def _export_message(entry: dict[str, Any], role: str, where: str) -> Message:
    """The message of an exported entry (unsaved): its text, thinking, token counts, cost,
    citations and raw parts, each checked as its column checks it."""
    message = Message(role=role, model_id=str(entry.get("model") or ""))
    for name in _PLAIN:
        if entry.get(name) is not None:
            setattr(message, name, str(entry[name]))
    if entry.get("thinking") is not None:
        message.thinking_text = str(entry["thinking"])
    for name in _TOKENS:
        value = entry.get(name)
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ImportFormatError(f"{where}: {name} must be a count, not {value!r}")
            try:
                Message._meta.get_field(name).run_validators(value)
            except ValidationError:
                raise ImportFormatError(f"{where}: {name} {value} is too large") from None
            setattr(message, name, value)
    cost = entry.get("cost")
    if isinstance(cost, dict):
        cost = cost.get("total")
    if cost is not None:
        try:
            message.supplied_cost = Decimal(str(cost))
        except InvalidOperation:
            raise ImportFormatError(f"{where}: cost {cost!r} is not a number") from None
    message.citations = entry.get("citations") or []
    message.server_tool_calls = entry.get("server_tool_calls") or []
    raw = {}
    if entry.get("raw_content") is not None:
        raw["content"] = entry["raw_content"]
    if entry.get("raw_reasoning") is not None:
        raw["reasoning_items"] = entry["raw_reasoning"]
    message.raw = raw or None
    message.cache_boundary = bool(entry.get("cache_until_here"))
    return message


def _link(node: _Node, entry: dict[str, Any], index: dict[Any, int], where: str) -> None:
    """The node's parent and summary (earlier messages of the chat) and its tool calls."""
    for ref, name in (("parent", "parent"), ("summary_until", "summary_until")):
        if entry.get(ref) is not None:
            if entry[ref] not in index:
                raise ImportFormatError(
                    f"{where}: its {ref} {entry[ref]!r} is not an earlier message of the chat"
                )
            setattr(node, name, index[entry[ref]])
    tool_calls = entry.get("tool_calls") or {}
    if not isinstance(tool_calls, dict):
        raise ImportFormatError(f"{where}: tool_calls must be an object of calls by id")
    for call_id, call in tool_calls.items():
        node.calls.append(
            ToolCall(
                call_id=str(call.get("id") or call_id),
                name=str(call.get("name") or ""),
                arguments=call.get("arguments") if call.get("arguments") is not None else {},
                thought_signature=str(call.get("thought_signature") or ""),
                approval=str(call.get("approval") or ""),
            )
        )


def _files(out: Conversation, node: _Node, entry: dict[str, Any], where: str) -> None:
    """The entry's attachments exported with their files onto ``node``; a note for each
    exported without."""
    for att in entry.get("attachments") or []:
        if "data_base64" not in att:
            out.notes.append(
                f"{where}: the attachment {att.get('filename')!r} was exported without "
                "its file (export with --files to keep it); left out"
            )
            continue
        try:
            data = base64.b64decode(att["data_base64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise ImportFormatError(
                f"{where}: the attachment {att.get('filename')!r} is not base64"
            ) from None
        node.files.append((str(att.get("filename") or "attachment"), data, att.get("mime_type")))


def _answered(
    out: Conversation,
    parent: int | None,
    call_id: Any,
    calls_of: dict[int, dict[str, ToolCall]],
    where: str,
) -> tuple[int, str]:
    """The call a stored tool result answers: ``call_id`` of the assistant message its
    results' chain follows."""
    index = parent
    while index is not None and out.nodes[index].message.role == "tool":
        index = out.nodes[index].parent
    if index is None or call_id not in calls_of.get(index, {}):
        raise ImportFormatError(
            f"{where}: a tool result answering no call of the message it follows"
        )
    return index, str(call_id)
