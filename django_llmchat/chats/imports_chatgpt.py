"""ChatGPT's data export (``conversations.json``) read into conversations: each
``mapping`` tree a chat's tree, tool messages calls and results, reasoning the next
reply's thinking."""

from __future__ import annotations

import json
from typing import Any

from ..models import Message, ToolCall
from .imports_conversation import (
    Conversation,
    ImportFormatError,
    _answer_every_call,
    _Node,
    _open_call,
    _shaped,
    _when,
)


def read_chatgpt(data: Any) -> list[Conversation]:
    """The conversations of ChatGPT's ``conversations.json`` (a list, or one conversation),
    not stored yet."""
    items = [data] if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ImportFormatError("conversations.json must hold a list of conversations")
    return [_shaped(_chatgpt_conversation, f"conversation {i}", c, i) for i, c in enumerate(items)]


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
        message = Message(role="assistant", content="", model_id=str(meta.get("model_slug") or ""))
        if carried:
            message.thinking_text = carried
        arguments = _chatgpt_arguments(content, text)
        call = ToolCall(call_id=key, name=str(recipient)[:255], arguments=arguments)
        out.nodes.append(_Node(message, parent=above, calls=[call], created_at=when))
        return len(out.nodes) - 1, ""
    if role == "tool":
        name = str(author.get("name") or "tool")
        return _chatgpt_result(out, name, text, key, above, when), carried
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


def _chatgpt_arguments(content: dict[str, Any], text: str) -> dict[str, Any]:
    """The arguments of a message sent to a tool: code (with its language), else its JSON
    object, else the text as ``_raw``."""
    if content.get("content_type") == "code":
        arguments: dict[str, Any] = {"code": text}
        if content.get("language") and content["language"] != "unknown":
            arguments["language"] = str(content["language"])
        return arguments
    try:
        parsed = json.loads(text)
    except (TypeError, ValueError):
        parsed = None
    return parsed if isinstance(parsed, dict) else {"_raw": text}


def _chatgpt_result(
    out: Conversation, name: str, text: str, key: str, above: int | None, when: Any
) -> int:
    """Add a tool's output to ``out`` as the result of the open call it answers (a call
    made up when none is open); the index of the result."""
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
    return len(out.nodes) - 1
