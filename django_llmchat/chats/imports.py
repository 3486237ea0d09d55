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

    from django_llmchat.chats.imports import import_file

    imported = import_file("conversations.json", user=alice)
    for chat in imported.chats:
        print(chat.pk, chat.title)

Each format has its reader (``imports_chatgpt``, ``imports_export``) into the
conversations of ``imports_conversation``; this module reads files and stores
conversations.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import DataError, IntegrityError, transaction

from ..models import Attachment, Chat, Feedback, Message, ToolCall
from .imports_chatgpt import read_chatgpt
from .imports_conversation import NO_RESULT, Conversation, ImportFormatError, _call
from .imports_export import read_export

__all__ = [
    "NO_RESULT",
    "Conversation",
    "ImportFormatError",
    "Imported",
    "import_conversations",
    "import_data",
    "import_file",
    "read_chatgpt",
    "read_export",
]


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
    from ..inputs import check_attachment
    from ..models.branches import plant

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
