from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from decimal import Decimal
from typing import Any

from django.db import models
from django.db.models import Prefetch
from django.dispatch import Signal

from ..catalog.pricing import price, price_from_table
from ..errors import StructuredOutputError
from ..values import TOKEN_FIELDS, Citation, Cost, ServerToolCall, Thinking, Tokens
from .fields import ValueListField
from .llm_model import LLMModel, find_model
from .protected import ProtectedJSONField, ProtectedTextField
from .tool_call import ToolCall

_UNSET = object()

QUEUED_POSITION = 10**17
"""Added to the position of a prompt stored while an earlier run of the chat works: the
prompt reads after everything else until its own run starts (see ``next_position``)."""


def clock_position() -> int:
    """A new message's place in the transcript: microseconds since the epoch."""
    return time.time_ns() // 1000


transcript_changed = Signal()
"""Sent with ``chat_id`` when a stored message of that chat changed in this process
(``Message.save()`` of a stored row, ``cache_until_here()``)."""


def _changed(message: Any) -> None:
    """A stored message changed: the built history of its chat is read again."""
    transcript_changed.send(sender=type(message), chat_id=getattr(message, "chat_id", None))


_BRANCH: ContextVar[Any] = ContextVar("llmchat_branch", default=None)


@contextmanager
def branching(parent: Any) -> Iterator[None]:
    """While in this block, the prompt a run is admitted with (``runs.enqueue``) follows
    ``parent`` (a Message of the chat, its id, or ``django_llmchat.models.branches.ROOT``)
    instead of the chat's active leaf: a new branch, made in the admission's
    transaction."""
    token = _BRANCH.set(parent)
    try:
        yield
    finally:
        _BRANCH.reset(token)


def pending_branch() -> Any:
    """The parent :func:`branching` asked for (``None``: none)."""
    return _BRANCH.get()


class MessageQuerySet(models.QuerySet):
    def leaf_rows(self, chat_id: Any):
        """``(id, position)`` of the messages of the chat's active path that are part of
        the tree (no system message, no prompt still queued), the last first: the first
        row is the chat's active leaf."""
        return (
            self.filter(chat_id=chat_id, on_path=True, position__lt=QUEUED_POSITION)
            .exclude(role="system")
            .order_by("-position", "-id")
            .values_list("pk", "position")
        )

    def leaf_row(self, chat_id: Any) -> tuple[int, int] | None:
        """``(id, position)`` of the chat's active leaf, or ``None``."""
        return self.leaf_rows(chat_id).first()

    def transcript(self):
        """Messages with everything a transcript shows, in a constant number of queries:
        tool calls (with their result ids), attachments, usage rows, the answered call."""
        return self.select_related("parent_tool_call").prefetch_related(
            Prefetch("tool_calls", queryset=ToolCall.objects.select_related("result")),
            "attachments",
            "usages",
        )


