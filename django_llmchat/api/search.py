"""``GET chats/?search=<words>``: the user's chats matching the words, best first, each
with the message that matched (django_llmchat.chats.search)."""

from __future__ import annotations

from collections import OrderedDict

from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from ..chats.search import SearchUnavailable, snippet, words_of
from ..errors import ArgumentError
from ..models import Message
from .pagination import page_size
from .serializers import ChatSerializer

__all__ = [
    "PAGE_PARAMETER",
    "SEARCH_PARAMETER",
    "ChatSearchSerializer",
    "SearchPagination",
    "search_page",
]

SEARCH_PARAMETER = OpenApiParameter(
    "search",
    # at least one word character (a search without a word is a 400)
    {"type": "string", "pattern": r"\w"},
    OpenApiParameter.QUERY,
    description="Words (up to 16) that the chat's title or one of its messages (of any "
    "branch) holds, all of them: the chats found come best match first, each with "
    "`match` (the message that matched and a plain-text snippet of it). PostgreSQL "
    "stems the words in `LLMCHAT['SEARCH']['language']`; pages with `page`. A 400 when "
    "message content is encrypted at rest (`LLMCHAT['ENCRYPTION_KEYS']`).",
)

PAGE_PARAMETER = OpenApiParameter(
    "page",
    {"type": "integer", "minimum": 1, "maximum": 999999},
    OpenApiParameter.QUERY,
    description="With `search`: the page of results (from 1; `next`/`previous` link them).",
)


def checked_page(request) -> int:
    """The ``page`` of a search (1 when not given); a 400 naming ``page`` for anything but
    a whole number from 1 to 999999."""
    raw = request.query_params.get("page", "1")
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6 and int(raw) >= 1):
        raise ValidationError({"page": ["must be a whole number from 1 to 999999"]})
    return int(raw)


class SearchPagination(BasePagination):
    """Numbered pages of a ranked search (no count): ``page`` and ``page_size``."""

    page_size = 50
    max_page_size = 200
    page_size_query_param = "page_size"
    page_query_param = "page"

    def paginate_queryset(self, queryset, request, view=None):
        size = page_size(self, request)
        number = checked_page(request)
        rows = list(queryset[(number - 1) * size : number * size + 1])
        url = request.build_absolute_uri()
        self._next = (
            replace_query_param(url, self.page_query_param, number + 1)
            if len(rows) > size
            else None
        )
        self._previous = None
        if number == 2:
            self._previous = remove_query_param(url, self.page_query_param)
        elif number > 2:
            self._previous = replace_query_param(url, self.page_query_param, number - 1)
        return rows[:size]

    def get_paginated_response(self, data) -> Response:
        return Response(
            OrderedDict([("next", self._next), ("previous", self._previous), ("results", data)])
        )


MATCH_SCHEMA = {
    "type": "object",
    "nullable": True,
    "description": "In search results (null in the list without `search`): the best "
    "matching message (null when only "
    "the title matched) and a plain-text snippet of it, and the rank (higher is better).",
    "properties": {
        "message": {"type": "integer", "nullable": True},
        "snippet": {"type": "string"},
        "rank": {"type": "number"},
    },
}


class ChatSearchSerializer(ChatSerializer):
    """A chat found by a search, with ``match``."""

    match = serializers.SerializerMethodField()

    class Meta(ChatSerializer.Meta):
        fields = (*ChatSerializer.Meta.fields, "match")

    @extend_schema_field(MATCH_SCHEMA)
    def get_match(self, obj) -> dict | None:
        if not hasattr(obj, "search_rank"):  # the list without a search
            return None
        found = getattr(obj, "search_message_id", None)
        contents = self.context.get("search_contents", {})
        words = self.context.get("search_words", [])
        return {
            "message": found,
            "snippet": snippet(contents.get(found, "") if found else obj.title, words),
            "rank": round(float(getattr(obj, "search_rank", 0) or 0), 6),
        }


def search_page(view, request, queryset, text: str) -> Response:
    """The response of ``chats/?search=text`` over ``queryset`` (the user's chats)."""
    try:
        found = queryset.search(text)
    except SearchUnavailable as exc:
        raise ValidationError({"search": [str(exc)]}) from None
    except ArgumentError as exc:
        raise ValidationError({"search": [str(exc)]}) from None
    paginator = SearchPagination()
    chats = paginator.paginate_queryset(found, request, view)
    ids = [c.search_message_id for c in chats if c.search_message_id]
    contents = dict(Message.objects.filter(pk__in=ids).values_list("pk", "content"))
    context = {
        **view.get_serializer_context(),
        "search_contents": contents,
        "search_words": words_of(text),
    }
    data = ChatSearchSerializer(chats, many=True, context=context).data
    return paginator.get_paginated_response(data)
