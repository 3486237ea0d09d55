"""Transcripts out of the database: as training data (OpenAI's chat fine-tuning format, one
JSON line per conversation) or as plain JSON (every stored field a reader needs).

Each line is ``{"messages": [...], "tools": [...]}``: ``system`` (the agent's instructions
and the chat's system messages, joined as a request sends them), ``user`` and
``assistant`` messages with their ``content``, an assistant's ``tool_calls`` (``id``,
``type: "function"``, ``function: {name, arguments}``, the arguments a JSON string), and
each call's result as a ``tool`` message with its ``tool_call_id`` right after it (a
denied call's result is the error the model was sent). ``tools`` lists the definitions
of the tools the chat could call (those registered here). A turn rated thumbs-down (a
reply with a -1 ``Feedback``) has ``"weight": 0`` on its assistant messages: kept as
context, not learnt.

The functions take "the messages of a path": a chat's active path in order
(:func:`chat_path`; the other branches of a chat that branches are left out: switch to one
with ``chat.switch_to()`` to export it); they never read the chat's order themselves.

The plain JSON export (:func:`transcript_dict`, :func:`transcripts_json`) gives each
chat's settings and totals and, per message of its path, its ``id`` and ``parent`` (the
tree's links), ``created_at``, the fields of ``Message.to_dict()`` (role, content, tool
calls with their arguments, the ``tool_call_id`` a result answers, thinking, tokens...),
its ``cost`` in USD (from its usage rows) and the ``feedback`` ratings it got.

A queryset is read 100 chats at a time. On PostgreSQL that is a server-side cursor, which
lives in one server session: outside a transaction, a pooler in transaction mode
(PgBouncer) may send each fetch to another server, where the cursor does not exist. The
export therefore reads inside one transaction there, unless the database's
``DISABLE_SERVER_SIDE_CURSORS`` is set (then each chunk is an ordinary query).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections, transaction
from django.db.models import Exists, OuterRef, Prefetch, QuerySet

from ..models import Chat, Feedback, Message

__all__ = [
    "chat_path",
    "filter_chats",
    "finetune_example",
    "finetune_lines",
    "tool_definitions",
    "transcript_dict",
    "transcripts_json",
]


def chat_path(chat: Chat) -> list[Message]:
    """The messages a chat's export follows: its active path, in order, with their tool
    calls, results and feedback loaded (a constant number of queries)."""
    return list(
        chat.transcript().prefetch_related(
            Prefetch("feedback", queryset=Feedback.objects.only("id", "message_id", "rating"))
        )
    )


def filter_chats(
    chats: QuerySet | None = None,
    *,
    chat_ids: Iterable[int] | None = None,
    users: Iterable[Any] | None = None,
    rating: int | None = None,
) -> QuerySet:
    """``chats`` (default: every chat) narrowed to ``chat_ids``, to the chats of
    ``users``, and, with ``rating``, to the chats holding a reply rated so (``1`` or
    ``-1``); in id order."""
    qs = Chat.objects.all() if chats is None else chats
    if chat_ids is not None:
        qs = qs.filter(pk__in=list(chat_ids))
    if users is not None:
        qs = qs.filter(user__in=[getattr(u, "pk", u) for u in users])
    if rating is not None:
        rated = Feedback.objects.filter(message__chat=OuterRef("pk"), rating=rating)
        qs = qs.filter(Exists(rated))
    return qs.order_by("pk")


def tool_definitions(chat: Chat) -> list[dict[str, Any]]:
    """The chat's tools (its own and its agent's) as fine-tuning ``tools`` entries:
    ``{"type": "function", "function": {"name", "description", "parameters"}}``. Tools
    that are not registered here, and tool sources (``mcp:<server>``: their definitions
    live on the server), are left out."""
    from ..tools import Tool, get_tool

    items = list(chat.tools or [])
    agent = _agent(chat)
    if agent is not None:
        items += list(agent.tools or [])
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        if isinstance(item, str) and ":" in item:
            continue
        if not isinstance(item, Tool) and hasattr(item, "tools_for"):
            continue  # a tool source object: no definition without asking it
        try:
            found = get_tool(item)
        except Exception:
            found = None
        if found is None or found.name in out:
            continue
        function: dict[str, Any] = {"name": found.name}
        if found.description:
            function["description"] = found.description
        function["parameters"] = found.parameters
        out[found.name] = {"type": "function", "function": function}
    return list(out.values())


def _agent(chat: Chat):
    if not chat.agent:
        return None
    from ..agents import load_agent

    try:
        return load_agent(chat.agent)
    except Exception:
        return None


def _instructions(chat: Chat) -> str | None:
    agent = _agent(chat)
    if agent is None:
        return None
    from ..context import Context

    try:
        return agent.render_instructions(Context(dict(chat.context or {})))
    except Exception:
        return None


def _arguments(call: Any) -> str:
    args = call.arguments
    if isinstance(args, dict) and set(args) == {"_raw"}:
        return str(args["_raw"])  # arguments that never parsed, as the model sent them
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def _disliked(message: Message) -> bool:
    return any(f.rating == -1 for f in message.feedback.all())


def finetune_example(
    messages: Sequence[Message],
    *,
    tools: list[dict[str, Any]] | None = None,
    instructions: str | None = None,
) -> dict[str, Any] | None:
    """One training example from the messages of a path (in order, tool calls and their
    results loaded, as :func:`chat_path` gives them), or ``None`` when it holds no reply.

    The example ends with its last assistant message (a prompt still unanswered is left
    out); summaries are left out (the full history is there), so are attachments (text
    only) and tool calls without a result (still waiting for approval). A turn whose
    reply has a -1 rating gets ``"weight": 0`` on each of its assistant messages."""
    system = [instructions] if instructions else []
    system += [m.content for m in messages if m.role == "system" and not m.is_summary]
    out: list[dict[str, Any]] = []
    if any(system):
        out.append({"role": "system", "content": "\n\n".join(s for s in system if s)})
    turn: list[dict[str, Any]] = []  # the assistant messages since the last prompt
    for m in messages:
        if m.is_summary or m.role == "system":
            continue
        if m.role == "user":
            turn = []
            out.append({"role": "user", "content": m.content})
        elif m.role == "assistant":
            pairs = [(c, c.get_result()) for c in m.tool_calls.all()]
            pairs = [(c, r) for c, r in pairs if r is not None]
            if not m.content and not pairs:
                continue
            entry: dict[str, Any] = {"role": "assistant"}
            if m.content or not pairs:
                entry["content"] = m.content
            if pairs:
                entry["tool_calls"] = [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": _arguments(call)},
                    }
                    for call, _ in pairs
                ]
            out.append(entry)
            turn.append(entry)
            if _disliked(m):
                for earlier in turn:
                    earlier["weight"] = 0
            for call, result in pairs:
                out.append(
                    {"role": "tool", "tool_call_id": call.call_id, "content": result.content}
                )
        # tool messages come right after their call (above); one without a call is left out
    while out and out[-1]["role"] != "assistant":
        out.pop()
    if not out:
        return None
    example: dict[str, Any] = {"messages": out}
    if tools:
        example["tools"] = tools
    return example


def _each_chat(chats: Iterable[Chat] | QuerySet) -> Iterator[Chat]:
    """The chats of ``chats``; a queryset in chunks of 100, its server-side cursor (on
    PostgreSQL) inside a transaction, so that a pooler cannot part it from its session."""
    if not isinstance(chats, QuerySet):
        yield from chats
        return
    connection = connections[chats.db]
    if (
        connection.vendor == "postgresql"
        and not connection.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS")
        and not connection.in_atomic_block
    ):
        with transaction.atomic(using=chats.db):
            yield from chats.iterator(chunk_size=100)
    else:
        yield from chats.iterator(chunk_size=100)


def finetune_lines(chats: Iterable[Chat] | QuerySet, *, path=chat_path) -> Iterator[str]:
    """One JSON line (no newline) per chat of ``chats`` that holds a reply: its path
    (``path(chat)``, by default :func:`chat_path`) as a fine-tuning example."""
    for chat in _each_chat(chats):
        example = finetune_example(
            path(chat), tools=tool_definitions(chat), instructions=_instructions(chat)
        )
        if example is not None:
            yield json.dumps(example, ensure_ascii=False, separators=(",", ":"))


def transcript_dict(chat: Chat, *, path=chat_path) -> dict[str, Any]:
    """The chat as a plain JSON-ready dict: its settings, its totals over every branch
    (``tokens``, ``cost`` in USD) and the messages of its path (``path(chat)``, by default
    :func:`chat_path`: the active path), each with ``id``, ``parent``, ``created_at``, the
    fields of ``Message.to_dict()``, its ``cost`` and its ``feedback`` ratings."""
    messages = []
    for message in path(chat):
        entry: dict[str, Any] = {
            "id": message.pk,
            "parent": message.parent_id,
            "created_at": message.created_at.isoformat() if message.created_at else None,
            **message.to_dict(),
        }
        cost = message.cost().total
        if cost is not None and message.role == "assistant":
            entry["cost"] = str(cost)
        ratings = [f.rating for f in message.feedback.all()]
        if ratings:
            entry["feedback"] = ratings
        messages.append(entry)
    total = chat.cost().total
    return {
        "id": chat.pk,
        "title": chat.title,
        "user": chat.user_id,
        "provider": chat.provider,
        "model_id": chat.model_id,
        "created_at": chat.created_at.isoformat() if chat.created_at else None,
        "tokens": chat.tokens.to_dict(),
        "cost": str(total) if total is not None else None,
        "messages": messages,
    }


def transcripts_json(chats: Iterable[Chat] | QuerySet, *, path=chat_path) -> Iterator[str]:
    """One JSON array of :func:`transcript_dict` per chat of ``chats``, in pieces to write
    or stream as they come (``"".join(...)`` is the whole document)."""
    yield "["
    for index, chat in enumerate(_each_chat(chats)):
        yield (
            ("," if index else "")
            + "\n"
            + json.dumps(
                transcript_dict(chat, path=path), cls=DjangoJSONEncoder, ensure_ascii=False
            )
        )
    yield "\n]\n"
