"""A stored chat as the AI SDK's ``UIMessage[]`` (``GET ui/chat/{id}/messages``), so a
``useChat({ id, messages })`` page shows the chat again after a reload.

The messages look as the UI message stream (:class:`~django_llmchat.api.ui.UIMessageStream`)
built them in the client: a user message per prompt (its text, then its attachments as
``file`` parts), and one assistant message per run, its steps separated by ``step-start``
parts, each step's ``reasoning``, ``text`` and ``tool-<name>`` parts, a tool result
joining the part of its call (``output-available``, ``output-error``, ``output-denied``)
and a call waiting for a decision as ``approval-requested``, which the SDK's
``addToolApprovalResponse`` answers. Ids are the ones the client saw: ``run-<run id>``
for a reply (the stream's ``start`` chunk), the id the client gave a user message, else
``msg-<message id>``. Summaries and system messages are not UI messages.

The messages are the chat's active path. A message with alternatives (the other replies
of its prompt, the other versions of an edited prompt) says so in ``metadata.branch``
(``index`` in ``siblings``, their ``count``, their client ``siblings`` ids and their
``storedMessageIds`` to switch to); a reply the requesting user rated carries its
``metadata.feedback`` (``rating``, ``comment``).

:func:`replay_chunks` turns an assistant message back into chunks, for a reconnect to a
run that waits for a decision: the client sees the approval request again.
"""

from __future__ import annotations

import base64
from typing import Any

from ...loop.transcript import call_item_ids
from ...models import Chat, Feedback, Message, Run, ToolCall
from ..ids import is_call_id
from ..serializers import attachment_url
from . import _error_text, _output, _usd_sum
from .paths import UI_MESSAGE_ID, Tree, branch_of, ui_id_of_user
from .stream import ToolCallIds, call_key

__all__ = [
    "UI_MESSAGE_ID",
    "client_raw",
    "replay_chunks",
    "stored_calls",
    "ui_messages",
    "waiting_reply",
]


def client_raw(client_id: Any) -> dict[str, Any] | None:
    """``Message.raw`` of a user message the client sent with its own id, so a reloaded
    chat names it the same; ``None`` for an id a call id could not be (control
    characters, over 255 characters), which is not kept."""
    return {UI_MESSAGE_ID: client_id} if is_call_id(client_id) else None


def _user(message: Message, request) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if message.content or not message.attachments.all():
        parts.append({"type": "text", "text": message.content})
    for att in message.attachments.all():
        url = attachment_url(att, request)
        if url is None:  # a storage without URLs: the bytes themselves
            url = f"data:{att.mime_type};base64,{base64.b64encode(att.read()).decode()}"
        parts.append(
            {"type": "file", "mediaType": att.mime_type, "url": url, "filename": att.filename}
        )
    return {"id": ui_id_of_user(message.pk, message.raw), "role": "user", "parts": parts}


def stored_calls(run_id: int) -> list[tuple[str, str]]:
    """``(call id, key)`` of the calls run ``run_id`` stored, in their order (the key:
    :func:`~.stream.call_key`), for a stream that continues the run."""
    out: list[tuple[str, str]] = []
    steps = Message.objects.filter(run_id=run_id, role="assistant").order_by("position", "id")
    for message in steps.prefetch_related("tool_calls"):
        calls = [call.call_id for call in message.tool_calls.all()]
        raw = message.raw if isinstance(message.raw, dict) else {}
        for call_id, item_id in zip(calls, call_item_ids(raw, calls), strict=True):
            out.append((call_id, call_key(call_id, item_id)))
    return out


class _EarlierCalls:
    """The chat's calls by call id (one query), for each reply's ``ToolCallIds.prior``:
    those before a run are those of earlier runs and those without a run
    (:func:`~.stream.prior_calls`, as the stream counts them)."""

    def __init__(self, chat: Chat):
        self.by_id: dict[str, list[tuple[int | None, int]]] = {}
        rows = ToolCall.objects.filter(chat=chat).values_list(
            "call_id", "message__run_id", "message_id"
        )
        for call_id, run_id, message_id in rows:
            self.by_id.setdefault(call_id, []).append((run_id, message_id))

    def before(self, run_id: int | None, message_id: int):
        """``prior`` of a reply: of run ``run_id``, else (a reply stored without a run) of
        the reply starting at ``message_id``."""

        def prior(key: str) -> int:
            rows = self.by_id.get(key, ())
            if run_id is not None:
                return sum(1 for run, _ in rows if run is None or run < run_id)
            return sum(1 for run, message in rows if run is None and message < message_id)

        return prior


