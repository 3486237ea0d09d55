"""Keyset (cursor) pagination on a ``(timestamp, id)`` pair: stable while rows are added,
one query per page whatever the depth, and no COUNT."""

from __future__ import annotations

import re
from collections import OrderedDict
from datetime import UTC, datetime, timedelta

from django.conf import settings as django_settings
from django.db.models import Q
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination, PageNumberPagination
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

__all__ = [
    "ChatCursorPagination",
    "MessageCursorPagination",
    "ModelPagination",
    "RunCursorPagination",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NAIVE_EPOCH = datetime(1970, 1, 1)  # with USE_TZ = False
MICROSECOND = timedelta(microseconds=1)


def page_size(paginator, request) -> int:
    """The ``page_size`` asked for: the paginator's default when absent, a 400 naming the
    parameter unless it is a whole number from 1 to ``max_page_size``."""
    raw = request.query_params.get(paginator.page_size_query_param)
    if raw is None:
        return paginator.page_size
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6) or not (
        1 <= int(raw) <= paginator.max_page_size
    ):
        raise ValidationError(
            {
                paginator.page_size_query_param: [
                    f"must be an integer between 1 and {paginator.max_page_size}"
                ]
            }
        )
    return int(raw)


class KeysetPagination(BasePagination):
    """Pages ordered by ``(time_field, "id")``; ``descending`` flips the order.

    Query parameters: ``cursor`` (opaque, from the ``next``/``previous`` links),
    ``page_size`` (up to ``max_page_size``) and ``from=end`` to start at the other end.
    """

    time_field = "created_at"
    integer_key = False  # the ordering field is an integer (a position), not a timestamp
    descending = False
    page_size = 50
    max_page_size = 200
    cursor_query_param = "cursor"
    page_size_query_param = "page_size"
    from_query_param = "from"

    # -- cursor encoding ------------------------------------------------------------------
    # ``[b]<key>.<id>``: ``b`` pages backwards; the key is the position, or the time in
    # microseconds since the Unix epoch (UTC). Every string the pattern matches is a place
    # in the list, so the schema states the whole rule.
    KEY_DIGITS = 17  # 10**17 microseconds: past the year 5000, within datetime's range
    ID_DIGITS = 18  # below 2**63

    @classmethod
    def cursor_pattern(cls) -> str:
        digits = cls.ID_DIGITS if cls.integer_key else cls.KEY_DIGITS
        return rf"^b?[0-9]{{1,{digits}}}\.[0-9]{{1,{cls.ID_DIGITS}}}$"

    @staticmethod
    def encode_cursor(position: tuple[datetime | int, int], backwards: bool) -> str:
        key = position[0]
        if not isinstance(key, int):
            key = (key - (NAIVE_EPOCH if key.tzinfo is None else EPOCH)) // MICROSECOND
        return f"{'b' if backwards else ''}{key}.{position[1]}"

    @staticmethod
    def _invalid(message: str = "invalid cursor") -> ValidationError:
        return ValidationError({"cursor": [message]})

    def decode_cursor(self, value: str) -> tuple[tuple[datetime | int, int], bool]:
        found = re.fullmatch(self.cursor_pattern(), value)
        if found is None:
            raise self._invalid(
                "invalid cursor: use the next or previous link of a page of this list"
            )
        backwards = value.startswith("b")
        key, _, pk = value.lstrip("b").partition(".")
        if self.integer_key:
            return (int(key), int(pk)), backwards
        epoch = EPOCH if django_settings.USE_TZ else NAIVE_EPOCH
        return (epoch + int(key) * MICROSECOND, int(pk)), backwards

    # -- paging ---------------------------------------------------------------------------
    def get_page_size(self, request) -> int:
        return page_size(self, request)

    def _order(self, backwards: bool) -> tuple[str, str]:
        down = self.descending != backwards
        sign = "-" if down else ""
        return (f"{sign}{self.time_field}", f"{sign}id")

    def _after(self, position: tuple[datetime, int], backwards: bool) -> Q:
        down = self.descending != backwards
        op = "lt" if down else "gt"
        stamp, pk = position
        return Q(**{f"{self.time_field}__{op}": stamp}) | Q(
            **{self.time_field: stamp, f"id__{op}": pk}
        )

    def paginate_queryset(self, queryset, request, view=None):
        def fetch(position, backwards: bool, size: int) -> list:
            return list(self.window(queryset, position, backwards)[: size + 1])

        return self.paginate(request, fetch)

    def window(self, queryset, position, backwards: bool):
        """``queryset`` in the page's order, from ``position`` (a cursor's place, or
        ``None`` for the start) on."""
        qs = queryset.order_by(*self._order(backwards))
        if position is not None:
            qs = qs.filter(self._after(position, backwards))
        return qs

    def paginate(self, request, fetch) -> list:
        """The page ``request`` asks for, its rows read by ``fetch(position, backwards,
        size)``: up to ``size + 1`` rows from ``position`` (``None``: the start; with
        ``backwards``, the end) in the window's order. Rows have ``pk`` and the
        ordering field as attributes."""
        self.request = request
        size = self.get_page_size(request)
        raw = request.query_params.get(self.cursor_query_param)
        start = request.query_params.get(self.from_query_param)
        if start not in (None, "start", "end"):
            raise ValidationError({self.from_query_param: ["must be 'start' or 'end'"]})
        position = None
        backwards = start == "end"
        if raw is not None:
            position, backwards = self.decode_cursor(raw)
        rows = fetch(position, backwards, size)
        more = len(rows) > size
        rows = rows[:size]
        if backwards:
            rows.reverse()
        # links: towards the travel direction exists when more rows were found; the other
        # way exists when we started from a cursor
        self._next = self._previous = None
        if rows:
            first, last = rows[0], rows[-1]
            ahead = more if not backwards else position is not None
            behind = position is not None if not backwards else more
            if ahead:
                self._next = self._link(self._key(last), False)
            if behind:
                self._previous = self._link(self._key(first), True)
        return rows

    def _key(self, row) -> tuple[datetime, int]:
        return (getattr(row, self.time_field), row.pk)

    def _link(self, position: tuple[datetime, int], backwards: bool) -> str:
        url = self.request.build_absolute_uri()
        url = remove_query_param(url, self.from_query_param)
        return replace_query_param(
            url, self.cursor_query_param, self.encode_cursor(position, backwards)
        )

    def get_next_link(self) -> str | None:
        return self._next

    def get_previous_link(self) -> str | None:
        return self._previous

    def get_paginated_response(self, data) -> Response:
        return Response(
            OrderedDict([("next", self._next), ("previous", self._previous), ("results", data)])
        )

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["results"],
            "properties": {
                "next": {"type": "string", "nullable": True, "format": "uri"},
                "previous": {"type": "string", "nullable": True, "format": "uri"},
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view):
        return [
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "Where the page starts: take it from a page's next/previous "
                "link (`[b]<key>.<id>`).",
                "schema": {"type": "string", "pattern": self.cursor_pattern()},
            },
            {
                "name": self.page_size_query_param,
                "required": False,
                "in": "query",
                "description": f"Rows per page (1-{self.max_page_size}, default {self.page_size}).",
                "schema": {"type": "integer", "minimum": 1, "maximum": self.max_page_size},
            },
            {
                "name": self.from_query_param,
                "required": False,
                "in": "query",
                "description": "Start at this end when no cursor is given.",
                "schema": {"type": "string", "enum": ["start", "end"]},
            },
        ]


