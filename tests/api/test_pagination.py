"""Cursor pages (``api/pagination.py``): a cursor is ``[b]<key>.<id>`` (``p`` for a
pinned chat), every string its pattern matches decodes to a place and encodes back the
same; anything else, and a ``page_size`` out of range, is a 400 naming the parameter."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from django_llmchat.api.pagination import (
    ChatCursorPagination,
    KeysetPagination,
    MessageCursorPagination,
    ModelPagination,
    RunCursorPagination,
    page_size,
)

STAMP = datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def _request(**params):
    return Request(APIRequestFactory().get("/", params))


def test_a_time_cursor_round_trips_to_the_microsecond():
    cursor = KeysetPagination.encode_cursor((STAMP, 42), False)
    assert cursor == f"{int(STAMP.timestamp() * 1_000_000)}.42"
    assert RunCursorPagination().decode_cursor(cursor) == ((STAMP, 42), False)
    back = KeysetPagination.encode_cursor((STAMP, 42), True)
    assert back == "b" + cursor and RunCursorPagination().decode_cursor(back)[1] is True


def test_a_position_cursor_is_two_integers():
    assert MessageCursorPagination.encode_cursor((7, 9), True) == "b7.9"
    assert MessageCursorPagination().decode_cursor("b7.9") == ((7, 9), True)
    assert MessageCursorPagination().decode_cursor("0.1") == ((0, 1), False)


def test_a_chat_cursor_carries_the_pinned_flag():
    pages = ChatCursorPagination()
    for pinned in (True, False):
        for backwards in (True, False):
            cursor = pages.encode_cursor((STAMP, 5, pinned), backwards)
            assert cursor.startswith("b" * backwards + "p" * pinned)
            assert pages.decode_cursor(cursor) == ((STAMP, 5, pinned), backwards)


@pytest.mark.parametrize(
    "pages, cursor",
    [
        (RunCursorPagination(), "x1.2"),
        (RunCursorPagination(), "1.2.3"),
        (RunCursorPagination(), "p1.2"),  # the pinned flag is the chat list's only
        (RunCursorPagination(), "1" * 18 + ".2"),  # past the key's 17 digits
        (MessageCursorPagination(), "1.-2"),
        (MessageCursorPagination(), "١.2"),  # digits, but not ASCII ones
        (ChatCursorPagination(), "pb1.2"),  # backwards comes first
        (ChatCursorPagination(), ""),
    ],
)
def test_anything_else_is_a_400_naming_the_cursor(pages, cursor):
    with pytest.raises(ValidationError) as refused:
        pages.decode_cursor(cursor)
    assert "cursor" in refused.value.detail


@pytest.mark.parametrize(
    "raw, size",
    [
        (None, 50),
        ("1", 1),
        ("200", 200),
        ("0", None),
        ("201", None),
        ("abc", None),
        ("٣", None),
        ("1000000", None),
        ("-1", None),
        ("", None),
    ],
)
def test_page_size(raw, size):
    request = _request(**({} if raw is None else {"page_size": raw}))
    if size is None:
        with pytest.raises(ValidationError) as refused:
            page_size(RunCursorPagination(), request)
        assert refused.value.detail == {"page_size": ["must be an integer between 1 and 200"]}
    else:
        assert page_size(RunCursorPagination(), request) == size


def test_the_model_list_pages_by_number_up_to_its_own_maximum():
    pages = ModelPagination()
    assert pages.get_page_size(_request()) == 100
    assert pages.get_page_size(_request(page_size="500")) == 500
    with pytest.raises(ValidationError):
        pages.get_page_size(_request(page_size="501"))
