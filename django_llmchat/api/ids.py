"""The string ids clients send, in paths and in bodies, and what a row can have: one
with a character no row holds (a NUL, which PostgreSQL cannot store and refuses with an
error) or longer than its column is refused before it reaches the database.

In a path the rule is a converter: a path it refuses matches no route and answers the
API's JSON 404 (``urls.py`` registers them)."""

from __future__ import annotations

import re

from ..models import ToolCall

__all__ = [
    "CALL_ID_PATTERN",
    "CLIENT_ID_PATTERN",
    "CallIdConverter",
    "ClientIdConverter",
    "is_call_id",
]

_CONTROL = r"\x00-\x1f\x7f-\x9f"  # C0 and C1 control characters, DEL
CALL_ID_LENGTH = ToolCall._meta.get_field("call_id").max_length
CALL_ID_PATTERN = rf"[^{_CONTROL}]{{1,{CALL_ID_LENGTH}}}"
"""A tool call's id as the provider gave it: up to the column's length, no C0 or C1
control character."""
CLIENT_ID_PATTERN = r"[A-Za-z0-9_\-.:~]{1,255}"
"""What a client-made chat id may be: it is part of the resume URL (``ui/chat/{id}/stream``),
and ASCII digits there are a chat's primary key."""

_CALL_ID = re.compile(CALL_ID_PATTERN)


def is_call_id(value: object) -> bool:
    """Whether a tool call can have ``value`` as its id."""
    return isinstance(value, str) and _CALL_ID.fullmatch(value) is not None


class PathIdConverter:
    """A string id in a path (no ``/``)."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class CallIdConverter(PathIdConverter):
    """``tool-calls/{call_id}/``: a tool call's id."""

    regex = rf"[^/{_CONTROL}]{{1,{CALL_ID_LENGTH}}}"


class ClientIdConverter(PathIdConverter):
    """``ui/chat/{id}/stream``: a chat's primary key or the id its client made."""

    regex = CLIENT_ID_PATTERN
