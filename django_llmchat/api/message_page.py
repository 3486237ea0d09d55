"""A page of ``chats/{id}/messages/`` read as rows: its statements compiled once per
process (:mod:`django_llmchat.db.prepared`), its JSON built from tuples.

The page is what :class:`~django_llmchat.api.message_serializers.MessageSerializer`
shows of the same messages loaded with
:func:`~django_llmchat.api.message_serializers.load_messages`, to the byte
(``tests/api/test_message_page.py`` renders both), in the same statements: the page
(the chat's access check in it), the siblings, the tool calls with their results, the
attachments, the usage rows and, for a message priced without usage rows, the registry.
What the serializers do per field and per row (looking up each field's source, building
model instances, a nested serializer per tool call, token count and cost) is done here
once per page, or not at all: a column read as a tuple is already what the JSON shows.
"""

from __future__ import annotations

import copy
from collections import namedtuple
from decimal import Decimal
from typing import Any

from ..db.prepared import INT_ARG, PreparedIn, PreparedQuery
from ..models import Attachment, Message, ToolCall, Usage
from ..models.branches import siblings
from ..models.message import price_of
from ..models.usage import USAGE_COST_COLUMNS
from ..values import COST_FIELDS, TOKEN_FIELDS, Cost, Tokens
from .fields import cost_dict, tokens_dict
from .message_serializers import AttachmentSerializer, MessageSerializer, registry_rows
from .permissions import chats_of, sees_every_chat

__all__ = ["MessageRow", "page_json", "page_rows"]

# a message of the page: what the list shows, as the attributes ``siblings()``, the keyset
# pagination and ``Tokens.from_object`` read, each with the column it is read from
_READ = {
    "pk": "id",
    "role": "role",
    "content": "content",
    "model_id": "model_id",
    "provider": "provider",
    "finish_reason": "finish_reason",
    "thinking_text": "thinking_text",
    "tool_call_id": "parent_tool_call__call_id",
    "citations": "citations",
    "server_tool_calls": "server_tool_calls",
    **{name: name for name in TOKEN_FIELDS},
    "supplied_cost": "supplied_cost",
    "cache_boundary": "cache_boundary",
    "summary_until_id": "summary_until",
    "parent_id": "parent",
    "on_path": "on_path",
    "created_at": "created_at",
    "position": "position",
    "chat_id": "chat",
}
MessageRow = namedtuple("MessageRow", _READ)
PAGE_COLUMNS = tuple(_READ.values())

# compiled page statements: (every chat, every branch, backwards, from a cursor, size,
# paginator class); sizes are bounded by the paginator, the number of them kept too
_PAGES: dict[tuple, PreparedQuery] = {}
PAGES_KEPT = 512


def page_rows(paginator, user, chat_id: int, every_branch: bool, position, backwards, size):
    """Up to ``size + 1`` messages of chat ``chat_id`` that ``user`` may see, as
    :class:`MessageRow`, in the order of ``paginator``'s window from ``position`` (the
    ``fetch`` of :meth:`~django_llmchat.api.pagination.KeysetPagination.paginate`)."""
    if not user or not user.is_authenticated:
        return []
    every = sees_every_chat(user)
    key = (every, every_branch, backwards, position is not None, size, type(paginator))
    query = _PAGES.get(key)
    if query is None:
        query = _page_query(type(paginator), *key[:-1])
        if len(_PAGES) < PAGES_KEPT:
            _PAGES[key] = query
    args = [chat_id] + ([] if every else [user.pk]) + (list(position) if position else [])
    return [MessageRow._make(row) for row in query.values(*args)]


def _page_query(pagination, every, every_branch, backwards, after, size) -> PreparedQuery:
    def build(chat_id, *rest):
        owner = None if every else rest[0]
        start = tuple(rest[-2:]) if after else None
        rows = Message.objects.filter(chat__in=chats_of(owner).filter(pk=chat_id))
        if not every_branch:
            rows = rows.filter(on_path=True)
        window = pagination().window(rows, start, backwards)
        return window.values_list(*PAGE_COLUMNS)[: size + 1]

    count = 1 + (not every) + 2 * after
    return PreparedQuery(build, [INT_ARG - n for n in range(count)])


_CALLS = PreparedIn(
    lambda ids: ToolCall.objects.filter(message_id__in=ids).values_list(
        "message_id", "call_id", "name", "arguments", "approval", "result__id", "result__content"
    )
)
ATTACHMENT_COLUMNS = ("id", "message_id", "file", "filename", "mime_type", "size", "sha256")
_ATTACHMENTS = PreparedIn(
    lambda ids: Attachment.objects.filter(message_id__in=ids).values_list(*ATTACHMENT_COLUMNS)
)
_USAGES = PreparedIn(
    lambda ids: Usage.objects.filter(message_id__in=ids).values_list(
        "message_id",
        *TOKEN_FIELDS,
        *(USAGE_COST_COLUMNS[part] for part in COST_FIELDS),
        "estimated",
    )
)
_TOKENS_END = 1 + len(TOKEN_FIELDS)
_COSTS_END = _TOKENS_END + len(COST_FIELDS)

