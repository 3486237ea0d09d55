"""A chat's tags: what a tag is (:data:`TAG_PATTERN`) and how many a chat has, checked
for every path that writes them (REST, the admin, Python); :mod:`django_llmchat.inputs`
gives them with the other input rules."""

from __future__ import annotations

import re
from typing import Any

from ..errors import InputError

__all__ = ["MAX_TAGS", "TAG_MAX_LENGTH", "TAG_PATTERN", "check_tag", "check_tags"]

MAX_TAGS = 20
"""The most tags a chat has."""
TAG_MAX_LENGTH = 64
"""The longest tag, in characters (the column's length)."""
# no commas (the admin's tag box is a comma list), no control characters, nothing but a
# visible character at either end (a pattern ECMA-262 regexes read as Python's do: the
# schema states it; lone surrogates, which no JSON Schema regex can name, are refused by
# check_tag beside it)
_TAG_CHAR = r"[^,\x00-\x1f\x7f-\x9f]"
_TAG_EDGE = r"[^\s,\x00-\x1f\x7f-\x9f]"
TAG_PATTERN = rf"^{_TAG_EDGE}(?:{_TAG_CHAR}{{0,{TAG_MAX_LENGTH - 2}}}{_TAG_EDGE})?$"
"""What a tag is (after trimming): 1 to :data:`TAG_MAX_LENGTH` characters, no comma, no
control character, no whitespace at either end."""
_TAG = re.compile(TAG_PATTERN)
_SURROGATE = re.compile("[\ud800-\udfff]")


def check_tag(tag: Any, *, field: str = "tag") -> str:
    """One tag, as given (nothing is trimmed)."""
    if not isinstance(tag, str):
        raise InputError(field, "must be a string")
    if not _TAG.fullmatch(tag) or _SURROGATE.search(tag):
        raise InputError(
            field,
            f"must be 1 to {TAG_MAX_LENGTH} characters without commas or control "
            "characters, not starting or ending with a space",
        )
    return tag


def check_tags(tags: Any, *, field: str = "tags") -> list[str]:
    """A chat's tags: a list of at most :data:`MAX_TAGS` strings, each a tag by
    :data:`TAG_PATTERN`; returned in the order given, without repeats."""
    if not isinstance(tags, list | tuple) or not all(isinstance(t, str) for t in tags):
        raise InputError(field, "must be a list of strings")
    if len(tags) > MAX_TAGS:
        raise InputError(field, f"at most {MAX_TAGS} tags")
    return list(dict.fromkeys(check_tag(t, field=field) for t in tags))