class AbstractMessage(models.Model):
    """One transcript entry: a system instruction, a user prompt, an assistant reply or a
    tool result. Mirrors RubyLLM's ``Message``: predicates, tokens, cost, ``to_dict()``."""

    ROLES = ("system", "user", "assistant", "tool")

    role = models.CharField(max_length=16)
    content = ProtectedTextField(blank=True, default="", redact_as="role")
    model_id = models.CharField(max_length=255, blank=True)
    provider = models.CharField(max_length=64, blank=True)
    finish_reason = models.CharField(max_length=64, blank=True)
    thinking_text = ProtectedTextField(blank=True, redact_as="thinking")
    thinking_signature = models.TextField(blank=True)
    citations = ValueListField(value_class=Citation)
    server_tool_calls = ValueListField(value_class=ServerToolCall)
    raw = ProtectedJSONField(null=True, blank=True, redact_as="raw")
    cache_boundary = models.BooleanField(default=False)
    input_tokens = models.PositiveIntegerField(null=True, blank=True)
    output_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_read_tokens = models.PositiveIntegerField(null=True, blank=True)
    cache_write_tokens = models.PositiveIntegerField(null=True, blank=True)
    thinking_tokens = models.PositiveIntegerField(null=True, blank=True)
    supplied_cost = models.DecimalField(
        max_digits=16,
        decimal_places=10,
        null=True,
        blank=True,
        db_column="cost",
        help_text="A cost supplied by hand (USD); usage rows take precedence.",
    )
    position = models.BigIntegerField(
        default=clock_position,
        editable=False,
        help_text="The message's place in the transcript (ordered by position, then id): "
        "when it was stored, or, for a prompt asked while an earlier run worked, when its "
        "own run started.",
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=False)

    objects = MessageQuerySet.as_manager()

    class Meta:
        abstract = True
        ordering = ("position", "id")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # ``cost=`` (a Decimal, number or Cost) is the supplied cost, as in RubyLLM's
        # ``Message.new(cost:)``: stored in ``supplied_cost``
        if "cost" in kwargs:
            kwargs["supplied_cost"] = _supplied_cost(kwargs.pop("cost"))
        super().__init__(*args, **kwargs)

    # the keywords this constructor does more with than Django's: without them, a new
    # message may be built as a copy of a blank one (``db.prepared.new_instance``)
    __init__.rewrites = ("cost",)  # type: ignore[attr-defined]

    def __str__(self) -> str:
        text = self.content if len(self.content) <= 60 else self.content[:57] + "..."
        return f"{self.role}: {text}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save the message; a stored message changed here is read again by the next run
        (see ``django_llmchat.loop.transcript.HISTORY_CACHE_TTL``). A new message of the tree
        (no system message) saved without a parent follows the chat's active leaf."""
        changed = self.pk is not None
        if not changed and self.needs_parent():
            leaf = type(self).objects.leaf_row(self.chat_id)
            self.parent_id = leaf[0] if leaf is not None else None
            self.placed = True
        super().save(*args, **kwargs)
        if changed:
            _changed(self)

    placed = False
    """Set on an unsaved message whose parent was decided by its writer (so ``save()``
    does not look for the active leaf)."""

    def needs_parent(self) -> bool:
        """An unsaved message of the tree whose parent nobody decided yet."""
        return (
            not self.placed
            and hasattr(type(self), "parent")
            and self.parent_id is None
            and self.role != "system"
            and getattr(self, "summary_until_id", None) is None
            and self.position < QUEUED_POSITION
            and getattr(self, "chat_id", None) is not None
        )

    # -- reasoning and tool links ---------------------------------------------------------
    @property
    def thinking(self) -> Thinking | None:
        if not self.thinking_text and not self.thinking_signature:
            return None
        return Thinking(self.thinking_text, self.thinking_signature or None)

    @thinking.setter
    def thinking(self, value: Thinking | None) -> None:
        self.thinking_text = value.text if value else ""
        self.thinking_signature = (value.signature or "") if value else ""

    @property
    def tool_call_id(self) -> str | None:
        """The id of the tool call this (tool) message answers, or ``None``."""
        if self.parent_tool_call_id is None:
            return None
        return self.parent_tool_call.call_id

    def _tool_calls_list(self) -> list:
        if not self.pk:
            return []
        return list(self.tool_calls.all())  # served from the prefetch cache when loaded

    @property
    def is_tool_call(self) -> bool:
        """The assistant requested one or more tool calls."""
        return bool(self._tool_calls_list())

    @property
    def is_tool_result(self) -> bool:
        """This message carries the result of a tool call."""
        return self.parent_tool_call_id is not None

    @property
    def is_tool_call_stop(self) -> bool:
        """The model stopped to request tool calls."""
        return self.finish_reason == "tool_calls" or (
            self.finish_reason == "stop" and self.is_tool_call
        )

    @property
    def is_stopped(self) -> bool:
        """The model finished normally (a stop to call tools is ``is_tool_call_stop``)."""
        return self.finish_reason == "stop" and not self.is_tool_call

    @property
    def is_max_tokens(self) -> bool:
        return self.finish_reason == "max_tokens"

    @property
    def is_content_filtered(self) -> bool:
        return self.finish_reason == "content_filter"

    @property
    def is_summary(self) -> bool:
        """This message is a stored compaction of the history before it: requests send it
        instead of the messages up to ``summary_until`` (see the History docs)."""
        return getattr(self, "summary_until_id", None) is not None

    @property
    def is_cache_boundary(self) -> bool:
        return bool(self.cache_boundary)

    def cache_until_here(self):
        """Mark this message as the end of the cacheable prompt prefix; saves, returns self."""
        self.cache_boundary = True
        if self.pk:
            type(self).objects.filter(pk=self.pk).update(cache_boundary=True)
            _changed(self)
        else:
            self.save()
        return self

    @property
    def tool_results(self) -> models.QuerySet:
        """The tool messages answering this message's tool calls."""
        return type(self).objects.filter(parent_tool_call__message=self).order_by("position", "id")

    # -- the tree ----------------------------------------------------------------------------
    def alternatives(self) -> models.QuerySet:
        """This message and its siblings (the other replies to its parent: regenerated
        replies, edited prompts), oldest first; a system message has none but itself."""
        manager = type(self).objects
        if self.pk is None or self.role == "system" or self.position >= QUEUED_POSITION:
            return manager.filter(pk=self.pk) if self.pk else manager.none()
        if self.parent_id is not None:
            found = manager.filter(parent_id=self.parent_id)
        else:
            found = manager.filter(
                chat_id=self.chat_id, parent__isnull=True, position__lt=QUEUED_POSITION
            ).exclude(role="system")
        return found.order_by("position", "id")

    @property
    def siblings(self) -> models.QuerySet:
        """The other messages with this message's parent (:meth:`alternatives` but itself),
        oldest first."""
        return self.alternatives().exclude(pk=self.pk)

    # -- feedback ---------------------------------------------------------------------------
    def rate(self, rating: int, comment: str = "", *, user: Any = None):
        """Store ``user``'s feedback on this reply: ``rating`` ``1`` (thumbs up) or ``-1``
        (thumbs down) and an optional ``comment``; a repeat by the same user updates it.
        Returns the ``Feedback`` row; :class:`~django_llmchat.errors.ArgumentError` for a
        message that is no stored assistant reply, another rating or a comment over
        ``Feedback.COMMENT_MAX_LENGTH`` characters."""
        from .feedback import Feedback

        return Feedback.objects.rate(self, rating, comment, user=user)

    def unrate(self, *, user: Any = None) -> bool:
        """Delete ``user``'s feedback on this reply: whether there was one."""
        from .feedback import Feedback

        return Feedback.objects.withdraw(self, user) if self.pk else False

    def feedback_of(self, user: Any = None):
        """``user``'s ``Feedback`` on this reply (``user=None``: the one given without a
        user), or ``None``. All of it: the ``feedback`` related manager."""
        from .feedback import Feedback

        return Feedback.objects.of(self, user) if self.pk else None

    # -- structured output ----------------------------------------------------------------
    @property
    def parsed(self) -> Any:
        """``content`` parsed as JSON (memoized); ``None`` for empty content."""
        if not self.content:
            return None
        cached = self.__dict__.get("_parsed", _UNSET)
        if cached is _UNSET or self.__dict__.get("_parsed_src") != self.content:
            try:
                cached = json.loads(self.content)
            except ValueError as exc:
                raise StructuredOutputError(
                    f"message {self.pk} content is not valid JSON: {exc}"
                ) from exc
            self.__dict__["_parsed"] = cached
            self.__dict__["_parsed_src"] = self.content
        return cached

    # -- tokens and cost ------------------------------------------------------------------
    def _usage_rows(self) -> list:
        if not self.pk:
            return []
        from ..db.prepared import known_rows

        rows = known_rows(self, "usages")  # loaded with the message: no queryset to build
        return list(rows) if rows is not None else list(self.usages.all())

    @property
    def tokens(self) -> Tokens:
        """Usage over every provider attempt that produced this message; a message built by
        hand reports its own token columns."""
        rows = self._usage_rows()
        if not rows:
            return Tokens.from_object(self)
        return sum((row.tokens for row in rows), Tokens())

    @tokens.setter
    def tokens(self, value: Tokens) -> None:
        for name in TOKEN_FIELDS:
            setattr(self, name, getattr(value, name))

    @property
    def is_estimated(self) -> bool:
        """Whether :attr:`tokens` and :meth:`cost` are (partly) our estimate: the reply of
        an attempt stopped before the vendor reported its counts."""
        return any(row.estimated for row in self._usage_rows())

    def cost(self, model: str | LLMModel | None = None) -> Cost:
        """The message's cost in USD: recorded attempt costs, else the supplied cost, else
        priced from ``model_info``. ``model`` (an id or an ``LLMModel``) reprices."""
        if model is None:
            rows = self._usage_rows()
            if rows:
                return sum((row.cost for row in rows), Cost())
            if self.supplied_cost is not None:
                return Cost(total=Decimal(self.supplied_cost))
            # no usage rows: the message's own token columns
            tokens = Tokens.from_object(self)
            return price_of(tokens, self.model_info, self.model_id, self.provider)
        if isinstance(model, str):
            return price(self.tokens, model, None)
        if model.pricing:
            return price_from_table(self.tokens, model.pricing)
        return price(self.tokens, model.model_id, model.provider)

    @property
    def model_info(self) -> LLMModel | None:
        """The registry row for ``model_id``, or ``None`` (memoized)."""
        if not self.model_id:
            return None
        if "_model_info" not in self.__dict__:
            self.__dict__["_model_info"] = find_model(self.model_id, self.provider or None)
        return self.__dict__["_model_info"]

    @model_info.setter
    def model_info(self, value: LLMModel | None) -> None:
        self.__dict__["_model_info"] = value

    # -- serialization --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A plain dict of the message, as RubyLLM's ``Message#to_h``: ``None`` and empty
        lists omitted, token counts merged in, ``cost`` only when it was supplied by hand,
        ``raw_content`` / ``raw_reasoning`` when ``raw`` keeps the provider's own content
        (``raw["content"]``) / reasoning items (``raw["reasoning_items"]``)."""
        tool_calls = {tc.call_id: tc.to_dict() for tc in self._tool_calls_list()}
        attachments = [a.to_dict() for a in self.attachments.all()] if self.pk else []
        thinking = self.thinking
        raw = self.raw if isinstance(self.raw, dict) else {}
        data: dict[str, Any] = {
            "role": self.role,
            "content": self.content,
            "attachments": attachments,
            "model": self.model_id or None,
            "cost": self.cost().to_dict() if self.supplied_cost is not None else None,
            "tool_calls": tool_calls or None,
            "tool_call_id": self.tool_call_id,
            "thinking": thinking.text if thinking and thinking.text else None,
            "thinking_signature": thinking.signature if thinking else None,
            "citations": [c.to_dict() for c in self.citations or []],
            "server_tool_calls": [s.to_dict() for s in self.server_tool_calls or []],
            "raw_content": raw.get("content"),
            "raw_reasoning": raw.get("reasoning_items") or None,
            "finish_reason": self.finish_reason or None,
            "cache_until_here": True if self.cache_boundary else None,
            "summary_until": getattr(self, "summary_until_id", None),
        }
        data.update(self.tokens.to_dict())
        return {k: v for k, v in data.items() if v is not None and v != []}


def price_of(tokens: Tokens, info: LLMModel | None, model_id: str, provider: str) -> Cost:
    """What ``tokens`` cost: priced from the registry row ``info`` when it has a price
    table, else from genai-prices by ``model_id`` (and ``provider``); unknown without a
    model id."""
    if info is not None and info.pricing:
        return price_from_table(tokens, info.pricing)
    if model_id:
        return price(tokens, model_id, provider or None)
    return Cost()


def _supplied_cost(value: Any) -> Decimal | None:
    if value is None or isinstance(value, Decimal):
        return value
    if isinstance(value, Cost):
        return value.total
    if isinstance(value, int | float | str):
        return Decimal(str(value))
    raise TypeError(f"cost must be a Decimal, a number or a Cost, not {type(value).__name__}")


class Message(AbstractMessage):
    chat = models.ForeignKey(
        "django_llmchat.Chat",
        on_delete=models.CASCADE,
        related_name="messages",
        db_index=False,  # llmchat_message_path_idx starts with it
    )
    parent_tool_call = models.OneToOneField(
        "django_llmchat.ToolCall",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="result",
    )
    run = models.ForeignKey(
        "django_llmchat.Run",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="messages",
        db_index=False,  # llmchat_message_run_idx
        help_text="The run that stored the message (a prompt's runs are prompted_runs).",
    )
    parent = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="children",
        db_index=False,  # llmchat_message_parent_idx
        help_text="The message this one follows in the conversation's tree (empty for "
        "system messages, the first message, and a prompt still queued behind a run).",
    )
    on_path = models.BooleanField(
        default=True,
        editable=False,
        help_text="Whether the message is on the chat's active path (the branch the "
        "transcript, the next request, the API and the admin show); kept by "
        "django_llmchat.models.branches.",
    )
    summary_until = models.ForeignKey(
        "self",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,  # llmchat_message_summary_idx (summaries only)
        help_text="For a summary (a compaction of the history): the last message it "
        "covers. Requests send the summary instead of the messages up to that one; the "
        "messages themselves stay stored.",
    )

    class Meta(AbstractMessage.Meta):
        db_table = "llmchat_message"
        indexes = [
            models.Index(
                fields=["chat", "on_path", "position", "id"], name="llmchat_message_path_idx"
            ),
            models.Index(fields=["parent"], name="llmchat_message_parent_idx"),
            models.Index(fields=["run"], name="llmchat_message_run_idx"),
            models.Index(
                fields=["summary_until"],
                name="llmchat_message_summary_idx",
                condition=models.Q(summary_until__isnull=False),
            ),
        ]
