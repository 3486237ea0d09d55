"""The chat row: its fields, how it saves, its transcript and messages.

What a chat does lives beside it, each a mixin of :class:`AbstractChat`:
:mod:`.chat_builder` (``with_*``), :mod:`.chat_runs` (the run verbs and their async
twins), :mod:`.chat_totals` (tokens and cost) and :mod:`.chat_organise` (archive, pin,
tags).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings as django_settings
from django.db import models, transaction
from django.db.models.signals import pre_delete
from django.utils.module_loading import import_string

from ..conf import settings
from ..db.prepared import insert_new, is_new, mark_saved
from ..errors import ArgumentError
from ..values import Tokens
from .attachment import Attachment
from .chat_builder import ChatBuilder, schema_dict, tool_name
from .chat_organise import ChatOrganising, OrganisingQuerySet
from .chat_runs import ChatRuns
from .chat_totals import ChatTotals, TotalsQuerySet
from .message import Message
from .usage import Usage

__all__ = ["AbstractChat", "Chat", "ChatQuerySet", "schema_dict", "tool_name"]


def _default_model_id() -> str:
    return settings.DEFAULT_MODEL


def _default_provider() -> str:
    return settings.DEFAULT_PROVIDER


_ANY_USER = object()


class ChatQuerySet(TotalsQuerySet, OrganisingQuerySet):
    def for_user(self, user):
        return self.filter(user=user)

    def search(self, words: str, user: Any = _ANY_USER):
        """The chats whose title or one message (of any branch) holds every word of
        ``words``, best first, with ``search_rank`` and ``search_message_id`` (the best
        matching message, ``None`` when only the title matched). ``user=`` narrows them to
        that user's chats. Raises :class:`~django_llmchat.errors.ArgumentError` for a
        search without a word and :class:`~django_llmchat.chats.search.SearchUnavailable` when
        message content is encrypted at rest."""
        from ..chats.search import search_chats
        from .protected import configured_keys

        queryset = self if user is _ANY_USER else self.filter(user=user)
        return search_chats(queryset, words, messages=Message, encrypted=bool(configured_keys()))


class AbstractChat(ChatBuilder, ChatRuns, ChatTotals, ChatOrganising, models.Model):
    """A conversation: its model and provider, tools, parameters and context. The
    transcript is ``chat.messages``; replies are filled in by ``ask``/``stream`` or a
    Celery worker."""

    title = models.CharField(max_length=255, blank=True)
    title_source = models.CharField(
        max_length=16,
        blank=True,
        default="",
        editable=False,
        help_text='Who wrote the title: "user" (never overwritten), "model", "prompt" (from '
        'the first prompt, LLMCHAT["TITLES"]), or empty while the chat is untitled.',
    )
    model_id = models.CharField(max_length=255, default=_default_model_id)
    provider = models.CharField(max_length=64, default=_default_provider)
    agent = models.CharField(max_length=255, blank=True)
    params = models.JSONField(default=dict, blank=True)
    schema = models.JSONField(null=True, blank=True)
    tools = models.JSONField(default=list, blank=True)
    context = models.JSONField(default=dict, blank=True)
    history = models.JSONField(
        null=True,
        blank=True,
        help_text='What of the transcript each request sends: "all", "window", '
        '"summarize", the dotted path of a history processor, or a dict of history '
        'options (with "strategy"); empty: the agent\'s, else LLMCHAT["HISTORY"].',
    )
    double_texting = models.CharField(
        max_length=16,
        blank=True,
        default="",
        help_text="What a new prompt does while a run of the chat is queued or working: "
        'enqueue, reject, interrupt or rollback; empty: LLMCHAT["DOUBLE_TEXTING"].',
    )
    status = models.CharField(
        max_length=24,
        default="idle",
        blank=True,
        editable=False,
        help_text="What the chat is doing: idle, queued, running or awaiting_approval (kept "
        "by django_llmchat.runs from the chat's runs).",
    )
    client_id = models.CharField(
        max_length=255,
        blank=True,
        default="",
        help_text="The id a frontend made up for the chat (the AI SDK's useChat id), unique "
        "per user; blank for chats made on the server.",
    )
    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text='Days the transcript is kept after its last message (LLMCHAT["RETENTION"] '
        "deletes or anonymises it then); empty: the user's or the default.",
    )
    anonymised_at = models.DateTimeField(
        null=True,
        blank=True,
        editable=False,
        help_text="When the retention emptied the transcript (contents, title, user).",
    )
    archived = models.BooleanField(
        default=False,
        db_default=False,  # rows inserted by code that predates the column
        help_text="Archived: left out of the chat list (GET chats/) unless ?archived=true, "
        "and of the chat page's sidebar; still readable and usable.",
    )
    pinned = models.BooleanField(
        default=False, db_default=False, help_text="Pinned: listed before the others."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ChatQuerySet.as_manager()

    class Meta:
        abstract = True
        ordering = ("-updated_at", "-id")

    def __str__(self) -> str:
        return self.title or f"Chat {self.pk}"

    # written by django_llmchat.runs alone: a save() of a loaded chat never writes them back
    RUN_STATE_FIELDS = ("status", "active_run")
    TITLE_FIELDS = ("title", "title_source")

    @classmethod
    def from_db(cls, db, field_names, values, **kwargs: Any):
        # kwargs: Django 6.1 passes fetch_mode=, earlier versions nothing
        chat = super().from_db(db, field_names, values, **kwargs)
        chat._loaded_title = (chat.__dict__.get("title"), chat.__dict__.get("title_source"))
        return chat

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save the chat, leaving its run state (``status``, ``active_run``) to
        :mod:`django_llmchat.runs`: a chat loaded before a run started never overwrites
        it. A title set here (changed since the chat was loaded, or given to a new chat)
        is the user's (``title_source="user"``), never replaced by an automatic one; an
        unchanged title is not written back (a title written meanwhile stays)."""
        fields = kwargs.get("update_fields")
        mine = self._title_is_users(fields)
        adding = is_new(self)
        if not adding and not kwargs.get("force_insert"):
            if fields is None:
                fields = [
                    f.name
                    for f in self._meta.get_fields()
                    if f.concrete
                    and not f.many_to_many
                    and not f.primary_key
                    and f.name not in self.RUN_STATE_FIELDS
                    and (mine is not None or f.name not in self.TITLE_FIELDS)
                ]
            fields = [f for f in fields if f not in self.RUN_STATE_FIELDS]
            if mine and "title" in fields and "title_source" not in fields:
                fields.append("title_source")
            kwargs["update_fields"] = fields
        if not (adding and insert_new(self, args, kwargs)):
            super().save(*args, **kwargs)
        self._loaded_title = (self.title, self.title_source)
        if adding:  # no message yet: its first run reads none (loop.transcript)
            self._created_here = True

    def _settle_new_row(self) -> None:
        """Before another writer inserts this unsaved chat's row (the admission's one call
        on PostgreSQL): what :meth:`save` settles on a new row first (a title given is the
        user's)."""
        self._title_is_users(None)

    def _inserted_as(self, pk: int, using: str) -> None:
        """This unsaved chat's row was inserted as ``pk`` by another writer: the instance
        follows, as after :meth:`save`."""
        self.pk = pk
        mark_saved(self, using)
        self._loaded_title = (self.title, self.title_source)
        self._created_here = True

    def _title_written(self, title: str, source: str) -> None:
        """An automatic ``title`` (written by ``source``) was just stored on this chat's
        row: the instance follows, and a later ``save()`` does not take it for the
        user's."""
        self.title, self.title_source = title[:255], source
        self._loaded_title = (self.title, self.title_source)

    def _title_is_users(self, fields) -> bool | None:
        """Whether this save writes a title of the user's (``title_source`` set here):
        ``None`` when the title is not this save's to write (unchanged since loaded)."""
        if fields is not None and "title" not in fields:
            return None
        loaded = getattr(self, "_loaded_title", None)
        title, source = self.__dict__.get("title"), self.__dict__.get("title_source")
        if title is None:  # deferred: not loaded, not written
            return None
        if loaded is not None and (title, source) == loaded:
            return None if fields is None else False
        if loaded is not None and source != loaded[1]:
            return False  # the caller chose the source
        if loaded is None and (source or not title):
            return False  # a new chat given its source, or untitled
        self.title_source = "user" if title else ""
        return True

    # -- transcript -----------------------------------------------------------------------
    def transcript(self):
        """The messages of the active path in order, with tool calls, results, attachments
        and usage loaded in a constant number of queries (every branch: :meth:`tree`)."""
        return self.messages.filter(on_path=True).transcript().order_by("position", "id")

    def path(self):
        """The active path: the messages the next request is built from (as
        :meth:`transcript`)."""
        return self.transcript()

    def tree(self):
        """Every stored message of the chat, every branch, in the order they were stored
        (``parent`` and ``on_path`` tell the shape), loaded as :meth:`transcript` is."""
        return self.messages.transcript().order_by("position", "id")

    @property
    def active_leaf(self):
        """The last message of the active path (system messages aside), or ``None``."""
        row = Message.objects.leaf_row(self.pk) if self.pk is not None else None
        return None if row is None else self.messages.get(pk=row[0])

    def fork(self, message):
        """A new chat of the same user holding this chat's path from its first message to
        ``message`` (a Message of any branch of this chat, or its id): the messages copied
        with their tool calls, results and reasoning, the attachments sharing the stored
        files, the settings and instructions copied, no usage. When ``message`` leaves
        tool calls unanswered, the copy ends before the message that made them. Returns
        the new chat (``forked_from``, ``forked_from_message`` say where it came from);
        :class:`~django_llmchat.errors.ArgumentError` for a message of no branch of this
        chat."""
        # named, not imported: django_llmchat.chats.forks is built on the models
        return import_string("django_llmchat.chats.forks.fork_chat")(self, message)

    def add_message(
        self,
        role: str = "user",
        content: str = "",
        *,
        cost: Decimal | float | str | None = None,
        tokens: Tokens | None = None,
        attachments: list[tuple[str, bytes] | tuple[str, bytes, str]] | None = None,
        **fields: Any,
    ):
        """Append a message to the transcript and return it (saved).

        ``attachments`` are ``(filename, bytes)`` or ``(filename, bytes, mime_type)``;
        ``cost`` is a supplied USD cost; ``tokens`` fills the token columns.
        """
        if role not in Message.ROLES:
            raise ArgumentError(f"role must be one of {', '.join(Message.ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise ArgumentError(f"content must be a string, got {type(content).__name__}")
        message = Message(chat=self, role=role, content=content, cost=cost, **fields)
        if tokens is not None:
            message.tokens = tokens
        with transaction.atomic():
            self._insert(message, attachments, updated_at=models.functions.Now())
        return message

    def _insert(self, message, attachments, **chat_updates: Any) -> None:
        """Save ``message`` with its attachments and update the chat row when
        ``chat_updates`` are given (in the caller's transaction)."""
        message.save()
        for item in attachments or []:
            filename, data, *mime = item
            Attachment.objects.create_from_bytes(
                message=message, data=data, filename=filename, mime_type=mime[0] if mime else None
            )
        if chat_updates:
            type(self).objects.filter(pk=self.pk).update(**chat_updates)

    def refresh_from_db(self, using=None, fields=None, from_queryset=None):
        """Also forgets the run and the tags this instance remembers (``last_run`` and
        ``tags`` read them anew)."""
        self.__dict__.pop("_last_run", None)
        self.__dict__.pop("_tag_names", None)
        super().refresh_from_db(using=using, fields=fields, from_queryset=from_queryset)
        if fields is None or set(self.TITLE_FIELDS) & set(fields):
            self._loaded_title = (self.__dict__.get("title"), self.__dict__.get("title_source"))


class Chat(AbstractChat):
    user = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="llm_chats",
        db_index=False,  # llmchat_chat_user_idx starts with it
    )
    active_run = models.ForeignKey(
        "django_llmchat.Run",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        help_text="The run working on the chat now (kept by django_llmchat.runs).",
    )
    forked_from = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="forks",
        db_index=False,  # llmchat_chat_fork_idx
        help_text="The chat this one was forked from (chat.fork()), while it exists.",
    )
    forked_from_message = models.ForeignKey(
        "django_llmchat.Message",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
        help_text="The source chat's message the fork's transcript ends with.",
    )

    class Meta(AbstractChat.Meta):
        db_table = "llmchat_chat"
        indexes = [
            models.Index(fields=["user", "-updated_at"], name="llmchat_chat_user_idx"),
            models.Index(fields=["provider", "model_id"], name="llmchat_chat_model_idx"),
            # the chat list: a user's chats, archived apart, pinned first, then by recency
            models.Index(
                fields=["user", "archived", "-pinned", "-updated_at", "-id"],
                name="llmchat_chat_list_idx",
            ),
            # the retention pass: chats idle for longer than the days, those with their own
            models.Index(fields=["updated_at"], name="llmchat_chat_updated_idx"),
            models.Index(
                fields=["updated_at"],
                condition=models.Q(retention_days__isnull=False),
                name="llmchat_chat_own_days_idx",
            ),
            models.Index(
                fields=["forked_from"],
                condition=models.Q(forked_from__isnull=False),
                name="llmchat_chat_fork_idx",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "client_id"],
                condition=~models.Q(client_id=""),
                name="llmchat_chat_client_id_uniq",
            )
        ]


def _keep_title_in_ledger(sender, instance, **kwargs) -> None:
    """The chat's usage rows stay (the ledger): they keep its title."""
    Usage.objects.filter(chat_id=instance.pk).update(chat_title=instance.title[:255])


pre_delete.connect(_keep_title_in_ledger, sender=Chat, dispatch_uid="llmchat_ledger_title")