class _Reply:
    """One assistant UI message: the steps (assistant messages) and tool results of a run."""

    def __init__(self, chat: Chat, message: Message, run: Run | None, earlier: _EarlierCalls):
        self.run = run
        self.run_id = message.run_id
        self.id = f"run-{run.pk}" if run is not None else f"msg-{message.pk}"
        self.parts: list[dict[str, Any]] = []
        self.metadata: dict[str, Any] = {"chatId": chat.pk}
        if run is not None:
            self.metadata["runId"] = str(run.pk)
        self.tokens: dict[str, int] = {}
        self.cost: str | None = None
        self.call_counts: dict[str, int] = {}  # call id -> the run's calls with it so far
        self.tool_ids = ToolCallIds(earlier.before(message.run_id, message.pk))

    def ids(self, call_id: str, item_id: str | None) -> tuple[str, str]:
        """``(toolCallId, approvalId)`` of the run's next stored call, as the stream
        gives them (:class:`~django_llmchat.api.ui.stream.UIMessageStream`): distinct for
        every call of the chat though a vendor repeats or omits ids
        (:class:`~.stream.ToolCallIds`), the approval id ``<call id>#<n>`` for the
        run's n-th call with one id."""
        n = self.call_counts[call_id] = self.call_counts.get(call_id, 0) + 1
        approval_id = call_id if n == 1 and call_id else f"{call_id}#{n}"
        return self.tool_ids.next(call_key(call_id, item_id)), approval_id

    def step(self, message: Message) -> None:
        self.parts.append({"type": "step-start"})
        if message.thinking_text:
            self.parts.append({"type": "reasoning", "text": message.thinking_text, "state": "done"})
        if message.content:
            self.parts.append({"type": "text", "text": message.content, "state": "done"})
        raw = message.raw if isinstance(message.raw, dict) else {}
        waiting = self.run is not None and self.run.status == Run.AWAITING_APPROVAL
        calls = list(message.tool_calls.all())
        # the Responses API streams a call by its item id
        item_ids = call_item_ids(raw, [call.call_id for call in calls])
        for call, item_id in zip(calls, item_ids, strict=True):
            tool_call_id, approval_id = self.ids(call.call_id, item_id)
            part: dict[str, Any] = {
                "type": f"tool-{call.name}",
                "toolCallId": tool_call_id,
                "state": "input-available",
                "input": call.arguments,
            }
            result = call.get_result()
            if result is not None:
                self.result(part, call, result, approval_id)
            elif call.approval:
                part["state"] = "approval-responded"
                part["approval"] = {"id": approval_id, "approved": call.approval == "approved"}
            elif waiting:
                part["state"] = "approval-requested"
                part["approval"] = {"id": approval_id}
            self.parts.append(part)
        self.metadata["storedMessageId"] = message.pk
        if message.model_id:  # the model that answered (a fallback's, when it did)
            self.metadata["modelId"] = message.model_id
            if message.provider:
                self.metadata["provider"] = message.provider
        if self.run is None:  # a reply stored without a run: its own counts
            for name, value in message.tokens.to_dict().items():
                self.tokens[name] = self.tokens.get(name, 0) + value
            rows = list(message.usages.all())
            if rows or message.supplied_cost is not None:
                self.cost = _usd_sum(self.cost, _usd(message.cost().total))

    @staticmethod
    def result(part: dict[str, Any], call, result: Message, approval_id: str) -> None:
        raw = result.raw if isinstance(result.raw, dict) else {}
        error = raw.get("error")
        if error is not None and isinstance(error, dict) and error.get("type") == "denied":
            part["state"] = "output-denied"
            part["approval"] = {"id": approval_id, "approved": False}
            return
        if error is not None:
            part["state"] = "output-error"
            part["errorText"] = _error_text(result.content)
        else:
            part["state"] = "output-available"
            part["output"] = _output(result.content)
        if call.approval == "approved":
            part["approval"] = {"id": approval_id, "approved": True}

    def to_dict(self) -> dict[str, Any]:
        metadata = dict(self.metadata)
        run = self.run
        if run is not None:
            metadata["status"] = run.status
            metadata["tokens"] = run.tokens.to_dict()
            cost = _usd(run.cost().total)
            if cost is not None:
                metadata["cost"] = cost
            if run.estimated:  # a stopped attempt's counts are ours
                metadata["estimated"] = True
        else:
            metadata["tokens"] = dict(self.tokens)
            if self.cost is not None:
                metadata["cost"] = self.cost
        return {"id": self.id, "role": "assistant", "parts": self.parts, "metadata": metadata}


def _usd(value) -> str | None:
    from ...values import usd_text

    return usd_text(value)


