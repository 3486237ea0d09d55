"""Storing what a run's step produced, each in one transaction fenced by the run's
attempt: the reply with its tool calls and the link to its usage rows, a history summary,
the tool results; and the usage ledger's attempts (a pending row before each provider
call, closed after it). The request side, the messages a run sends, is
:mod:`django_llmchat.loop.transcript`."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from ..conf import settings
from ..db.prepared import (
    Arg,
    PreparedInsert,
    PreparedUpdate,
    known_relations,
    mark_unsaved,
    new_instance,
)
from ..errors import InputError, RunLostError
from ..inputs import check_attachment
from ..models import Attachment, Chat, Message, Run, ToolCall, Usage
from ..providers.types import ProviderResponse
from ..tools import ToolResult, describe

logger = logging.getLogger(__name__)

__all__ = [
    "CheckedResult",
    "checked_result",
    "closed_attempt",
    "open_attempt",
    "record_failed_attempts",
    "save_step",
    "save_summary",
    "save_tool_results",
    "usage_row",
    "write_attempts",
]

# The hot-path writes: a reply costs the same few statements, none of them compiled twice.
_INSERT_MESSAGE = PreparedInsert(Message)
_INSERT_USAGE = PreparedInsert(Usage)
_TOUCHED = PreparedUpdate(Chat, updated_at=Now())


def usage_row(
    chat: Chat,
    *,
    provider: str,
    model_id: str,
    status: str,
    tokens=None,
    started: float,
    first_token: float | None = None,
    error: str = "",
    run_id: int | None = None,
) -> Usage:
    """An unsaved Usage row for one attempt, with its cost frozen now."""
    row = new_instance(
        Usage,
        chat=chat,
        user_id=chat.user_id,  # the spending limits sum a user's rows by this column
        run_id=run_id,
        provider=provider,
        model_id=model_id,
        status=status,
        duration_ms=int((time.monotonic() - started) * 1000),
        first_token_ms=int((first_token - started) * 1000) if first_token else None,
        error=error[:4000],
    )
    if tokens is not None:
        row.tokens = tokens
    row.freeze_cost()
    return row


# what closing an attempt writes over its pending row
_ATTEMPT_COLUMNS = (
    "status",
    "provider",
    "model_id",
    "message_id",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "thinking_tokens",
    "input_cost",
    "output_cost",
    "cache_read_cost",
    "cache_write_cost",
    "thinking_cost",
    "total_cost",
    "duration_ms",
    "first_token_ms",
    "error",
    "estimated",
)


def open_attempt(row: Usage) -> Usage:
    """Write the Usage row of an attempt about to call its provider (``pending``, with
    what is known: the estimated input tokens and their cost, marked ``estimated``), so
    an attempt whose process dies is still on the ledger (the recovery marks it
    ``lost``). One INSERT, in its own transaction: it stays whatever happens next."""
    row.status = Usage.PENDING
    row.estimated = True
    _INSERT_USAGE.save(row)
    return row


def closed_attempt(pending: Usage | None, row: Usage) -> Usage:
    """``row`` (an ended attempt, unsaved) as the close of ``pending`` (its open row):
    written over it by :func:`write_attempts`."""
    if pending is not None and pending.pk is not None:
        row.pk, row.created_at = pending.pk, pending.created_at
        row.closes_pending = True
    return row


_TEXT_COLUMNS = ("status", "provider", "model_id", "error")
_VALUES = {
    name: Arg(str if name in _TEXT_COLUMNS else Decimal if name.endswith("_cost") else int)
    for name in _ATTEMPT_COLUMNS
    if name != "estimated"
}
# by ``estimated``: the vendor's counts, or ours (an attempt stopped before its response)
_CLOSE_ATTEMPT = {flag: PreparedUpdate(Usage, estimated=flag, **_VALUES) for flag in (False, True)}


def write_attempts(rows: list[Usage]) -> None:
    """Store ended attempts: a row closing a pending one is written over it (one UPDATE,
    compiled once), others are inserted. A row keeps its ``estimated`` flag: ``True``
    for an attempt billed by our estimate (see :meth:`~django_llmchat.loop.attempts.
    ProviderAttempts.billed`)."""
    new = [row for row in rows if not getattr(row, "closes_pending", False)]
    for row in rows:
        if getattr(row, "closes_pending", False):
            row.estimated = bool(row.estimated)
            values = {name: getattr(row, name) for name in _ATTEMPT_COLUMNS if name != "estimated"}
            _CLOSE_ATTEMPT[row.estimated].run(row.pk, **values)
    if len(new) == 1:
        _INSERT_USAGE.save(new[0])
    elif new:
        Usage.objects.bulk_create(new)


def record_failed_attempts(rows: list[Usage]) -> None:
    write_attempts(rows)


def save_step(
    chat: Chat,
    response: ProviderResponse,
    *,
    provider: str,
    model_id: str,
    content: str,
    usages: list[Usage],
    execution,
    final: bool = False,
    parent_id: int | None = None,
    title: Any = None,
) -> tuple[Message, list[ToolCall]]:
    """Write one provider response: the assistant message, its tool calls, citations and
    the link to its usage rows, in ONE transaction, fenced by the run's ``execution``
    (a run this process lost stores nothing). ``final``: the run ends with this response,
    so it is marked succeeded in the same transaction. Returns the message and its tool
    calls. ``parent_id``: the message the step answers (the last of the history sent).
    ``title``: a :class:`~django_llmchat.chats.titles.ReplyTitle`, written on the chat with
    a final response when the chat is still untitled and its title is not the user's
    (``chat`` follows)."""
    raw: dict[str, Any] = {}
    if isinstance(response.raw, dict):
        raw["response"] = response.raw
    if response.reasoning_items:
        raw["reasoning_items"] = response.reasoning_items
    item_ids = {tc.call_id: tc.item_id for tc in response.tool_calls if tc.item_id}
    if item_ids:
        raw["item_ids"] = item_ids
        raw["call_item_ids"] = [tc.item_id for tc in response.tool_calls]
    message = new_instance(
        Message,
        chat=chat,
        role="assistant",
        content=content,
        model_id=response.model_id or model_id,
        provider=provider,
        finish_reason=response.message_finish_reason,
        citations=list(response.citations),
        server_tool_calls=list(response.server_tool_calls),
        raw=raw or None,
        run_id=execution.pk,
        parent_id=parent_id,
    )
    message.placed = True
    message.thinking = response.thinking
    pair = (title.text, title.source) if title is not None else None
    if final and not response.tool_calls and execution.store_last_step(message, usages, pair):
        known_relations(message, tool_calls=[], attachments=[], usages=usages)
        if execution.titled:
            title.written(chat)
        return message, []  # stored with the run's end in one call (PostgreSQL)
    try:
        with transaction.atomic():
            if final:
                execution.lock_chat()  # first: the run's end changes the chat's status
            _INSERT_MESSAGE.save(message)
            calls = _store_calls(chat, message, response)
            for row in usages:
                row.message = message
            write_attempts(usages)
            if final:  # the title in the chat's update at the run's end
                execution.step_stored(final_status=Run.SUCCEEDED, title=pair)
            else:
                execution.step_stored()
                _TOUCHED.run(chat.pk)
    except BaseException:
        # rolled back (the run lost, the database gone): the rows are as they were, so a
        # caller that still bills them links them to no message that was never written
        for row in usages:
            row.message = None
            if not getattr(row, "closes_pending", False):
                mark_unsaved(row)
        raise
    if final and execution.titled:
        title.written(chat)
    known_relations(message, tool_calls=calls, attachments=[], usages=usages)
    return message, calls


def _store_calls(chat: Chat, message: Message, response: ProviderResponse) -> list[ToolCall]:
    calls = [
        ToolCall(
            chat=chat,
            message=message,
            call_id=tc.call_id,
            name=tc.name,
            arguments=tc.arguments,
            thought_signature=tc.thought_signature or "",
        )
        for tc in response.tool_calls
    ]
    if calls:
        ToolCall.objects.bulk_create(calls)
    return calls


def save_summary(
    chat: Chat,
    *,
    content: str,
    until_id: int,
    provider: str,
    model_id: str,
    usage: Usage,
    execution=None,
) -> Message:
    """Write a summary of the history up to message ``until_id`` with the usage row of the
    call that wrote it, in one transaction (fenced by the run's ``execution`` when
    given). The summarized messages stay as they are."""
    message = Message(
        chat=chat,
        role="system",
        content=content,
        summary_until_id=until_id,
        provider=provider,
        model_id=model_id,
        run_id=execution.pk if execution is not None else None,
    )
    with transaction.atomic():
        _INSERT_MESSAGE.save(message)
        usage.message = message
        write_attempts([usage])
        if execution is not None:
            execution.fence()
    known_relations(message, tool_calls=[], attachments=[], usages=[usage])
    return message


# -- tool results: one gate -------------------------------------------------------------
@dataclass
class CheckedResult:
    """A tool's result as it is stored and sent (:func:`checked_result`): its ``text``,
    the files that passed the upload rules as ``(filename, bytes, type)``, and ``raw``,
    what the tool message records of it (the error, the cut, the files refused)."""

    text: str
    attachments: list[tuple[str, bytes, str]]
    raw: dict[str, Any] | None


def _marked(text: str, limit: int | None) -> tuple[str, dict[str, int] | None]:
    """``text`` cut to ``limit`` characters, followed by a marker saying so."""
    if not limit or len(text) <= limit:
        return text, None
    marker = f"\n[truncated: {len(text):,} characters, {limit:,} kept]"
    return text[:limit] + marker, {"characters": len(text), "kept": limit}


def _storable(text: str) -> str:
    """Text every database stores: NUL characters (PostgreSQL refuses them) and lone
    surrogates (no encoding holds them) become replacement characters."""
    text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _file_shape(item: Any) -> bool:
    return (
        isinstance(item, tuple | list)
        and len(item) in (2, 3)
        and isinstance(item[0], str)
        and isinstance(item[1], bytes | bytearray)
        and (len(item) == 2 or item[2] is None or isinstance(item[2], str))
    )


def checked_result(name: str, result: Any) -> CheckedResult:
    """What the result of tool ``name`` is stored and sent as: the one gate every tool
    result (Python, MCP, an error written by the library) goes through.

    - Its text is at most ``LLMCHAT["TOOL_RESULT_MAX_CHARS"]`` characters: a longer one is
      cut, with a marker the model reads (``[truncated: 10,485,760 characters, 100,000
      kept]``) and ``raw["truncated"]`` on the row; an error keeps its JSON shape, its
      message cut.
    - Its files pass the rules of a user's upload
      (:func:`~django_llmchat.inputs.check_attachment`: sniffed type,
      ``ALLOWED_ATTACHMENT_TYPES``, ``MAX_ATTACHMENT_SIZE``; at most ``MAX_ATTACHMENTS``):
      a refused file is never stored, a line of the text says why
      (``[file evil.html refused: type text/html is not allowed ...]``) and
      ``raw["refused"]`` lists them.
    - A result that cannot be stored (not JSON-serialisable, files that are not
      ``(filename, bytes[, type])``) is an ``execution_error`` result saying so.
    """
    if not isinstance(result, ToolResult):
        result = ToolResult(content=result if result is not None else "")
    limit = settings.TOOL_RESULT_MAX_CHARS
    try:
        items = list(result.attachments or [])
        bad = next((n for n, item in enumerate(items, 1) if not _file_shape(item)), None)
        if bad is not None:
            raise TypeError(f"attachment {bad} is not (filename, bytes[, MIME type])")
        if result.is_error:  # an error's text is its JSON payload, its message cut
            if _error_payload(result.content):
                error = dict(result.content["error"])
            else:
                error = {"type": result.error_type or "execution_error", "message": result.text}
            message, cut = _marked(_storable(str(error["message"])), limit)
            error["message"] = message
            text = json.dumps({"error": error}, ensure_ascii=False)
        else:
            error = None
            text, cut = _marked(_storable(result.text), limit)
    except Exception as exc:  # the model hears about it; the run goes on
        logger.warning("tool %s: its result cannot be stored (%s)", name, type(exc).__name__)
        return checked_result(
            name,
            ToolResult.error(
                "execution_error", f"the result of {name} cannot be stored: {describe(exc)}"
            ),
        )
    files: list[tuple[str, bytes, str]] = []
    refused: list[dict[str, str]] = []
    most = settings.MAX_ATTACHMENTS
    for item in items:
        filename = os.path.basename(str(item[0]).replace("\\", "/"))[:200] or "attachment"
        if most is not None and len(files) >= most:
            reason = f"too many files (at most {most})"
        else:
            try:
                files.append(check_attachment(tuple(item)))
                continue
            except InputError as exc:
                reason = exc.reason.removeprefix(f"{filename}: ")
        refused.append({"filename": _storable(filename), "reason": reason})
    raw: dict[str, Any] = {}
    if error is not None:
        raw["error"] = error
    if cut is not None:
        raw["truncated"] = cut
    if refused:
        raw["refused"] = refused
        notes = "\n".join(f"[file {r['filename']} refused: {r['reason']}]" for r in refused)
        if error is not None:
            error["message"] += "\n" + notes
            text = json.dumps({"error": error}, ensure_ascii=False)
        else:
            text = f"{text}\n{notes}" if text else notes
    return CheckedResult(text=text, attachments=files, raw=raw or None)


def _error_payload(content: Any) -> bool:
    return (
        isinstance(content, dict)
        and set(content) == {"error"}
        and isinstance(content["error"], dict)
        and "message" in content["error"]
    )


def save_tool_results(
    chat: Chat,
    results: list[tuple[ToolCall, ToolResult]],
    execution=None,
    *,
    run_id: int | None = None,
    parent_id: Any = None,
) -> list[Message]:
    """Write the tool messages answering ``results``' calls, in one transaction (fenced by
    the run's ``execution`` when given). They follow one another on the path, the first
    after ``parent_id`` (the path's last message; read when not given).

    Each result passes :func:`checked_result` (bounded text, files
    through the upload rules) and every call gets its message: when storing fails (the
    storage refuses a file, the database a row), the results with files are stored as
    error results instead, and if that fails too, every one; only a run that is no longer
    this process's (:class:`~django_llmchat.errors.RunLostError`) or a database that
    refuses even those stores nothing."""
    if not results:
        return []
    if parent_id is None:
        from ..models.branches import leaf_id

        parent_id = leaf_id(chat.pk)
    checked = [(call, checked_result(call.name, result)) for call, result in results]
    run = execution.pk if execution is not None else run_id
    problem = ""
    for fallback in (None, "files", "all"):
        if fallback is not None:
            checked = [
                (call, _unstored(call, problem))
                if fallback == "all" or result.attachments
                else (call, result)
                for call, result in checked
            ]
        try:
            return _store_results(chat, checked, execution, run, parent_id)
        except RunLostError:
            raise
        except Exception as exc:
            if fallback == "all":
                raise
            problem = type(exc).__name__
            logger.warning(
                "chat %s: tool results could not be stored (%s); storing errors instead",
                chat.pk,
                problem,
            )
    raise AssertionError("unreachable")  # pragma: no cover


def _unstored(call: ToolCall, problem: str) -> CheckedResult:
    return checked_result(
        call.name,
        ToolResult.error(
            "execution_error", f"the result of {call.name} could not be stored ({problem})"
        ),
    )


def _store_results(
    chat: Chat,
    checked: list[tuple[ToolCall, CheckedResult]],
    execution,
    run_id: int | None,
    parent_id: Any,
) -> list[Message]:
    messages = []
    for call, result in checked:
        m = Message(
            chat=chat,
            role="tool",
            content=result.text,
            parent_tool_call=call,
            raw=result.raw,
            run_id=run_id,
            parent_id=parent_id if not messages else None,
        )
        m.placed = True
        messages.append(m)
    atts: list[Attachment] = []
    try:
        with transaction.atomic():
            Message.objects.bulk_create(messages)
            if len(messages) > 1:  # each result follows the one before it
                for before, m in zip(messages, messages[1:], strict=False):
                    m.parent_id = before.pk
                Message.objects.bulk_update(messages[1:], ["parent"])
            for m, (_call, result) in zip(messages, checked, strict=True):
                for filename, data, mime in result.attachments:
                    atts.append(
                        Attachment.objects.create_from_bytes(
                            message=m, data=data, filename=filename, mime_type=mime
                        )
                    )
            if execution is not None:
                execution.fence()
            _TOUCHED.run(chat.pk)
    except BaseException:
        for att in atts:  # the rows are rolled back: their files go too
            try:
                att.file.delete(save=False)
            except Exception:
                logger.exception("could not delete the file of an unstored tool result")
        raise
    for m in messages:
        known_relations(
            m, tool_calls=[], attachments=[a for a in atts if a.message_id == m.pk], usages=[]
        )
    if any(m.pk is None for m in messages):  # backends without RETURNING on bulk insert
        raise RuntimeError("bulk_create did not set primary keys")
    return messages
