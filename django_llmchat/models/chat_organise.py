"""Archive, pin and tags: what sorts a chat without changing it (``updated_at`` stays,
the chat list's order too)."""

from __future__ import annotations

from django.db import models, transaction
from django.db.models import Aggregate, Exists, OuterRef, Subquery, TextField

from ..db.prepared import forget_rows, known_rows
from ..errors import ArgumentError
from .tag import ChatTag


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


class OrganisingQuerySet(models.QuerySet):
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


class ChatOrganising:
    """``archive``, ``pin``, ``tags`` and their counterparts: a mixin of
    :class:`~django_llmchat.models.AbstractChat`."""

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
        from .tags import check_tags

        names = check_tags(list(tags) if isinstance(tags, list | tuple | set) else tags)
        return self._write_tags(lambda current: names)

    def add_tags(self, *tags: str):
        """Add ``tags`` to the chat's (those it has stay; the total is checked)."""
        from .tags import check_tags

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
