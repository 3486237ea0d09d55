"""The Vercel AI SDK's UI message stream protocol (v1), as the ``ai`` npm package speaks it:
``POST ui/chat`` takes the body of its ``DefaultChatTransport`` and answers with UI
message chunks; ``GET ui/chat/{id}/stream`` resumes the run in progress (``204`` when
none is).

:class:`UIMessageStream` turns the library's stream events into chunks; it is used for
a run streamed in the response and for a run followed from the chat's event stream, so
both say the same thing. The server's transcript is the truth: of the messages a client
sends only the new user message (or its answers to tool approvals) is read.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpResponse, StreamingHttpResponse
from rest_framework import serializers
from rest_framework.exceptions import ValidationError

from .. import inputs, runs, streams
from ..conf import settings
from ..errors import ChatBusyError, InputError
from ..events import (
    FinishReasonDone,
    GuardrailTripwire,
    ReasoningDelta,
    ReasoningDone,
    RunFinished,
    RunStarted,
    StepFinished,
    StreamEvent,
    TextDelta,
    TextDone,
    ToolApprovalRequest,
    ToolCallDelta,
    ToolCallDone,
    ToolResultDone,
    WebSearchDone,
)
from ..models import Chat, Run, ToolCall
from .errors import Conflict, invalid
from .ids import CLIENT_ID_PATTERN, is_call_id
from .serializers import StrictCharField
from .sse import InlineRun

__all__ = [
    "UI_STREAM_HEADERS",
    "UIChatSerializer",
    "UIMessageStream",
    "UIRun",
    "follow_chunks",
    "ui_response",
]

logger = logging.getLogger("django_llmchat.api")

UI_STREAM_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
    "x-vercel-ai-ui-message-stream": "v1",
}
DONE = "data: [DONE]\n\n"

# the AI SDK's finish reasons, from the library's normalized ones
_FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content-filter",
    "tool_calls": "tool-calls",
    "error": "error",
}
_CLIENT_ID = re.compile(CLIENT_ID_PATTERN)
_DATA_URL = re.compile(r"^data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*?);base64,")


def chunk(data: dict[str, Any]) -> str:
    """One SSE frame of the protocol: ``data: <JSON>`` (no event name, no id)."""
    return f"data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n"


def _usd_sum(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a if b is None else b
    try:
        return str(Decimal(a) + Decimal(b))
    except InvalidOperation:
        return None


# -- events to chunks -------------------------------------------------------------------------
class UIMessageStream:
    """Turns one run's stream events into UI message chunks (dicts), keeping what the
    protocol needs: open text and reasoning parts, steps, the ids of tool calls.

    ``message_id`` is the UI message the chunks fill (``run-<run id>`` unless given: the
    client's assistant message when a run continues after approvals); ``tool_ids`` maps
    stored call ids to the ``toolCallId`` a client already knows, ``known_calls`` lists
    ``(call id, tool name, toolCallId)`` of those calls in their order (for call ids a
    vendor repeated) and ``run_calls`` the call ids the run stored before this stream.

    Every stored call gets its own ``toolCallId`` (a vendor may repeat an id, or give
    none): the call's item id, else its call id when the run has no other call with it,
    else ``<call id>-<n>`` (``call-<n>`` without an id). Its ``approvalId`` is the call
    id, or ``<call id>#<n>`` for the run's n-th call with that id (n > 1), which
    :func:`decide_all` maps back to exactly that call. Results and approval requests
    name only a call id: they go to the run's calls with it in their order (by tool
    name first)."""

    def __init__(
        self,
        *,
        chat_id: int | None = None,
        message_id: str | None = None,
        tool_ids: dict[str, str] | None = None,
        known_calls: list[tuple[str, str, str]] | None = None,
        run_calls: list[str] | None = None,
    ):
        self.chat_id = chat_id
        self.message_id = message_id
        self.started = False
        self.ended = False
        self.errored = False
        self.in_step = False
        self.step_stored = False  # the open step was stored; tool results still join it
        self.text: str | None = None  # the open text part
        self.reasoning: str | None = None
        self.step_text = False  # the step streamed text (a TextDone then repeats it)
        self.step_reasoning = False
        self.counter = 0
        self.items: dict[str, str] = {}  # a call's item id -> its toolCallId
        self.inputs: set[str] = set()  # toolCallIds whose tool-input-start was sent
        self.tool_ids: dict[str, str] = dict(tool_ids or {})  # call id -> toolCallId
        # call id -> [(tool name, toolCallId, approvalId)] of calls still to be answered
        self.waiting: dict[str, list[tuple[str, str, str]]] = {}
        for call_id, name, known in known_calls or ():
            self.waiting.setdefault(call_id, []).append((name, known, call_id))
        self.call_counts: dict[str, int] = {}  # call id -> the run's calls with it
        for call_id in run_calls or ():
            self.call_counts[call_id] = self.call_counts.get(call_id, 0) + 1
        self.used: set[str] = set()  # toolCallIds given to calls
        self.finish_reason: str | None = None
        self.run_id: str | None = None
        self.tokens: dict[str, int] = {}
        self.cost: str | None = None

    # -- helpers
    def _next(self, kind: str) -> str:
        self.counter += 1
        return f"{kind}-{self.counter}"

    def _start(self, run_id: str | None = None) -> list[dict]:
        if self.started:
            return []
        self.started = True
        if self.message_id is None:
            self.message_id = f"run-{run_id}" if run_id else self._next("message")
        metadata: dict[str, Any] = {}
        if self.chat_id is not None:
            metadata["chatId"] = self.chat_id
        if run_id:
            metadata["runId"] = run_id
        out: dict[str, Any] = {"type": "start", "messageId": self.message_id}
        if metadata:
            out["messageMetadata"] = metadata
        return [out]

    def _close_parts(self) -> list[dict]:
        out = []
        if self.text is not None:
            out.append({"type": "text-end", "id": self.text})
            self.text = None
        if self.reasoning is not None:
            out.append({"type": "reasoning-end", "id": self.reasoning})
            self.reasoning = None
        return out

    def _content(self, *, tool_output: bool = False) -> list[dict]:
        """Before a content chunk: the message has started and a step is open (a stored
        step stays open for its tool results only)."""
        out = self._start()
        if self.in_step and self.step_stored and not tool_output:
            out += self._close_parts()
            out.append({"type": "finish-step"})
            self.in_step = False
        if not self.in_step:
            out.append({"type": "start-step"})
            self.in_step, self.step_stored = True, False
            self.step_text = self.step_reasoning = False
        return out

    def _tool_id(self, call_id: str) -> str:
        return self.tool_ids.get(call_id, call_id)

    def _answered(self, call_id: str, name: str) -> tuple[str, str]:
        """``(toolCallId, approvalId)`` of the next call with this id waiting for its
        result or approval request (of this tool first)."""
        queue = self.waiting.get(call_id)
        if queue:
            index = next((i for i, item in enumerate(queue) if item[0] == name), 0)
            _, tool_call_id, approval_id = queue.pop(index)
            return tool_call_id, approval_id
        return self._tool_id(call_id), call_id

    def _new_call(self, call_id: str, preferred: str | None) -> tuple[str, str]:
        """``(toolCallId, approvalId)`` of a call the run just made."""
        n = self.call_counts[call_id] = self.call_counts.get(call_id, 0) + 1
        approval_id = call_id if n == 1 and call_id else f"{call_id}#{n}"
        if preferred:  # the id its deltas had, kept for it
            return preferred, approval_id
        candidates = [call_id] if call_id and n == 1 else []
        candidates.append(f"{call_id or 'call'}-{n}")
        tool_call_id = next((c for c in candidates if c not in self.used), None)
        while tool_call_id is None or tool_call_id in self.used:
            tool_call_id = self._next(f"{call_id or 'call'}-{n}")
        self.used.add(tool_call_id)
        return tool_call_id, approval_id

    # -- the translation
    def feed(self, event: StreamEvent) -> list[dict]:
        """The chunks for one event (often none)."""
        if self.ended:
            return []
        if isinstance(event, RunStarted):
            self.run_id = event.run_id or self.run_id
            out = self._start(event.run_id)
            return out + self._close_parts()  # a run taken over starts its step again
        if isinstance(event, TextDelta):
            if not event.content:
                return []
            out = self._content()
            if self.reasoning is not None:
                out += [{"type": "reasoning-end", "id": self.reasoning}]
                self.reasoning = None
            if self.text is None:
                self.text = self._next("text")
                out.append({"type": "text-start", "id": self.text})
            self.step_text = True
            out.append({"type": "text-delta", "id": self.text, "delta": event.content})
            return out
        if isinstance(event, TextDone):
            if self.text is not None:
                out = [{"type": "text-end", "id": self.text}]
                self.text = None
                return out
            if self.step_text or not event.content:
                return []
            out = self._content()  # a whole text without deltas
            part = self._next("text")
            self.step_text = True
            return out + [
                {"type": "text-start", "id": part},
                {"type": "text-delta", "id": part, "delta": event.content},
                {"type": "text-end", "id": part},
            ]
        if isinstance(event, ReasoningDelta):
            if not event.content:
                return []
            out = self._content()
            if self.text is not None:
                out += [{"type": "text-end", "id": self.text}]
                self.text = None
            if self.reasoning is None:
                self.reasoning = self._next("reasoning")
                out.append({"type": "reasoning-start", "id": self.reasoning})
            self.step_reasoning = True
            out.append({"type": "reasoning-delta", "id": self.reasoning, "delta": event.content})
            return out
        if isinstance(event, ReasoningDone):
            if self.reasoning is not None:
                out = [{"type": "reasoning-end", "id": self.reasoning}]
                self.reasoning = None
                return out
            text = event.part.text if event.part is not None else ""
            if self.step_reasoning or not text:
                return []
            out = self._content()
            part = self._next("reasoning")
            return out + [
                {"type": "reasoning-start", "id": part},
                {"type": "reasoning-delta", "id": part, "delta": text},
                {"type": "reasoning-end", "id": part},
            ]
        if isinstance(event, ToolCallDelta):
            out = self._content() + self._close_parts()
            key = event.item_id or ""
            tool_call_id = self.items.get(key)
            if tool_call_id is None:
                fresh = event.item_id and event.item_id not in self.used
                tool_call_id = event.item_id if fresh else self._next("call")
                while tool_call_id in self.used:
                    tool_call_id = self._next("call")
                self.items[key] = tool_call_id
                self.used.add(tool_call_id)  # this call's, whatever its ids turn out to be
            if tool_call_id not in self.inputs:
                self.inputs.add(tool_call_id)
                out.append(
                    {
                        "type": "tool-input-start",
                        "toolCallId": tool_call_id,
                        "toolName": event.name or "",
                    }
                )
            if event.arguments_delta:
                out.append(
                    {
                        "type": "tool-input-delta",
                        "toolCallId": tool_call_id,
                        "inputTextDelta": event.arguments_delta,
                    }
                )
            return out
        if isinstance(event, ToolCallDone):
            out = self._content() + self._close_parts()
            streamed = self.items.pop(event.item_id or "", None)  # its deltas' toolCallId
            tool_call_id, approval_id = self._new_call(event.call_id, streamed)
            self.tool_ids[event.call_id] = tool_call_id
            self.waiting.setdefault(event.call_id, []).append(
                (event.name, tool_call_id, approval_id)
            )
            if tool_call_id not in self.inputs:
                self.inputs.add(tool_call_id)
                out.append(
                    {"type": "tool-input-start", "toolCallId": tool_call_id, "toolName": event.name}
                )
            try:
                arguments = json.loads(event.arguments or "{}")
            except ValueError:
                arguments = event.arguments
            out.append(
                {
                    "type": "tool-input-available",
                    "toolCallId": tool_call_id,
                    "toolName": event.name,
                    "input": arguments,
                }
            )
            return out
        if isinstance(event, ToolApprovalRequest):
            out = self._content(tool_output=True)
            tool_call_id, approval_id = self._answered(event.call_id, event.name)
            return out + [
                {
                    "type": "tool-approval-request",
                    "approvalId": approval_id,
                    "toolCallId": tool_call_id,
                }
            ]
        if isinstance(event, ToolResultDone):
            out = self._content(tool_output=True)
            tool_call_id, _ = self._answered(event.call_id, event.name)
            if event.error_type == "denied":
                return out + [{"type": "tool-output-denied", "toolCallId": tool_call_id}]
            if event.error_type:
                return out + [
                    {
                        "type": "tool-output-error",
                        "toolCallId": tool_call_id,
                        "errorText": _error_text(event.result),
                    }
                ]
            return out + [
                {
                    "type": "tool-output-available",
                    "toolCallId": tool_call_id,
                    "output": _output(event.result),
                }
            ]
        if isinstance(event, WebSearchDone):
            out = self._content()
            for source in event.sources:
                url = source.get("url")
                if url:
                    item: dict[str, Any] = {
                        "type": "source-url",
                        "sourceId": self._next("source"),
                        "url": url,
                    }
                    if source.get("title"):
                        item["title"] = str(source["title"])
                    out.append(item)
            return out
        if isinstance(event, FinishReasonDone):
            self.finish_reason = event.finish_reason
            return []
        if isinstance(event, StepFinished):
            out = self._start() + self._close_parts()
            if not self.in_step:
                out.append({"type": "start-step"})
                self.in_step = True
            self.step_stored = True
            self.finish_reason = event.finish_reason
            for name, value in event.token_usage.to_dict().items():
                self.tokens[name] = self.tokens.get(name, 0) + value
            self.cost = _usd_sum(self.cost, event.cost)
            metadata: dict[str, Any] = {
                "storedMessageId": event.message_id,
                "tokens": dict(self.tokens),
            }
            if self.cost is not None:
                metadata["cost"] = self.cost
            return out + [{"type": "message-metadata", "messageMetadata": metadata}]
        if isinstance(event, GuardrailTripwire):
            return []
        if isinstance(event, RunFinished):
            return self._finish(event)
        return []

    def error(self, text: str) -> list[dict]:
        """An ``error`` chunk (once)."""
        if self.errored or self.ended:
            return []
        self.errored = True
        return self._start() + self._close_parts() + [{"type": "error", "errorText": text}]

    def _finish(self, event: RunFinished) -> list[dict]:
        if event.status == "retrying":  # the same run starts again: its RunStarted follows
            return self._close_parts()
        out = self._start(event.run_id)
        if event.status == "blocked":
            out += self.error("A guardrail blocked the message.")
        elif event.error:
            out += self.error(event.error)
        out += self._close_parts()
        if self.in_step:
            out.append({"type": "finish-step"})
            self.in_step = False
        if event.status in (Run.CANCELLED, Run.INTERRUPTED):
            # stopped: what was streamed is what was stored, and the message ends here
            out.append({"type": "abort", "reason": event.status})
        metadata: dict[str, Any] = {"status": event.status}
        if event.run_id:
            metadata["runId"] = event.run_id
        if event.message_id is not None:
            metadata["storedMessageId"] = event.message_id
        if event.token_usage is not None:
            metadata["tokens"] = event.token_usage.to_dict()
        if event.cost is not None:
            metadata["cost"] = event.cost
        out.append(
            {
                "type": "finish",
                "finishReason": self._finish_reason(event.status),
                "messageMetadata": metadata,
            }
        )
        self.ended = True
        return out

    def _finish_reason(self, status: str) -> str:
        if status == Run.AWAITING_APPROVAL:
            return "tool-calls"
        if status == Run.FAILED:
            return "error"
        if status == "blocked":
            return "content-filter"
        if status != Run.SUCCEEDED:
            return "other"
        return _FINISH_REASONS.get(self.finish_reason or "stop", "other")


def _output(text: str) -> Any:
    """A tool's result as the client gets it: JSON objects and arrays decoded, any other
    text as it is."""
    if text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _error_text(text: str) -> str:
    try:
        found = json.loads(text)
        return str(found["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return text or "The tool failed."


# -- the stream in the response -------------------------------------------------------------
class UIRun(InlineRun):
    """A run streamed in the response as UI message chunks (the run itself is an
    :class:`InlineRun`: stored as it goes, published to the chat's event stream when
    ``EVENTS_URL`` is set, finished in the background when the client leaves)."""

    def __init__(self, chat: Chat, *, ui: UIMessageStream, **kwargs: Any):
        self.ui = ui
        super().__init__(chat, **kwargs)

    def encode(self, event: StreamEvent) -> Iterator[str]:
        for item in self.ui.feed(event):
            yield chunk(item)

    def encode_error(self, payload: dict[str, Any]) -> Iterator[str]:
        for item in self.ui.error(payload["message"]):
            yield chunk(item)

    def trailer(self) -> Iterator[str]:
        yield DONE


def ui_response(content, status: int = 200) -> StreamingHttpResponse:
    response = StreamingHttpResponse(content, status=status, content_type="text/event-stream")
    for key, value in UI_STREAM_HEADERS.items():
        response[key] = value
    return response


def no_stream() -> HttpResponse:
    """``204``: no run to resume (the transport then leaves the chat as it is)."""
    return HttpResponse(status=204)


# -- following a run from the chat's event stream ----------------------------------------------
def _live(chat_id: int) -> bool:
    return Run.objects.filter(chat_id=chat_id, status__in=(Run.QUEUED, Run.RUNNING)).exists()


def follow_chunks(chat: Chat, *, asynchronous: bool):
    """The run in progress, from its start, as UI message chunks; ends after the run (or
    when no run is left to wait for)."""
    ui = UIMessageStream(chat_id=chat.pk)
    options = {"last_id": None, "stop_at_run_end": True, "heartbeat": True, "block_ms": 1000}

    def translate(event):
        if event is None:
            return None
        return "".join(chunk(item) for item in ui.feed(event))

    if asynchronous:
        from asgiref.sync import sync_to_async

        async def aframes():
            try:
                async for _, event in streams.afollow(chat.pk, **options):
                    if event is None:
                        if not await sync_to_async(_live)(chat.pk):
                            break
                        yield ": keep-alive\n\n"
                        continue
                    yield translate(event)
            except Exception as exc:
                logger.exception("following chat %s failed", chat.pk, exc_info=exc)
                yield "".join(chunk(i) for i in ui.error("The event stream is unavailable."))
            yield DONE

        return aframes()

    def frames():
        try:
            for _, event in streams.follow(chat.pk, **options):
                if event is None:
                    if not _live(chat.pk):
                        break
                    yield ": keep-alive\n\n"
                    continue
                yield translate(event)
        except Exception as exc:
            logger.exception("following chat %s failed", chat.pk, exc_info=exc)
            yield "".join(chunk(i) for i in ui.error("The event stream is unavailable."))
        yield DONE

    return frames()


def can_resume(chat: Chat) -> bool:
    return bool(settings.EVENTS_URL) and _live(chat.pk)


# -- the request ------------------------------------------------------------------------------
class UIMessagePartSerializer(serializers.Serializer):
    type = serializers.CharField(help_text="`text`, `file`, `tool-<name>`, `step-start`, ...")
    text = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False)
    url = serializers.CharField(required=False, help_text="A file part's `data:` URL.")
    mediaType = serializers.CharField(required=False)  # noqa: N815 - the protocol's name
    filename = serializers.CharField(required=False, allow_blank=True)
    toolCallId = serializers.CharField(required=False)  # noqa: N815
    state = serializers.CharField(required=False)
    approval = serializers.JSONField(
        required=False, help_text="`{id, approved, reason?}` once the user answered."
    )


class UIMessageSerializer(serializers.Serializer):
    id = serializers.CharField(allow_blank=True, required=False)
    role = serializers.ChoiceField(["user", "assistant", "system"])
    parts = serializers.ListField(child=serializers.DictField(), allow_empty=True)
    metadata = serializers.JSONField(required=False, allow_null=True)


class UIChatSerializer(serializers.Serializer):
    """The body ``DefaultChatTransport`` posts (other fields, from its ``body`` option,
    are ignored)."""

    id = StrictCharField(
        max_length=255,
        help_text="The chat: a chat id of yours, or an id the client made up (the chat is "
        "created, owned by you, on first use).",
    )
    messages = serializers.ListField(
        child=UIMessageSerializer(),
        required=False,
        help_text="The client's messages; only the last one is read (the new user message, "
        "or the assistant message carrying answers to tool approvals).",
    )
    message = UIMessageSerializer(
        required=False, help_text="Instead of `messages`: the last message alone."
    )
    trigger = serializers.ChoiceField(
        ["submit-message", "regenerate-message"], default="submit-message"
    )
    messageId = serializers.CharField(  # noqa: N815 - the protocol's name
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text="The message to regenerate (the last reply is replaced).",
    )

    def validate_id(self, value: str) -> str:
        if not _CLIENT_ID.fullmatch(value) or value in (".", ".."):
            raise ValidationError(
                "must be 1-255 letters, digits or '-_.:~' (the id is part of the resume URL)"
            )
        return value

    def validate(self, attrs):
        last = attrs.get("message")
        if last is None and attrs.get("messages"):
            last = attrs["messages"][-1]
        if attrs["trigger"] == "submit-message" and last is None:
            raise ValidationError({"messages": ["send at least the new message"]})
        attrs["last"] = last
        if attrs["trigger"] == "submit-message" and last["role"] == "user":
            # the rules of a REST message (django_llmchat.inputs), before anything is stored
            field = "message" if attrs.get("message") is not None else "messages"
            attrs["prompt"], attrs["attachments"] = prompt_of(last, field=field)
        return attrs


def chat_for(user, client_id: str, *, create: bool) -> Chat | None:
    """The user's chat with this id: its primary key, else the id its client gave it;
    created on first use when ``create``."""
    from .permissions import chats_for

    visible = chats_for(user)
    if client_id.isascii() and client_id.isdigit():  # int() also reads "٣" as 3
        found = visible.filter(pk=int(client_id)).first()
        if found is not None:
            return found
    found = visible.filter(client_id=client_id).first()
    if found is not None or not create:
        return found
    try:
        inputs.check_default_model(field="id")  # the chat is on the project's defaults
    except InputError as exc:
        logger.warning(
            "ui/chat cannot make chat %r: %s (provider %r, model %r)",
            client_id,
            exc.reason,
            settings.DEFAULT_PROVIDER,
            settings.DEFAULT_MODEL,
        )
        raise invalid(exc) from None
    try:
        with transaction.atomic():
            return Chat.objects.create(user=user, client_id=client_id, title="")
    except IntegrityError:  # a concurrent first request made it
        return Chat.objects.filter(user=user, client_id=client_id).first()


def prompt_of(message: dict, *, field: str = "messages") -> tuple[str, list[tuple]]:
    """The text and attachments of a UI user message (file parts as ``data:`` URLs),
    checked as a REST message is (:mod:`django_llmchat.inputs`): the text within
    ``MAX_CONTENT_LENGTH``, the files by count, size, emptiness and sniffed type. A
    message may be files alone. Refusals are on ``field``."""
    texts: list[str] = []
    files: list[tuple] = []
    for index, part in enumerate(message.get("parts") or []):
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise ValidationError({field: [f"part {index}: text must be a string"]})
            texts.append(text)
        elif kind == "file":
            files.append(_file(index, part, field))
    text = "\n\n".join(t for t in texts if t)
    try:
        text = inputs.check_text(text, field=field, required=not files)
    except InputError as exc:
        raise ValidationError({field: [f"the text {reason}" for reason in exc.reasons]}) from None
    try:
        return text, inputs.check_attachments(files, field=field)
    except InputError as exc:
        raise invalid(exc) from None


def _file(index: int, part: dict, field: str) -> tuple[str, bytes, str]:
    """``(filename, bytes, declared type)`` of a file part (the type is checked with the
    bytes, by the input rules)."""
    url = part.get("url")
    found = _DATA_URL.match(url) if isinstance(url, str) else None
    if found is None:
        raise ValidationError(
            {field: [f"part {index}: a file part's url must be a base64 data: URL"]}
        )
    try:
        data = base64.b64decode(url[found.end() :], validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError({field: [f"part {index}: the data: URL is not base64"]}) from None
    mime = part.get("mediaType") or found.group("mime") or ""
    name = part.get("filename") or "file"
    return (str(name)[:255], data, str(mime))


def approvals_of(message: dict) -> list[tuple[str, str, str]]:
    """``(call id, "approved" | "denied", toolCallId)`` for each answered approval of a UI
    assistant message."""
    out = []
    for part in message.get("parts") or []:
        kind = part.get("type")
        if not isinstance(kind, str) or not (kind.startswith("tool-") or kind == "dynamic-tool"):
            continue
        approval = part.get("approval")
        if part.get("state") != "approval-responded" or not isinstance(approval, dict):
            continue
        if not is_call_id(approval.get("id")) or not isinstance(approval.get("approved"), bool):
            raise ValidationError(
                {
                    "messages": [
                        "an approval needs an id (a tool call's: 1-255 characters, no control "
                        "characters) and approved (true or false)"
                    ]
                }
            )
        decision = "approved" if approval["approved"] else "denied"
        out.append((approval["id"], decision, str(part.get("toolCallId") or approval["id"])))
    return out


def call_for(chat: Chat, approval_id: str) -> ToolCall | None:
    """The stored call an ``approvalId`` names (see :class:`UIMessageStream`): the call id
    alone is the first call with it of the run waiting for decisions (else the chat's
    first call with it still unanswered), ``<call id>#<n>`` that run's n-th call with it."""
    calls = list(ToolCall.objects.filter(chat=chat, call_id=approval_id).order_by("id"))
    base, number = approval_id, 1
    if not calls:
        head, sep, tail = approval_id.rpartition("#")
        if not sep or not (tail.isascii() and tail.isdigit()) or int(tail) < 2:
            return None
        base, number = head, int(tail)
    waiting = chat.runs.filter(status=Run.AWAITING_APPROVAL).order_by("id").first()
    if waiting is not None:
        same = list(
            ToolCall.objects.filter(chat=chat, call_id=base, message__run=waiting).order_by("id")
        )
        if number <= len(same):
            return same[number - 1]
    if number > 1 or not calls:
        return None
    return next((c for c in calls if not c.approval and c.get_result() is None), calls[0])


def decide_all(
    chat: Chat,
    decisions: list[tuple[str, str, str]],
    *,
    decided: list[tuple[ToolCall, str]] | None = None,
) -> Run | None:
    """Record the decisions; the run to resume once none is left waiting. ``decided``
    receives ``(stored call, toolCallId)`` of each decision, in the calls' order."""
    resumed = None
    pairs: list[tuple[ToolCall, str]] = []
    for call_id, decision, tool_call_id in decisions:
        call = call_for(chat, call_id)
        if call is None:
            raise ValidationError({"messages": [f"the chat has no tool call {call_id!r}"]})
        pairs.append((call, tool_call_id))
        try:
            found = runs.decide(chat.pk, call, decision)
        except runs.AlreadyDecided:
            continue  # sent again: the first answer stands
        except ChatBusyError:
            raise Conflict("The chat is running; wait for it to pause.") from None
        resumed = found or resumed
    if decided is not None:
        decided.extend(sorted(pairs, key=lambda pair: pair[0].pk))
    return resumed