_FIELDS: dict[str, Any] = {}


def _field(name: str):
    """The bound field ``name`` of a :class:`MessageSerializer` (made once): its
    rendering, where it is more than the value itself."""
    if not _FIELDS:
        _FIELDS.update(MessageSerializer().fields)
    return _FIELDS[name]


def page_json(rows: list[MessageRow], request) -> list[dict[str, Any]]:
    """``rows`` as ``MessageSerializer(many=True)`` shows them, after ``load_messages``."""
    if not rows:
        return []
    ids = [row.pk for row in rows]
    alternatives = siblings(rows)
    calls: dict[int, list] = {}
    found = _CALLS.values(ids)
    for message_id, call_id, name, arguments, approval, result_id, result_content in found:
        calls.setdefault(message_id, []).append(
            {
                "id": call_id,
                "name": name,
                "arguments": arguments,
                "approval": approval,
                "result": None
                if result_id is None
                else {"message_id": result_id, "content": result_content},
            }
        )
    attachments = _attachments(ids, request)
    usages: dict[int, list] = {}
    for usage in _USAGES.values(ids):
        usages.setdefault(usage[0], []).append(usage)
    registry = _registry_for(rows, usages)
    citations = _field("citations").to_representation
    server_tool_calls = _field("server_tool_calls").to_representation
    created_at = _in_current_timezone(_field("created_at")).to_representation
    out = []
    for row in rows:
        pk = row.pk
        spent = usages.get(pk)
        if spent:
            tokens = sum((Tokens(*u[1:_TOKENS_END]) for u in spent), Tokens())
        else:
            tokens = Tokens.from_object(row)
        if row.role != "assistant" and tokens.is_empty:
            cost = {}
        elif spent:
            cost = cost_dict(sum((Cost(*u[_TOKENS_END:_COSTS_END]) for u in spent), Cost()))
        elif row.supplied_cost is not None:
            cost = cost_dict(Cost(total=Decimal(row.supplied_cost)))
        else:
            info = registry.get(row.model_id)
            cost = cost_dict(price_of(tokens, info, row.model_id, row.provider))
        out.append(
            {
                "id": pk,
                "role": row.role,
                "content": row.content,
                "model_id": row.model_id,
                "provider": row.provider,
                "finish_reason": row.finish_reason,
                "thinking": row.thinking_text or None,
                "tool_calls": calls.get(pk, []),
                "tool_call_id": row.tool_call_id,
                "citations": None if row.citations is None else citations(row.citations),
                "server_tool_calls": None
                if row.server_tool_calls is None
                else server_tool_calls(row.server_tool_calls),
                "attachments": attachments.get(pk, []),
                "tokens": tokens_dict(tokens),
                "cost": cost,
                "estimated": any(u[_COSTS_END] for u in spent) if spent else False,
                "cache_until_here": bool(row.cache_boundary),
                "summary_until": row.summary_until_id,
                "parent": row.parent_id,
                "siblings": alternatives[pk],
                "on_path": bool(row.on_path),
                "created_at": None if row.created_at is None else created_at(row.created_at),
            }
        )
    return out


def _in_current_timezone(field):
    """The ``DateTimeField`` ``field`` with the time zone it renders in looked up now (its
    own, or the current one), not once per row."""
    if hasattr(field, "timezone"):
        return field
    page_field = copy.copy(field)
    page_field.timezone = field.default_timezone()
    return page_field


def _attachments(ids: list[int], request) -> dict[int, list]:
    """The page's attachments as :class:`AttachmentSerializer` shows them (its URL is the
    file storage's: the row becomes an ``Attachment``)."""
    found: dict[int, list] = {}
    rows = _ATTACHMENTS.values(ids)
    if rows:
        render = AttachmentSerializer(context={"request": request}).to_representation
        for values in rows:
            attachment = Attachment(**dict(zip(ATTACHMENT_COLUMNS, values, strict=True)))
            found.setdefault(attachment.message_id, []).append(render(attachment))
    return found


def _registry_for(rows: list[MessageRow], usages: dict[int, list]) -> dict[str, Any]:
    """The registry rows of the models of the messages priced without usage rows."""
    model_ids = {
        row.model_id
        for row in rows
        if row.model_id and row.pk not in usages and row.supplied_cost is None
    }
    return registry_rows(model_ids) if model_ids else {}
