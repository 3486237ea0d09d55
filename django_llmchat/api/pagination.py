"""Keyset (cursor) pagination on a ``(timestamp, id)`` pair: stable while rows are added,
one query per page whatever the depth, and no COUNT."""

from __future__ import annotations

import base64
import binascii
import json
from collections import OrderedDict
from datetime import datetime

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

MAX_ID = 2**63 - 1


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
    @staticmethod
    def encode_cursor(position: tuple[datetime | int, int], backwards: bool) -> str:
        key = position[0]
        data = {"t": key if isinstance(key, int) else key.isoformat(), "i": position[1]}
        if backwards:
            data["b"] = 1
        raw = json.dumps(data, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @staticmethod
    def _invalid(message: str = "invalid cursor") -> ValidationError:
        return ValidationError({"cursor": [message]})

    def decode_cursor(self, value: str) -> tuple[tuple[datetime, int], bool]:
        try:
            padded = value + "=" * (-len(value) % 4)
            data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        except (ValueError, binascii.Error, UnicodeError):
            raise self._invalid() from None
        if not isinstance(data, dict):
            raise self._invalid()
        stamp, pk, backwards = data.get("t"), data.get("i"), data.get("b", 0)
        if type(pk) is not int or backwards not in (0, 1) or not 0 <= pk <= MAX_ID:
            raise self._invalid()
        if self.integer_key:
            if type(stamp) is not int or not 0 <= stamp <= MAX_ID:
                raise self._invalid()
            return (stamp, pk), bool(backwards)
        if not isinstance(stamp, str):
            raise self._invalid()
        try:
            when = datetime.fromisoformat(stamp)
        except ValueError:
            raise self._invalid() from None
        if when.tzinfo is None:
            raise self._invalid()
        return (when, pk), bool(backwards)

    # -- paging ---------------------------------------------------------------------------
    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 6) or not (
            1 <= int(raw) <= self.max_page_size
        ):
            raise ValidationError(
                {
                    self.page_size_query_param: [
                        f"must be an integer between 1 and {self.max_page_size}"
                    ]
                }
            )
        return int(raw)

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
        qs = queryset.order_by(*self._order(backwards))
        if position is not None:
            qs = qs.filter(self._after(position, backwards))
        rows = list(qs[: size + 1])
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
                "description": "The pagination cursor value (from a next/previous link).",
                "schema": {"type": "string"},
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
    """Chats most recently updated first by ``(updated_at, id)``."""

    time_field = "updated_at"
    descending = True
    page_size = 50


class ModelPagination(PageNumberPagination):
    """Numbered pages; a ``page_size`` that is not an integer in range is a 400 (not
    silently the default)."""

    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 6) or not (
            1 <= int(raw) <= self.max_page_size
        ):
            raise ValidationError(
                {
                    self.page_size_query_param: [
                        f"must be an integer between 1 and {self.max_page_size}"
                    ]
                }
            )
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