class MessageCursorPagination(KeysetPagination):
    """Messages in transcript order, by ``(position, id)``; ``?from=end`` gives the latest
    page."""

    time_field = "position"
    integer_key = True
    descending = False
    page_size = 50


class RunCursorPagination(KeysetPagination):
    """Runs newest first by ``(created_at, id)``."""

    time_field = "created_at"
    descending = True
    page_size = 50


class ChatCursorPagination(KeysetPagination):
    """Chats pinned first, then most recently updated first, by ``(pinned, updated_at,
    id)``. The cursor carries the pinned flag: ``[b][p]<time>.<id>`` (``p``: a place
    among the pinned chats)."""

    time_field = "updated_at"
    descending = True
    page_size = 50

    @classmethod
    def cursor_pattern(cls) -> str:
        return rf"^b?p?[0-9]{{1,{cls.KEY_DIGITS}}}\.[0-9]{{1,{cls.ID_DIGITS}}}$"

    def encode_cursor(self, position, backwards: bool) -> str:  # type: ignore[override]
        stamp, pk, pinned = position
        plain = KeysetPagination.encode_cursor((stamp, pk), False)
        return f"{'b' if backwards else ''}{'p' if pinned else ''}{plain}"

    def decode_cursor(self, value: str):
        if re.fullmatch(self.cursor_pattern(), value) is None:
            raise self._invalid(
                "invalid cursor: use the next or previous link of a page of this list"
            )
        backwards = value.startswith("b")
        rest = value[1:] if backwards else value
        pinned = rest.startswith("p")
        (stamp, pk), _ = super().decode_cursor(rest[1:] if pinned else rest)
        return (stamp, pk, pinned), backwards

    def _key(self, row):
        return (row.updated_at, row.pk, row.pinned)

    def _order(self, backwards: bool) -> tuple[str, ...]:
        sign = "" if backwards else "-"
        return (f"{sign}pinned", *super()._order(backwards))

    def _after(self, position, backwards: bool) -> Q:
        stamp, pk, pinned = position
        within = Q(pinned=pinned) & super()._after((stamp, pk), backwards)
        # forwards (pinned first): the unpinned follow the pinned; backwards the reverse
        beyond = pinned if not backwards else not pinned
        return within | Q(pinned=not pinned) if beyond else within


class ModelPagination(PageNumberPagination):
    """Numbered pages; a ``page_size`` that is not an integer in range is a 400 (not
    silently the default)."""

    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request) -> int:
        return page_size(self, request)

    def get_page_number(self, request, paginator):
        """A whole number from 1 in ASCII digits (``int()`` also reads ``٣``), or DRF's
        ``last``; anything else is a 400 naming the parameter."""
        raw = request.query_params.get(self.page_query_param)
        if not raw:
            return 1
        if raw in self.last_page_strings:
            return paginator.num_pages
        if not (raw.isascii() and raw.isdigit() and int(raw) >= 1):
            raise ValidationError({self.page_query_param: ["must be an integer of 1 or more"]})
        return int(raw)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["description"] = (
                    f"Rows per page (1-{self.max_page_size}, default {self.page_size})."
                )
                parameter["schema"] = {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": self.max_page_size,
                }
            elif parameter["name"] == self.page_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1}
        return parameters
