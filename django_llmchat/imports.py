"""Conversations into the database: ChatGPT's data export and this project's own export.

Two formats are read, each into chats of one given user:

- **ChatGPT's data export** (``conversations.json``, or the ``.zip`` ChatGPT mails,
  which holds it): each conversation's ``mapping`` tree becomes the chat's tree (an
  edited prompt and a regenerated reply are siblings, as here), its ``current_node`` the
  active leaf, its ``title`` the chat's. User prompts and replies keep their text and
  time, a reply its model (``metadata.model_slug``); a code or plugin message sent to a
  tool (``recipient`` other than ``all``) is a tool call of that name, the ``tool``
  message after it its result; reasoning (``thoughts``) becomes the next reply's
  thinking. Hidden messages (the empty system root, custom instructions) are left out,
  their children kept. Images and files are not in ``conversations.json``: a part that
  held one reads ``[image]`` / ``[file]``.
- **This project's export** (``{"format": "django-llmchat-export", "version": 1}``, as
  ``llmchat_export_user`` writes it): every chat with its settings, every branch, tool
  calls and results, thinking, citations, tokens, summaries, attachments (their files
  when exported with ``--files``) and the user's ratings. Exporting the imported chats
  gives the same document again, but for the ids (new rows), the owner, and the ledger:
  runs and usage rows record this deployment's provider attempts, so they are not
  imported (the imported messages keep their token counts, so the chat's totals are
  theirs).

A tool call without a result in the file (a conversation that stopped there) gets a
result saying so, so the imported chat is valid and can go on. Nothing is sent to a
provider. Everything of one chat is written in one transaction.

::

    from django_llmchat.imports import import_file

    imported = import_file("conversations.json", user=alice)
    for chat in imported.chats:
        print(chat.pk, chat.title)
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import io
import json
import os
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DataError, IntegrityError, transaction
from django.utils.dateparse import parse_datetime

from .errors import ArgumentError
from .models import Attachment, Chat, Feedback, Message, ToolCall

__all__ = [
    "Conversation",
    "ImportFormatError",
    "Imported",
    "import_conversations",
    "import_data",
    "import_file",
    "read_chatgpt",
    "read_export",
]

NO_RESULT = "(no result was recorded for this call)"
"""The content of the result given to a tool call that has none in the imported file."""

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


class ImportFormatError(ArgumentError):
    """The data is not in a format :mod:`django_llmchat.imports` reads, or holds a value
    it cannot store; the message says where (the conversation, the message) and what."""


@dataclass
class _Node:
    message: Message  # unsaved, without its chat
    parent: int | None = None  # index of its parent node
    calls: list[ToolCall] = field(default_factory=list)  # unsaved
    answers: tuple[int, str] | None = None  # (index of the calling node, call id)
    summary_until: int | None = None
    created_at: dt.datetime | None = None
    files: list[tuple[str, bytes, str | None]] = field(default_factory=list)
    ratings: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Conversation:
    """One chat as read from a file, not stored yet: :func:`import_conversations` stores
    it. ``source`` says where it came from (``chatgpt:<id>``, ``llmchat:<id>``);
    ``notes`` what could not be kept as it was."""

    source: str
    title: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    nodes: list[_Node] = field(default_factory=list)
    leaf: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Imported:
    """What an import stored: the new ``chats`` (in the file's order) and ``notes``, one
    sentence each about something that could not be kept as it was."""

    chats: list[Chat] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- reading ----------------------------------------------------------------------------------
def import_file(path_or_file: Any, *, user: Any, format: str = "auto") -> Imported:
    """:func:`import_data` of a file: a path or a binary file object holding JSON, or a
    ``.zip`` holding ``conversations.json`` (ChatGPT's export as mailed)."""
    if isinstance(path_or_file, str | os.PathLike):
        with open(path_or_file, "rb") as fh:
            raw = fh.read()
    else:
        raw = path_or_file.read()
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if raw[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(raw)) as archive:
                names = [
                    n for n in archive.namelist() if n.rsplit("/", 1)[-1] == "conversations.json"
                ]
                if not names:
                    raise ImportFormatError("the archive holds no conversations.json")
                raw = archive.read(names[0])
        # a damaged archive; a member encrypted (RuntimeError) or packed by a method
        # zipfile does not read (NotImplementedError)
        except (zipfile.BadZipFile, RuntimeError, NotImplementedError) as exc:
            raise ImportFormatError(f"the archive cannot be read: {exc}") from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ImportFormatError(f"the file is not JSON: {exc}") from None
    except RecursionError:
        raise ImportFormatError("the file's JSON is nested too deeply to read") from None
    return import_data(data, user=user, format=format)


def import_data(data: Any, *, user: Any, format: str = "auto") -> Imported:
    """Store the conversations of ``data`` (parsed JSON) as chats of ``user``.
    ``format`` is ``"chatgpt"`` (ChatGPT's ``conversations.json``), ``"llmchat"`` (this
    project's export) or ``"auto"`` (told apart by their shape)."""
    if format == "auto":
        format = _sniff(data)
    if format == "chatgpt":
        conversations = read_chatgpt(data)
    elif format == "llmchat":
        conversations = read_export(data)
    else:
        raise ImportFormatError(f'format must be "auto", "chatgpt" or "llmchat", not {format!r}')
    return import_conversations(conversations, user=user)


def _sniff(data: Any) -> str:
    if isinstance(data, dict) and data.get("format") == "django-llmchat-export":
        return "llmchat"
    if isinstance(data, dict) and "mapping" in data:
        return "chatgpt"  # one conversation
    if isinstance(data, list) and all(isinstance(c, dict) and "mapping" in c for c in data):
        return "chatgpt"
    raise ImportFormatError(
        "not a known export: expected ChatGPT's conversations.json (a list of conversations "
        'with a "mapping") or a django-llmchat export ({"format": "django-llmchat-export"})'
    )


def _when(value: Any, where: str) -> dt.datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return dt.datetime.fromtimestamp(value, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise ImportFormatError(f"{where}: {value!r} is not a time") from None
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is not None:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    raise ImportFormatError(f"{where}: {value!r} is not a time")


# ChatGPT ---------------------------------------------------------------------------------
def read_chatgpt(data: Any) -> list[Conversation]:
    """The conversations of ChatGPT's ``conversations.json`` (a list, or one conversation),
    not stored yet."""
    items = [data] if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ImportFormatError("conversations.json must hold a list of conversations")
    return [_shaped(_chatgpt_conversation, f"conversation {i}", c, i) for i, c in enumerate(items)]


def _shaped(read, where: str, *args: Any) -> Any:
    """``read(*args)``, a value of a type the format does not give (a list for an object,
    a number for a text...) an :class:`ImportFormatError` naming ``where``."""
    try:
        return read(*args)
    except ImportFormatError:
        raise
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise ImportFormatError(
            f"{where}: a value of an unexpected type ({type(exc).__name__}: {exc})"
        ) from None


def _chatgpt_text(content: dict[str, Any]) -> str:
    kind = content.get("content_type")
    if kind in ("code", "execution_output", "system_error"):
        return str(content.get("text") or "")
    if kind == "tether_browsing_display":
        return str(content.get("result") or content.get("summary") or "")
    if kind == "tether_quote":
        return "\n\n".join(str(content[k]) for k in ("title", "text") if content.get(k))
    parts = content.get("parts")
    if isinstance(parts, list):
        out = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                pointer = str(part.get("content_type") or "")
                out.append("[image]" if "image" in pointer else "[file]")
        return "\n".join(p for p in out if p)
    return str(content.get("text") or "")


def _chatgpt_conversation(conv: Any, index: int) -> Conversation:
    where = f"conversation {index}"
    if not isinstance(conv, dict) or not isinstance(conv.get("mapping"), dict):
        raise ImportFormatError(f'{where}: a conversation must be an object with a "mapping"')
    ident = str(conv.get("conversation_id") or conv.get("id") or index)
    where = f"conversation {ident}"
    mapping: dict[str, Any] = conv["mapping"]
    out = Conversation(
        source=f"chatgpt:{ident}",
        title=str(conv.get("title") or "")[:255],
        created_at=_when(conv.get("create_time"), where),
        updated_at=_when(conv.get("update_time"), where),
    )
    kept: dict[str, int | None] = {}  # mapping id -> index of the node standing for it
    thinking: dict[str, str] = {}  # mapping id -> reasoning waiting for the next reply

    def parent_of(key: str) -> str | None:
        parent = mapping[key].get("parent")
        return parent if parent in mapping else None

    roots = [k for k in mapping if parent_of(k) is None]
    seen: set[str] = set()
    stack = list(reversed(roots))
    while stack:
        key = stack.pop()
        if key in seen:
            raise ImportFormatError(f"{where}: message {key} is its own ancestor")
        seen.add(key)
        up = parent_of(key)
        above = kept.get(up) if up is not None else None
        carried = thinking.get(up, "") if up is not None else ""
        kept[key], thinking[key] = _chatgpt_node(out, mapping[key], key, above, carried, where)
        children = [c for c in mapping[key].get("children") or [] if c in mapping]
        stack.extend(reversed(children))
    current = conv.get("current_node")
    if current in kept:
        out.leaf = kept[current]
    _answer_every_call(out)
    return out


def _chatgpt_node(
    out: Conversation, node: dict[str, Any], key: str, above: int | None, carried: str, where: str
) -> tuple[int | None, str]:
    """Add the node to ``out``: the index standing for it (``above`` for a message left
    out) and the reasoning its children's first reply takes."""
    msg = node.get("message")
    if not isinstance(msg, dict):
        return above, carried
    author = msg.get("author") or {}
    role = author.get("role")
    content = msg.get("content") or {}
    kind = content.get("content_type")
    meta = msg.get("metadata") or {}
    if kind in ("thoughts", "reasoning_recap"):
        texts = [
            str(t.get("content") or t.get("summary") or "")
            for t in content.get("thoughts") or []
            if isinstance(t, dict)
        ]
        return above, "\n\n".join(t for t in [carried, *texts] if t)
    hidden = meta.get("is_visually_hidden_from_conversation") or kind in (
        "user_editable_context",
        "model_editable_context",
    )
    text = _chatgpt_text(content)
    when = _when(msg.get("create_time"), f"{where}, message {key}")
    if hidden or role not in ("system", "user", "assistant", "tool"):
        return above, carried
    if role == "system":
        if not text:
            return above, carried
        out.nodes.append(_Node(Message(role="system", content=text), created_at=when))
        return above, carried  # outside the tree: the children follow what came before
    recipient = msg.get("recipient") or "all"
    if role == "assistant" and recipient != "all":
        if kind == "code":
            arguments: dict[str, Any] = {"code": text}
            if content.get("language") and content["language"] != "unknown":
                arguments["language"] = str(content["language"])
        else:
            try:
                parsed = json.loads(text)
            except (TypeError, ValueError):
                parsed = None
            arguments = parsed if isinstance(parsed, dict) else {"_raw": text}
        message = Message(role="assistant", content="", model_id=str(meta.get("model_slug") or ""))
        if carried:
            message.thinking_text = carried
        call = ToolCall(call_id=key, name=str(recipient)[:255], arguments=arguments)
        out.nodes.append(_Node(message, parent=above, calls=[call], created_at=when))
        return len(out.nodes) - 1, ""
    if role == "tool":
        name = str(author.get("name") or "tool")
        caller = _open_call(out, above, name)
        if caller is None:  # output with no call before it: the call it answers, made up
            call = ToolCall(call_id=f"{key}-call", name=name[:255], arguments={})
            out.nodes.append(
                _Node(
                    Message(role="assistant", content=""),
                    parent=above,
                    calls=[call],
                    created_at=when,
                )
            )
            caller = (len(out.nodes) - 1, call.call_id)
            above = caller[0]
        out.nodes.append(
            _Node(Message(role="tool", content=text), parent=above, answers=caller, created_at=when)
        )
        return len(out.nodes) - 1, carried
    message = Message(role=role, content=text)
    if role == "assistant":
        message.model_id = str(meta.get("model_slug") or "")[:255]
        if carried:
            message.thinking_text = carried
        reason = (meta.get("finish_details") or {}).get("type")
        if isinstance(reason, str):
            message.finish_reason = reason[:64]
    out.nodes.append(_Node(message, parent=above, created_at=when))
    return len(out.nodes) - 1, ""


def _open_call(out: Conversation, index: int | None, name: str) -> tuple[int, str] | None:
    """The call a tool message after node ``index`` answers: a call still without a
    result of the assistant message it follows, or of the one before its other results;
    the one named ``name`` first."""
    answered = {n.answers for n in out.nodes if n.answers is not None}
    while index is not None and out.nodes[index].message.role == "tool":
        index = out.nodes[index].parent
    if index is None or not out.nodes[index].calls:
        return None
    open_calls = [(index, c.call_id) for c in out.nodes[index].calls]
    open_calls = [c for c in open_calls if c not in answered]
    named = [c for c in open_calls if out.nodes[c[0]].calls and _call(out, c).name == name]
    return (named or open_calls or [None])[0]


def _call(out: Conversation, ref: tuple[int, str]) -> ToolCall:
    return next(c for c in out.nodes[ref[0]].calls if c.call_id == ref[1])


def _answer_every_call(out: Conversation) -> None:
    """Give each call without a result one saying so, right after its message (the
    message's other children then follow that result): a chat is never left with a call
    nothing answers."""
    answered = {n.answers for n in out.nodes if n.answers is not None}
    made: set[int] = set()
    for index in range(len(out.nodes)):
        node = out.nodes[index]
        if not node.calls:
            continue
        # the last result of this message's calls (each result follows the one before)
        chain_end = index
        while True:
            nxt = next(
                (
                    j
                    for j, n in enumerate(out.nodes)
                    if n.parent == chain_end and n.answers is not None and n.answers[0] == index
                ),
                None,
            )
            if nxt is None:
                break
            chain_end = nxt
        missing = [c for c in node.calls if (index, c.call_id) not in answered]
        for call in missing:
            out.nodes.append(
                _Node(
                    Message(role="tool", content=NO_RESULT),
                    parent=chain_end,
                    answers=(index, call.call_id),
                    created_at=node.created_at,
                )
            )
            new = len(out.nodes) - 1
            made.add(new)
            for j, other in enumerate(out.nodes[:new]):
                if (
                    other.parent == chain_end
                    and j != new
                    and (other.answers is None or other.answers[0] != index)
                ):
                    other.parent = new
            if out.leaf == chain_end:
                out.leaf = new
            chain_end = new
            out.notes.append(
                f"{out.source}: the call {call.call_id} ({call.name}) had no result; it was "
                "given one saying so"
            )
    if made:
        _order(out, made)


def _order(out: Conversation, made: set[int]) -> None:
    """Put each made-up result right after the message it follows (they were appended at
    the end); the others keep their order."""
    after: dict[int | None, list[int]] = {}
    for i in sorted(made):
        after.setdefault(out.nodes[i].parent, []).append(i)
    order: list[int] = []

    def place(i: int) -> None:
        order.append(i)
        for j in after.get(i, []):
            place(j)

    for i in range(len(out.nodes)):
        if i not in made:
            place(i)
    new_index = {old: new for new, old in enumerate(order)}
    nodes = [out.nodes[i] for i in order]
    for n in nodes:
        n.parent = new_index[n.parent] if n.parent is not None else None
        if n.answers is not None:
            n.answers = (new_index[n.answers[0]], n.answers[1])
        if n.summary_until is not None:
            n.summary_until = new_index[n.summary_until]
    out.nodes = nodes
    out.leaf = new_index[out.leaf] if out.leaf is not None else None


# this project's export ---------------------------------------------------------------------
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
                    raise ImportFormatError(f"{mwhere}: {name} must be a count, not {value!r}")
                try:
                    Message._meta.get_field(name).run_validators(value)
                except ValidationError:
                    raise ImportFormatError(f"{mwhere}: {name} {value} is too large") from None
                setattr(message, name, value)
        cost = entry.get("cost")
        if isinstance(cost, dict):
            cost = cost.get("total")
        if cost is not None:
            try:
                message.supplied_cost = Decimal(str(cost))
            except InvalidOperation:
                raise ImportFormatError(f"{mwhere}: cost {cost!r} is not a number") from None
        message.citations = entry.get("citations") or []
        message.server_tool_calls = entry.get("server_tool_calls") or []
        raw = {}
        if entry.get("raw_content") is not None:
            raw["content"] = entry["raw_content"]
        if entry.get("raw_reasoning") is not None:
            raw["reasoning_items"] = entry["raw_reasoning"]
        message.raw = raw or None
        message.cache_boundary = bool(entry.get("cache_until_here"))
        node = _Node(message, created_at=_when(entry.get("created_at"), mwhere))
        for ref, name in (("parent", "parent"), ("summary_until", "summary_until")):
            if entry.get(ref) is not None:
                if entry[ref] not in index:
                    raise ImportFormatError(
                        f"{mwhere}: its {ref} {entry[ref]!r} is not an earlier message of the chat"
                    )
                setattr(node, name, index[entry[ref]])
        tool_calls = entry.get("tool_calls") or {}
        if not isinstance(tool_calls, dict):
            raise ImportFormatError(f"{mwhere}: tool_calls must be an object of calls by id")
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
        if role == "tool":
            node.answers = _answered(out, node.parent, entry.get("tool_call_id"), calls_of, mwhere)
        for att in entry.get("attachments") or []:
            if "data_base64" not in att:
                out.notes.append(
                    f"{mwhere}: the attachment {att.get('filename')!r} was exported without "
                    "its file (export with --files to keep it); left out"
                )
                continue
            try:
                data = base64.b64decode(att["data_base64"], validate=True)
            except (binascii.Error, TypeError, ValueError):
                raise ImportFormatError(
                    f"{mwhere}: the attachment {att.get('filename')!r} is not base64"
                ) from None
            node.files.append(
                (str(att.get("filename") or "attachment"), data, att.get("mime_type"))
            )
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


# -- storing -----------------------------------------------------------------------------------
@contextmanager
def _database_refusals(source: str) -> Iterator[None]:
    """A value no check of the reading refused but the database does (a text longer than
    its column, a number out of its range) as an :class:`ImportFormatError` naming
    ``source``."""
    try:
        yield
    except (DataError, IntegrityError, OverflowError) as exc:
        raise ImportFormatError(f"{source}: a value the database cannot store ({exc})") from None


def import_conversations(conversations: Iterable[Conversation], *, user: Any) -> Imported:
    """Store each conversation as a new chat of ``user`` (a transaction each)."""
    from .branches import plant
    from .inputs import check_attachment

    done = Imported()
    for conv in conversations:
        done.notes.extend(conv.notes)
        settings = dict(conv.settings)
        client_id = settings.pop("client_id", "")
        with _database_refusals(conv.source), transaction.atomic():
            if client_id and Chat.objects.filter(user=user, client_id=client_id).exists():
                done.notes.append(
                    f"{conv.source}: user {user.pk} has a chat with client id {client_id!r} "
                    "already; imported without one"
                )
                client_id = ""
            chat = Chat.objects.create(user=user, title=conv.title, client_id=client_id, **settings)
            messages = [n.message for n in conv.nodes]
            previous = None
            for node in conv.nodes:
                node.message.chat = chat
                when = node.created_at or conv.created_at
                stamp = int(when.timestamp() * 1_000_000) if when is not None else 0
                base = previous + 1 if previous is not None else stamp
                node.message.position = max(stamp, base)
                previous = node.message.position
            plant(
                messages,
                [n.parent for n in conv.nodes],
                leaf=conv.leaf,
                summaries={
                    i: n.summary_until
                    for i, n in enumerate(conv.nodes)
                    if n.summary_until is not None
                },
            )
            calls = []
            for node in conv.nodes:
                for call in node.calls:
                    call.chat, call.message = chat, node.message
                    calls.append(call)
            ToolCall.objects.bulk_create(calls, batch_size=1000)
            for node in conv.nodes:
                if node.answers is not None:
                    node.message.parent_tool_call = _call(conv, node.answers)
                if node.created_at is not None:
                    node.message.created_at = node.created_at
            Message.objects.bulk_update(
                messages, ["parent_tool_call", "created_at"], batch_size=1000
            )
            for node in conv.nodes:
                for name, data, mime in node.files:
                    name, data, mime = check_attachment(
                        (name, data, mime) if mime else (name, data)
                    )
                    Attachment.objects.create_from_bytes(
                        message=node.message, data=data, filename=name, mime_type=mime
                    )
                for row in node.ratings:
                    if row.get("rating") not in Feedback.RATINGS:
                        raise ImportFormatError(
                            f"{conv.source}: a rating must be one of {Feedback.RATINGS}, not "
                            f"{row.get('rating')!r}"
                        )
                    Feedback.objects.create(
                        message=node.message,
                        user=user,
                        rating=row.get("rating"),
                        comment=str(row.get("comment") or ""),
                    )
            stamps = {
                k: v
                for k, v in (("created_at", conv.created_at), ("updated_at", conv.updated_at))
                if v
            }
            if stamps:
                Chat.objects.filter(pk=chat.pk).update(**stamps)
                for k, v in stamps.items():
                    setattr(chat, k, v)
        done.chats.append(chat)
    return done
