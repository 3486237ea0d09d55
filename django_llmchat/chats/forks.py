"""Forking a chat: a new chat of the same user holding one path of a chat's tree.

:func:`fork_chat` (``chat.fork(message)``) copies the path from the first message down
to ``message`` (any message of any branch of the chat) into a new chat, in one
transaction and a constant number of queries:

- the messages with their reasoning, citations, raw provider output and times, their tool
  calls (with approvals) and tool results; the tree's shape is stored by
  :func:`django_llmchat.models.branches.plant`, as an import stores it;
- the chat's instructions (its system messages) and the summaries of the copied messages;
- attachments as new rows naming the same stored files (no file is copied: a file stays
  in the storage while any attachment row names it, see
  :func:`django_llmchat.chats.lifecycle.purge_chats`);
- the chat's settings (title, model, provider, agent, parameters, schema, tools, context,
  history, retention days).

Nothing paid is copied: no usage row, no token count, no supplied cost (the fork's totals
start at zero; the source keeps what its replies cost), nor feedback or runs. The copy is
a valid transcript: when ``message`` leaves tool calls unanswered (an assistant message
whose results are not all on the path up to it), the copy ends before the message that
made them. Encrypted columns are read and written through the ORM's fields, so a copy is
encrypted with the first key of ``LLMCHAT["ENCRYPTION_KEYS"]``.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Prefetch

from ..errors import ArgumentError
from ..models import Attachment, Chat, Message, ToolCall
from ..models.message import QUEUED_POSITION

__all__ = ["CHAT_FIELDS", "MESSAGE_FIELDS", "fork_chat"]

CHAT_FIELDS = (
    "title",
    "model_id",
    "provider",
    "agent",
    "params",
    "schema",
    "tools",
    "context",
    "history",
    "retention_days",
)
"""The chat's settings a fork takes over."""

MESSAGE_FIELDS = (
    "role",
    "content",
    "model_id",
    "provider",
    "finish_reason",
    "thinking_text",
    "thinking_signature",
    "citations",
    "server_tool_calls",
    "raw",
    "cache_boundary",
    "position",
)
"""The columns of a message a fork copies (token counts and supplied costs stay)."""

_CALL_FIELDS = ("call_id", "name", "arguments", "thought_signature", "approval")
_FILE_FIELDS = ("filename", "mime_type", "size", "sha256")


def _message_id(message: Any) -> int:
    pk = getattr(message, "pk", message)
    if isinstance(pk, bool) or not isinstance(pk, int):
        raise ArgumentError(f"message must be a message of the chat or its id, got {message!r}")
    return pk


def path_to(chat: Chat, message: Any) -> list[int]:
    """The ids of the path from the chat's first message to ``message`` (a message of
    any branch of the chat's tree), first to last. Raises
    :class:`~django_llmchat.errors.ArgumentError` for a message of no branch of the chat
    (another chat's, a system message, a summary, a prompt still queued)."""
    pk = _message_id(message)
    rows = Message.objects.filter(chat_id=chat.pk).values_list(
        "pk", "parent_id", "role", "position", "summary_until_id"
    )
    parents: dict[int, int | None] = {}
    target = None
    for row_pk, parent_id, role, position, summary_until in rows:
        if role == "system" or summary_until is not None or position >= QUEUED_POSITION:
            continue
        parents[row_pk] = parent_id
        if row_pk == pk:
            target = row_pk
    if target is None:
        raise ArgumentError(f"message {pk} is no message of a branch of chat {chat.pk}")
    path: list[int] = []
    seen: set[int] = set()
    current: int | None = target
    while current is not None and current in parents and current not in seen:
        seen.add(current)
        path.append(current)
        current = parents[current]
    path.reverse()
    return path


def _with_parts(messages):
    """``messages`` with what a copy takes: tool calls (with their results), attachments."""
    return messages.prefetch_related(
        Prefetch("tool_calls", queryset=ToolCall.objects.select_related("result")),
        "attachments",
    )


def _answered_prefix(messages: list[Message]) -> list[Message]:
    """``messages`` up to (not including) the first assistant message with a tool call
    whose result is not among them."""
    ids = {m.pk for m in messages}
    for index, message in enumerate(messages):
        for call in message.tool_calls.all():
            result = call.get_result()
            if result is None or result.pk not in ids:
                return messages[:index]
    return messages


def fork_chat(chat: Chat, message: Any) -> Chat:
    """A new chat of ``chat``'s user holding ``chat``'s path up to ``message`` (see the
    module's documentation). Returns the new chat."""
    from ..models.branches import plant

    with transaction.atomic():
        wanted = path_to(chat, message)
        loaded = {m.pk: m for m in _with_parts(Message.objects.filter(pk__in=wanted))}
        path = _answered_prefix([loaded[pk] for pk in wanted])
        if not path:
            raise ArgumentError(
                f"message {_message_id(message)} leaves tool calls unanswered and no "
                "message comes before the one that made them: there is nothing to fork"
            )
        copied = {m.pk for m in path}
        system = list(
            _with_parts(Message.objects.filter(chat_id=chat.pk, role="system")).order_by(
                "position", "id"
            )
        )
        instructions = [m for m in system if m.summary_until_id is None]
        summaries = [m for m in system if m.summary_until_id in copied]

        fork = Chat.objects.create(
            user_id=chat.user_id,
            forked_from=chat,
            forked_from_message_id=path[-1].pk,
            **{name: getattr(chat, name) for name in CHAT_FIELDS},
        )
        sources = [*instructions, *path, *summaries]
        copies = [
            Message(chat=fork, **{name: getattr(m, name) for name in MESSAGE_FIELDS})
            for m in sources
        ]
        first = len(instructions)
        index_of = {m.pk: i for i, m in enumerate(sources)}
        plant(
            copies,
            [None] * first
            + [None if i == 0 else first + i - 1 for i in range(len(path))]
            + [None] * len(summaries),
            leaf=first + len(path) - 1,
            summaries={
                first + len(path) + i: index_of[m.summary_until_id] for i, m in enumerate(summaries)
            },
        )

        calls, new_call = [], {}
        for source, copy in zip(sources, copies, strict=True):
            for call in source.tool_calls.all():
                new = ToolCall(
                    chat=fork, message=copy, **{n: getattr(call, n) for n in _CALL_FIELDS}
                )
                calls.append(new)
                new_call[call.pk] = new
        ToolCall.objects.bulk_create(calls, batch_size=1000)
        for source, copy in zip(sources, copies, strict=True):
            if source.parent_tool_call_id is not None:
                copy.parent_tool_call = new_call[source.parent_tool_call_id]
            copy.created_at = source.created_at
        Message.objects.bulk_update(copies, ["parent_tool_call", "created_at"], batch_size=1000)

        files = [
            # the same stored file: its name, not the source row's FieldFile
            Attachment(
                message=copy, file=att.file.name, **{n: getattr(att, n) for n in _FILE_FIELDS}
            )
            for source, copy in zip(sources, copies, strict=True)
            for att in source.attachments.all()
        ]
        Attachment.objects.bulk_create(files, batch_size=1000)
    return fork
