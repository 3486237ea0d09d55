from __future__ import annotations

from decimal import Decimal
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.db import connections, models, transaction
from django.db.models import (
    Aggregate,
    Count,
    Exists,
    ExpressionWrapper,
    OuterRef,
    Q,
    Subquery,
    Sum,
    TextField,
    Value,
)
from django.db.models.functions import Coalesce
from django.db.models.signals import pre_delete
from django.utils.module_loading import import_string

from ..aio import stream_in_thread
from ..conf import settings
from ..errors import ArgumentError
from ..prepared import forget_rows, is_new, known_rows
from ..values import TOKEN_FIELDS, Cost, Tokens
from .attachment import Attachment
from .llm_model import find_model
from .message import Message, branching
from .run import Run
from .tag import ChatTag
from .usage import Usage


def _default_model_id() -> str:
    return settings.DEFAULT_MODEL


def _default_provider() -> str:
    return settings.DEFAULT_PROVIDER


def tool_name(tool: Any) -> str:
    """The registered name of a tool given as a name, a tool object or a function."""
    if isinstance(tool, str):
        name = tool
    else:
        name = getattr(tool, "name", None) or getattr(tool, "__name__", None)
    if not name or not isinstance(name, str):
        raise ArgumentError(f"cannot tell the name of tool {tool!r}")
    return name


def schema_dict(schema: Any) -> dict[str, Any] | None:
    """A JSON Schema dict from a dict or a pydantic model class (``None`` clears)."""
    if schema is None:
        return None
    if isinstance(schema, dict):
        return schema
    json_schema = getattr(schema, "model_json_schema", None)
    if callable(json_schema):
        return json_schema()
    raise ArgumentError(
        f"schema must be a JSON Schema dict or a pydantic model class, got {type(schema).__name__}"
    )


def _attachment_items(attachments) -> list[tuple]:
    """``(filename, bytes[, mime])`` tuples or Django ``File`` objects, as tuples."""
    items = []
    for item in attachments or []:
        if isinstance(item, tuple):
            items.append(item)
        elif hasattr(item, "read"):
            name = getattr(item, "name", "attachment") or "attachment"
            mime = getattr(item, "content_type", None)
            data = item.read()
            items.append((name.rsplit("/", 1)[-1], data, mime) if mime else (name, data))
        else:
            raise ArgumentError(f"cannot attach {item!r}: give (filename, bytes) or a File")
    return items


def _either_or_sum(a, b, field):
    """``a + b``; either alone when the other is NULL; NULL when both are."""
    total = ExpressionWrapper(a + b, output_field=field)
    return Coalesce(total, a, b, output_field=field)


_ANY_USER = object()


class _TagNames(Aggregate):
    """A chat's tag names in one string, a newline between them (a tag holds none)."""

    function = "GROUP_CONCAT"
    template = "%(function)s(%(expressions)s, char(10))"
    output_field = TextField()

    def as_postgresql(self, compiler, connection, **extra):
        template = "%(function)s(%(expressions)s, E'\\n')"
        return self.as_sql(compiler, connection, function="STRING_AGG", template=template)

    def as_mysql(self, compiler, connection, **extra):
        return self.as_sql(
            compiler, connection, template="%(function)s(%(expressions)s SEPARATOR '\\n')"
        )