def ui_messages(chat: Chat, request=None) -> list[dict[str, Any]]:
    """The chat's active path as ``UIMessage[]``, with each message's alternatives and
    the requesting user's feedback, in a constant number of queries."""
    runs = {run.pk: run for run in Run.objects.filter(chat=chat).with_totals()}
    messages = (
        Message.objects.filter(chat=chat, summary_until__isnull=True, on_path=True)
        .exclude(role="system")
        .transcript()
        .order_by("position", "id")
    )
    out: list[dict[str, Any]] = []
    firsts: list[int] = []  # each UI message's first stored message
    reply: _Reply | None = None
    earlier = _EarlierCalls(chat)
    for message in messages:
        if message.role == "user":
            out.append(_user(message, request))
            firsts.append(message.pk)
            reply = None
        elif message.role == "assistant":
            if reply is None or reply.run_id != message.run_id:
                reply = _Reply(chat, message, runs.get(message.run_id), earlier)
                out.append(reply)  # type: ignore[arg-type]  # made a dict below
                firsts.append(message.pk)
            reply.step(message)
        # a tool message joins the part of its call (read with the call, above)
    done = [item.to_dict() if isinstance(item, _Reply) else item for item in out]
    if done:
        _branches_and_feedback(chat, done, firsts, request)
    return done


def _branches_and_feedback(
    chat: Chat, messages: list[dict[str, Any]], firsts: list[int], request
) -> None:
    """Each message's ``metadata.branch`` (when it has alternatives) and each reply's
    ``metadata.feedback`` (the requesting user's rating of one of its messages)."""
    tree = Tree(chat)
    user = getattr(request, "user", None)
    rated: dict[int, dict[str, Any]] = {}
    if user is not None and user.is_authenticated:
        for message_id, rating, comment in Feedback.objects.filter(
            message__chat=chat, user=user
        ).values_list("message_id", "rating", "comment"):
            rated[message_id] = {"rating": rating, "comment": comment}
    for message, first in zip(messages, firsts, strict=True):
        node = tree.node_of.get(first)
        if node is None:
            continue
        metadata: dict[str, Any] = {}
        branch = branch_of(tree, node)
        if branch is not None:
            metadata["branch"] = branch
        feedback = [rated[pk] for pk in node.messages if pk in rated]
        if feedback and node.role == "assistant":
            metadata["feedback"] = feedback[-1]
        if metadata:
            message["metadata"] = {**message.get("metadata", {}), **metadata}


def waiting_reply(chat: Chat, request=None) -> dict[str, Any] | None:
    """The assistant UI message of the chat's run waiting for a decision, if one is."""
    run = Run.objects.filter(chat=chat).order_by("-created_at", "-id").first()
    if run is None or run.status != Run.AWAITING_APPROVAL:
        return None
    found = [m for m in ui_messages(chat, request) if m["id"] == f"run-{run.pk}"]
    return found[-1] if found else None


def replay_chunks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant UI message as the UI message chunks that build it (``start`` with its
    id, each step, ``finish``): a reconnect to a run waiting for a decision replays it,
    ending with its ``tool-approval-request``."""
    out: list[dict[str, Any]] = []
    metadata = dict(message.get("metadata") or {})
    start: dict[str, Any] = {"type": "start", "messageId": message["id"]}
    start["messageMetadata"] = {k: metadata[k] for k in ("chatId", "runId") if k in metadata}
    out.append(start)
    counter = 0
    in_step = False
    for part in message["parts"]:
        kind = part["type"]
        if kind == "step-start":
            if in_step:
                out.append({"type": "finish-step"})
            out.append({"type": "start-step"})
            in_step = True
            continue
        counter += 1
        if kind in ("text", "reasoning"):
            part_id = f"{kind}-{counter}"
            out += [
                {"type": f"{kind}-start", "id": part_id},
                {"type": f"{kind}-delta", "id": part_id, "delta": part["text"]},
                {"type": f"{kind}-end", "id": part_id},
            ]
            continue
        if not kind.startswith("tool-"):
            continue
        name, tool_call_id = kind[len("tool-") :], part["toolCallId"]
        out.append(
            {
                "type": "tool-input-available",
                "toolCallId": tool_call_id,
                "toolName": name,
                "input": part.get("input"),
            }
        )
        state = part["state"]
        approval = part.get("approval") or {}
        if state == "approval-requested":
            out.append(
                {
                    "type": "tool-approval-request",
                    "approvalId": approval["id"],
                    "toolCallId": tool_call_id,
                }
            )
        elif state == "output-available":
            out.append(
                {
                    "type": "tool-output-available",
                    "toolCallId": tool_call_id,
                    "output": part["output"],
                }
            )
        elif state == "output-error":
            out.append(
                {
                    "type": "tool-output-error",
                    "toolCallId": tool_call_id,
                    "errorText": part["errorText"],
                }
            )
        elif state == "output-denied":
            out.append({"type": "tool-output-denied", "toolCallId": tool_call_id})
    if in_step:
        out.append({"type": "finish-step"})
    finish = {k: metadata[k] for k in metadata if k != "chatId"}
    reason = "tool-calls" if metadata.get("status") == Run.AWAITING_APPROVAL else "other"
    out.append({"type": "finish", "finishReason": reason, "messageMetadata": finish})
    return out
