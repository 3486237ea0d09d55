"""The transcript read: one SQL statement (per database vendor) returning a chat's
active path after a given message, with the count and highest id of the whole path, as
plain rows with the encrypted columns decrypted."""

from __future__ import annotations

from django.db import connections, router

from ..db.prepared import plain_rows, protected_columns
from ..models import Attachment, Chat, Message, ToolCall
from ..models.message import QUEUED_POSITION

MESSAGE_COLUMNS = (
    "id",
    "role",
    "content",
    "model_id",
    "provider",
    "thinking_text",
    "thinking_signature",
    "raw",
    "cache_boundary",
    "parent_tool_call_id",
    "summary_until_id",
    "position",
)


def _history_sql(connection) -> str:
    """The transcript read: the number of saved messages, joined to those after a given
    ``(position, id)`` with whether each has tool calls and attachments."""
    qn = connection.ops.quote_name
    message = qn(Message._meta.db_table)
    calls = qn(ToolCall._meta.db_table)
    files = qn(Attachment._meta.db_table)
    fields = {f.name: f for f in Message._meta.get_fields() if getattr(f, "column", None)}
    by_attname = {f.attname: f for f in fields.values()}

    def column(attname: str) -> str:
        return qn(by_attname[attname].column)

    chat, position, pk = column("chat_id"), column("position"), column("id")
    call_message = qn(ToolCall._meta.get_field("message").column)
    file_message = qn(Attachment._meta.get_field("message").column)
    on_path = column("on_path")
    selected = ", ".join(f"m.{column(name)}" for name in MESSAGE_COLUMNS)
    return (
        f"SELECT a.n, a.top, a.kept, {selected}, "
        f"EXISTS (SELECT 1 FROM {calls} c WHERE c.{call_message} = m.{pk}), "
        f"EXISTS (SELECT 1 FROM {files} f WHERE f.{file_message} = m.{pk}) "
        f"FROM (SELECT COUNT(*) AS n, MAX({pk}) AS top, "
        f"SUM(CASE WHEN {pk} = %s THEN 1 ELSE 0 END) AS kept FROM {message} "
        f"WHERE {chat} = %s AND {on_path} = %s AND {position} < %s) a "
        f"LEFT JOIN {message} m ON m.{chat} = %s AND m.{on_path} = %s AND m.{position} < %s "
        f"AND (m.{position} > %s OR (m.{position} = %s AND m.{pk} > %s)) "
        f"ORDER BY m.{position}, m.{pk}"
    )


_sql: dict[str, str] = {}
_FIELDS_BY_ATTNAME = {
    f.attname: f for f in Message._meta.get_fields() if getattr(f, "column", None)
}
_PLAIN = protected_columns(
    [None, None, None, *(_FIELDS_BY_ATTNAME[name] for name in MESSAGE_COLUMNS), None, None]
)
"""The encrypted columns of the transcript read (content, thinking, raw): decrypted as the
fields' ``from_db_value`` does, so a run never sends a ciphertext."""


def _read(chat: Chat, after: tuple[int, int], anchor: int | None = None) -> list[tuple]:
    """The chat's active path after ``after`` (``(position, id)``), with the count and
    highest id of the whole path and whether ``anchor`` (a message id) is still on it;
    the encrypted columns decrypted (the form the database returns: ``raw`` as JSON text)."""
    using = router.db_for_read(Message)
    connection = connections[using]
    sql = _sql.get(connection.vendor)
    if sql is None:
        sql = _sql[connection.vendor] = _history_sql(connection)
    # prompts queued behind the run wait for their own turn
    params = [
        anchor or 0,
        chat.pk,
        True,
        QUEUED_POSITION,
        chat.pk,
        True,
        QUEUED_POSITION,
        after[0],
        after[0],
        after[1],
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return plain_rows(cursor.fetchall(), _PLAIN)