class ChatQuerySet(models.QuerySet):
    def with_totals(self):
        """Annotate ``message_count``, ``total_tokens`` and ``total_cost`` with subqueries
        (no row multiplication, one query for any number of chats). The totals are
        :attr:`Chat.tokens` and :meth:`Chat.cost`: every provider attempt, plus the counts
        and supplied costs of hand-built messages (no usage rows); ``None`` when nothing
        is known."""
        count = (
            Message.objects.filter(chat=OuterRef("pk"))
            .order_by()
            .values("chat")
            .annotate(n=Count("pk"))
            .values("n")
        )
        token_sum = Sum(
            Coalesce("input_tokens", Value(0))
            + Coalesce("output_tokens", Value(0))
            + Coalesce("cache_read_tokens", Value(0))
            + Coalesce("cache_write_tokens", Value(0))
        )
        usage = Usage.objects.filter(chat=OuterRef("pk")).order_by().values("chat")
        tokens = usage.annotate(t=token_sum).values("t")
        cost = usage.annotate(c=Sum("total_cost")).values("c")
        # hand-built messages: their own token columns (only the ones with a count) and
        # their supplied cost, as Chat.tokens and Chat.cost() count them
        manual = (
            Message.objects.filter(chat=OuterRef("pk"), usages__isnull=True)
            .order_by()
            .values("chat")
        )
        counted = Q()
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            counted |= Q(**{f"{name}__isnull": False})
        manual_tokens = manual.filter(counted).annotate(t=token_sum).values("t")
        supplied = (
            manual.filter(supplied_cost__isnull=False).annotate(c=Sum("supplied_cost")).values("c")
        )
        last = Run.objects.filter(chat=OuterRef("pk")).order_by("-id")
        return self.annotate(
            message_count=Coalesce(Subquery(count), Value(0)),
            total_tokens=_either_or_sum(
                Subquery(tokens), Subquery(manual_tokens), models.BigIntegerField()
            ),
            total_cost=_either_or_sum(Subquery(cost), Subquery(supplied), Usage.total_cost.field),
            **{
                f"_last_run_{name}": Subquery(last.values(name)[:1])
                for name in ("id", "status", "error", "error_type")
            },
        )

    def for_user(self, user):
        return self.filter(user=user)

    def with_tags(self):
        """Annotate each chat's tags (a subquery: ``chat.tags`` then reads no row)."""
        names = (
            ChatTag.objects.filter(chat=OuterRef("pk"))
            .order_by()
            .values("chat")
            .annotate(names=_TagNames("name"))
            .values("names")
        )
        return self.annotate(_tag_names=Subquery(names, output_field=TextField()))

    def tagged(self, *tags: str):
        """The chats with every one of ``tags`` (exact names)."""
        queryset = self
        for name in tags:
            rows = ChatTag.objects.filter(chat=OuterRef("pk"), name=name)
            queryset = queryset.filter(Exists(rows))
        return queryset

    def search(self, words: str, user: Any = _ANY_USER):
        """The chats whose title or one message (of any branch) holds every word of
        ``words``, best first, with ``search_rank`` and ``search_message_id`` (the best
        matching message, ``None`` when only the title matched). ``user=`` narrows them to
        that user's chats. Raises :class:`~django_llmchat.errors.ArgumentError` for a
        search without a word and :class:`~django_llmchat.search.SearchUnavailable` when
        message content is encrypted at rest."""
        from ..search import search_chats
        from .protected import configured_keys

        queryset = self if user is _ANY_USER else self.filter(user=user)
        return search_chats(queryset, words, messages=Message, encrypted=bool(configured_keys()))


class AbstractChat(models.Model):
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
        if not is_new(self) and not kwargs.get("force_insert"):
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
        super().save(*args, **kwargs)
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

    def switch_to(self, message):
        """Make the branch through ``message`` (a Message of this chat or its id) the
        active path: its ancestors, itself, then the newest reply each time down to a
        leaf. Returns the new active leaf. :class:`~django_llmchat.errors.ChatBusyError`
        while a run of the chat is unfinished."""
        runner = import_string(self.runner_class)
        return self.messages.get(pk=runner.switch_to(self, message))

    def branch_from(self, parent, prompt: str, attachments=None, *, context=None):
        """Ask ``prompt`` as a new branch after ``parent`` (a Message of this chat, its
        id, or ``django_llmchat.branches.ROOT`` to start over): the active path's messages
        after ``parent`` leave the path (kept as the other branch) and the reply answers
        the new path alone. ``chat.ask(prompt, parent=parent)``."""
        return self.ask(prompt, attachments, context=context, parent=parent)

    def fork(self, message):
        """A new chat of the same user holding this chat's path from its first message to
        ``message`` (a Message of any branch of this chat, or its id): the messages copied
        with their tool calls, results and reasoning, the attachments sharing the stored
        files, the settings and instructions copied, no usage. When ``message`` leaves
        tool calls unanswered, the copy ends before the message that made them. Returns
        the new chat (``forked_from``, ``forked_from_message`` say where it came from);
        :class:`~django_llmchat.errors.ArgumentError` for a message of no branch of this
        chat."""
        # named, not imported: django_llmchat.forks is built on the models
        return import_string("django_llmchat.forks.fork_chat")(self, message)

    def regenerate(self, *, context=None):
        """Answer the active path's last prompt again: the reply it had (with its tool
        calls and results) leaves the path, kept as a sibling of the new one (see
        ``Message.alternatives()``). Returns the new final Message."""
        return self.runner(context).regenerate()

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

    # -- configuration (each saves and returns the chat, so calls chain) ------------------
    def with_instructions(self, text: str | None, *, append: bool = False):
        """Set the system instructions: replace them (default), ``append=True`` to add one
        more, ``None`` to clear them."""
        with transaction.atomic():
            if not append or text is None:
                # summaries (system rows too) are history, not instructions
                self.messages.filter(role="system", summary_until__isnull=True).delete()
            if text is not None:
                self.add_message(role="system", content=text)
        return self

    def with_model(self, model_id: str, provider: str | None = None):
        """Switch model (and provider). Without ``provider``, the registry's provider for
        that model is used when known, else the current one is kept."""
        if not model_id:
            raise ArgumentError("model_id must not be empty")
        if provider is None:
            info = find_model(model_id)
            provider = info.provider if info else self.provider
        self.model_id, self.provider = model_id, provider
        self.save(update_fields=["model_id", "provider", "updated_at"])
        return self

    def with_tools(self, *tools: Any, replace: bool = False):
        """Enable tools by name (strings, ``@tool`` functions or tool objects)."""
        names = [tool_name(t) for t in tools]
        current = [] if replace else list(self.tools or [])
        self.tools = current + [n for n in names if n not in current]
        self.save(update_fields=["tools", "updated_at"])
        return self

    def with_temperature(self, temperature: float):
        if isinstance(temperature, bool) or not isinstance(temperature, int | float):
            raise ArgumentError(f"temperature must be a number, got {temperature!r}")
        if not 0 <= temperature <= 2:
            raise ArgumentError(f"temperature must be between 0 and 2, got {temperature}")
        return self.with_params(temperature=temperature)

    def with_params(self, **params: Any):
        """Merge request parameters (``max_tokens``, vendor options under the vendor's name)."""
        self.params = {**(self.params or {}), **params}
        self.save(update_fields=["params", "updated_at"])
        return self

    def with_history(self, history: Any):
        """Choose what of the transcript each request sends: ``"all"``, ``"window"``,
        ``"summarize"``, the dotted path of a history processor, or a dict of history
        options (``{"strategy": "summarize", "keep": 0.4}``); ``None`` goes back to the
        agent's or the project's ``LLMCHAT["HISTORY"]``."""
        if history is not None:
            from ..history_policy import history_errors

            problems = history_errors(history)
            if problems:
                raise ArgumentError(f"history: {problems[0]}")
        self.history = history
        self.save(update_fields=["history", "updated_at"])
        return self

    def with_schema(self, schema: Any):
        """Ask for structured output: a JSON Schema dict or a pydantic model class."""
        self.schema = schema_dict(schema)
        self.save(update_fields=["schema", "updated_at"])
        return self

    def cache_until_here(self):
        """Mark the latest message as the end of the cacheable prefix."""
        last = self.messages.filter(on_path=True).order_by("-position", "-id").first()
        if last is None:
            raise ArgumentError("the chat has no message to mark as a cache boundary")
        last.cache_until_here()
        return self

    # -- archive, pin, tags (no activity: ``updated_at`` stays, the list's order too) -----
    ORGANISING_FIELDS = ("archived", "pinned", "tags")
    """What sorts a chat without changing it: writing these alone keeps ``updated_at``."""

    def archive(self):
        """Leave the chat out of the chat list (``GET chats/`` shows it with
        ``?archived=true``). Saves that column alone and returns the chat."""
        return self._organise(archived=True)

    def unarchive(self):
        """Bring an archived chat back to the chat list."""
        return self._organise(archived=False)

    def pin(self):
        """List the chat before the unpinned ones."""
        return self._organise(pinned=True)

    def unpin(self):
        """List the chat among the others again (by when it was updated)."""
        return self._organise(pinned=False)

    def _organise(self, **values: bool):
        if self.pk is None:
            raise ArgumentError("save the chat before archiving or pinning it")
        for name, value in values.items():
            setattr(self, name, value)
        self.save(update_fields=list(values))
        return self

    @property
    def tags(self) -> list[str]:
        """The chat's tags, sorted (``set_tags()``, ``add_tags()``, ``remove_tags()``
        change them)."""
        if "_tag_names" in self.__dict__:  # Chat.objects.with_tags()
            names = self.__dict__["_tag_names"]
            return sorted(names.split("\n")) if names else []
        if self.pk is None:
            return []
        cached = known_rows(self, "tag_rows")
        if cached is not None:
            return sorted(row.name for row in cached)
        return sorted(self.tag_rows.values_list("name", flat=True))

    def set_tags(self, tags):
        """Make ``tags`` the chat's tags: at most ``inputs.MAX_TAGS`` strings of 1 to
        ``inputs.TAG_MAX_LENGTH`` characters, without commas, control characters or a
        space at either end (:class:`~django_llmchat.errors.ArgumentError` otherwise).
        Returns the chat."""
        from ..tags import check_tags

        names = check_tags(list(tags) if isinstance(tags, list | tuple | set) else tags)
        return self._write_tags(lambda current: names)

    def add_tags(self, *tags: str):
        """Add ``tags`` to the chat's (those it has stay; the total is checked)."""
        from ..tags import check_tags

        added = check_tags(list(tags))
        return self._write_tags(lambda current: check_tags(list(dict.fromkeys([*current, *added]))))

    def remove_tags(self, *tags: str):
        """Take ``tags`` off the chat (a tag it does not have is no error)."""
        gone = set(tags)
        return self._write_tags(lambda current: [t for t in current if t not in gone])

    def _write_tags(self, new_names):
        """Replace the chat's tag rows with ``new_names(current names)``, the chat row
        locked meanwhile (two concurrent ``add_tags()`` both count)."""
        if self.pk is None:
            raise ArgumentError("save the chat before tagging it")
        with transaction.atomic():
            list(type(self).objects.select_for_update().filter(pk=self.pk).values_list("pk"))
            current = list(ChatTag.objects.filter(chat_id=self.pk).values_list("name", flat=True))
            names = new_names(sorted(current))
            ChatTag.objects.filter(chat_id=self.pk).exclude(name__in=names).delete()
            ChatTag.objects.bulk_create(
                [ChatTag(chat_id=self.pk, name=n) for n in names if n not in current]
            )
        self.__dict__["_tag_names"] = "\n".join(names)
        forget_rows(self, "tag_rows")
        return self

    # -- running the loop -----------------------------------------------------------------
    runner_class = "django_llmchat.runner.Runner"
    """Dotted path of the class running this chat's loop (the loop is built on the models,
    so a chat names it rather than importing it). A subclass may name its own Runner."""

    def runner(self, context=None):
        """The runner for one call of this chat's loop (the chat must be saved)."""
        if self.pk is None:
            raise ArgumentError(
                "save the chat before running it (Chat.objects.create(...) or chat.save())"
            )
        return import_string(self.runner_class)(self, context=context)

    @staticmethod
    def _check_prompt_type(prompt: Any, attachments: Any) -> list[tuple]:
        if prompt is None:
            if attachments:
                raise ArgumentError("attachments need a prompt")
            return []
        if not isinstance(prompt, str):
            raise ArgumentError(f"prompt must be a string, got {type(prompt).__name__}")
        return _attachment_items(attachments)

    def _runner_for(self, context, double_texting):
        from ..runs.policy import checked

        policy = checked(double_texting)
        runner = self.runner(context)
        runner.double_texting = policy
        return runner

    def ask(
        self,
        prompt: str | None = None,
        attachments=None,
        *,
        context=None,
        parent=None,
        double_texting: str | None = None,
    ):
        """Send ``prompt`` (saved first) and run the loop with non-streaming requests;
        returns the final assistant Message (``None`` when a guardrail blocked the run).
        ``chat.last_run`` is the run. Asked while another run of the chat works, it waits
        for its turn (or follows ``double_texting``: ``"enqueue"``, ``"reject"``,
        ``"interrupt"``, ``"rollback"``; default the chat's ``double_texting``, else
        ``LLMCHAT["DOUBLE_TEXTING"]``). ``parent``: the prompt starts a new branch after
        that message (see :meth:`branch_from`)."""
        runner = self._runner_for(context, double_texting)
        items = self._check_prompt_type(prompt, attachments)
        if parent is None:
            return runner.ask(prompt, items)
        if prompt is None:
            raise ArgumentError("a branch needs a prompt")
        with branching(parent):
            return runner.ask(prompt, items)

    def complete(self, *, context=None):
        """Continue the saved history without a new prompt (answers pending tool calls
        first); returns the final assistant Message."""
        return self.ask(None, context=context)

    def stream(
        self,
        prompt: str | None = None,
        attachments=None,
        *,
        context=None,
        double_texting: str | None = None,
    ):
        """An iterator of the stream events of a run answering ``prompt``. Nothing happens
        until the first ``next()``: then the prompt is stored with its run, before the first
        event. Closing the iterator (or dropping it) ends the run ``cancelled``, its usage
        row kept. With no prompt, the saved history is continued (a retry after an
        ``IncompleteStreamError`` adds no second user turn). ``double_texting``: as
        :meth:`ask`."""
        runner = self._runner_for(context, double_texting)
        items = self._check_prompt_type(prompt, attachments)
        return runner.events(prompt, items, stream=True)

    def ask_later(
        self, prompt: str, attachments=None, *, parent=None, double_texting: str | None = None
    ):
        """Store ``prompt`` (before-guardrails applied) with a queued run, and let a worker
        answer it: ``tasks.complete_chat`` is sent when the current transaction commits.
        Returns the user Message (``None`` when a before-guardrail blocked the prompt:
        nothing is stored, ``chat.last_run.tripwire`` says why); ``chat.last_run`` is the
        queued run.

        Prompts asked while an earlier one is still being answered are queued runs, each
        answered in order. With no Celery broker configured, the task runs in this process
        (see ``LLMCHAT["TASKS_EAGER_WITHOUT_BROKER"]``). ``parent``: the prompt starts a
        new branch after that message (refused with ``ChatBusyError`` while a run is
        unfinished). ``double_texting``: as :meth:`ask` (``"reject"`` raises
        :class:`~django_llmchat.errors.DoubleTextingRejected` while a run is unfinished;
        ``"interrupt"``/``"rollback"`` stop it, and the worker answers this prompt next)."""
        if not isinstance(prompt, str):
            raise ArgumentError(f"prompt must be a string, got {type(prompt).__name__}")
        items = _attachment_items(attachments)
        runner = self._runner_for(None, double_texting)
        if parent is None:
            return runner.ask_later(prompt, items)
        with branching(parent):
            return runner.ask_later(prompt, items)

    async def aask(
        self,
        prompt: str | None = None,
        attachments=None,
        *,
        context=None,
        parent=None,
        double_texting: str | None = None,
    ):
        """Async twin of :meth:`ask` for ASGI views."""

        def ask_in_thread():
            try:
                return self.ask(
                    prompt,
                    attachments,
                    context=context,
                    parent=parent,
                    double_texting=double_texting,
                )
            finally:
                connections.close_all()  # the worker thread's own connections

        return await sync_to_async(ask_in_thread, thread_sensitive=False)()

    def astream(
        self,
        prompt: str | None = None,
        attachments=None,
        *,
        context=None,
        double_texting: str | None = None,
    ):
        """Async twin of :meth:`stream`: an async iterator of events. The loop runs in a
        worker thread; the prompt is saved before the first event."""
        return stream_in_thread(
            lambda: self.stream(prompt, attachments, context=context, double_texting=double_texting)
        )

    @property
    def last_run(self):
        """The chat's latest run (``None`` before the first). After ``ask()``,
        ``stream()`` or ``ask_later()`` in this process: the run that call made, with
        ``message``, ``interrupt`` and ``tripwire`` as that call saw them."""
        found = self.__dict__.get("_last_run")
        if found is not None:
            return found
        if self.pk is None:
            return None
        return self.runs.order_by("-id").first()

    @last_run.setter
    def last_run(self, run) -> None:
        self.__dict__["_last_run"] = run

    def refresh_from_db(self, using=None, fields=None, from_queryset=None):
        """Also forgets the run and the tags this instance remembers (``last_run`` and
        ``tags`` read them anew)."""
        self.__dict__.pop("_last_run", None)
        self.__dict__.pop("_tag_names", None)
        super().refresh_from_db(using=using, fields=fields, from_queryset=from_queryset)
        if fields is None or set(self.TITLE_FIELDS) & set(fields):
            self._loaded_title = (self.__dict__.get("title"), self.__dict__.get("title_source"))

    @property
    def cancel_requested(self) -> bool:
        """Whether a stop was asked for the run working now."""
        if self.pk is None:
            return False
        return Run.objects.filter(chat=self, status=Run.RUNNING, cancel_requested=True).exists()

    def interrupt(self, reason: str | None = None) -> bool:
        """Ask the chat's current run (in any process) to stop between chunks or steps; it
        ends with ``Interrupt(reason=reason)``, the transcript valid, and ``complete()``
        resumes it. A run waiting for a tool-call decision, or queued, ends at once.
        Returns whether there was a run to stop (the first of concurrent requests wins)."""
        if reason is not None and not isinstance(reason, str):
            raise ArgumentError(f"reason must be a string or None, got {type(reason).__name__}")
        if self.pk is None:
            return False
        return import_string(self.runner_class).interrupt(self, reason)

    def cancel(self) -> bool:
        """``interrupt("cancelled")``: the run ends ``cancelled``, with
        ``Interrupt(reason="cancelled")``."""
        return self.interrupt("cancelled")

    def approve(self, call_id: str, *, resume: bool = True):
        """Approve a tool call waiting for approval; when none is left waiting, the run
        resumes here (returns the final Message, else ``None``)."""
        return self.runner().decide(call_id, "approved", resume=resume)

    def deny(self, call_id: str, *, resume: bool = True):
        """Deny a tool call: the model gets a ``denied`` error result and the run resumes."""
        return self.runner().decide(call_id, "denied", resume=resume)

    # -- totals ---------------------------------------------------------------------------
    def path_tokens(self) -> Tokens:
        """Tokens of the active path's messages (their provider attempts, plus hand-built
        messages' own counts): what this branch cost to produce. ``tokens`` is every
        attempt of every branch."""
        on_path = Message.objects.filter(chat=self, on_path=True)
        usage = Usage.objects.filter(message__in=on_path).tokens()
        manual = on_path.filter(usages__isnull=True).aggregate(**{n: Sum(n) for n in TOKEN_FIELDS})
        return usage + Tokens(**manual)

    def path_cost(self) -> Cost:
        """USD of the active path's messages (their attempts, plus supplied costs of
        hand-built ones). ``cost()`` is everything paid, every branch and failed attempt."""
        on_path = Message.objects.filter(chat=self, on_path=True)
        total = Usage.objects.filter(message__in=on_path).cost()
        supplied = on_path.filter(usages__isnull=True, supplied_cost__isnull=False).aggregate(
            s=Sum("supplied_cost")
        )["s"]
        if supplied is not None:
            total = total + Cost(total=supplied)
        return total

    @property
    def tokens(self) -> Tokens:
        """Tokens over every provider attempt, plus hand-built messages without usage rows."""
        usage = self.usages.all().tokens()
        manual = Message.objects.filter(chat=self, usages__isnull=True).aggregate(
            **{n: Sum(n) for n in TOKEN_FIELDS}
        )
        return usage + Tokens(**manual)

    def cost(self) -> Cost:
        """USD over every provider attempt, plus costs supplied on hand-built messages."""
        total = self.usages.all().cost()
        supplied = Message.objects.filter(
            chat=self, usages__isnull=True, supplied_cost__isnull=False
        ).aggregate(s=Sum("supplied_cost"))["s"]
        if supplied is not None:
            total = total + Cost(total=supplied)
        return total


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
