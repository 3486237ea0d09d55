"""``GET chats/{id}/messages/`` builds its JSON from rows (``api/message_page.py``): the
same bytes as ``MessageSerializer`` renders of the same page loaded with
``load_messages``, for every kind of message, both directions, both paths, encrypted
and redacted at rest; its statements compiled once."""

from __future__ import annotations

import json
from decimal import Decimal
from unittest import mock

import pytest
from cryptography.fernet import Fernet
from django.db import connection
from django.db.models.sql.compiler import SQLCompiler
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from django_llmchat.api.message_serializers import MessageSerializer, load_messages
from django_llmchat.api.pagination import MessageCursorPagination
from django_llmchat.models import Attachment, Chat, LLMModel, Message, ToolCall, Usage
from django_llmchat.models.message import QUEUED_POSITION, clock_position
from django_llmchat.values import Citation, Cost, ServerToolCall, Tokens
from tests.factories import build_transcript

from .conftest import url

pytestmark = pytest.mark.django_db

KEY = Fernet.generate_key().decode()
AT_REST = {
    "ENCRYPTION_KEYS": [KEY],
    "REDACT_STORED": True,
    "REDACT": "tests.providers.test_redact.mask",
}


def usage(chat, message, **fields):
    fields = {"provider": "openai", "model_id": "gpt-4.1-mini", "status": "succeeded", **fields}
    return Usage.objects.create(chat=chat, message=message, **fields)


CITED = 'Write to ops@example.com — ünïcode \u2028 "quoted" <b>'
# assistant replies priced without usage rows: by hand, from the registry's table (acme-1),
# from genai-prices, not at all
PRICED = [
    ("Priced by hand.", {"cost": "0.5"}),
    ("Acme.", {"model_id": "acme-1", "provider": "acme", "tokens": Tokens(1000, 10)}),
    ("Listed.", {"model_id": "gpt-4.1-mini", "provider": "openai", "tokens": Tokens(1000, 10)}),
    ("Unknown model.", {"model_id": "no-such-model"}),
    ("Nothing known.", {}),
]


def rich_chat(owner) -> Chat:
    """A chat with every kind of message the list shows, stored encrypted and redacted."""
    chat = Chat.objects.create(user=owner, model_id="gpt-4.1-mini", provider="openai")
    chat.add_message(role="system", content="Be brief.")
    build_transcript(chat, 3)  # tool calls and results, usage, thinking, attachments
    first = chat.messages.filter(role="user").order_by("position", "id").first()
    reply = chat.messages.filter(role="assistant", finish_reason="stop").order_by("id").first()
    # branches: a regenerated reply and an edited first prompt, off the active path
    for role, content, parent in (
        ("assistant", "Another take.", reply.parent),
        ("user", "Q", None),
    ):
        Message.objects.create(chat=chat, role=role, content=content, parent=parent, on_path=False)
    Message.objects.filter(pk=first.pk).update(parent=None)
    # a reply with citations, server tools, two attempts (one unpriced), feedback, a cache
    # boundary, an attachment and text the redaction masks
    cited = chat.add_message(
        role="assistant",
        content=CITED,
        **{"model_id": "gpt-4.1-mini", "provider": "openai", "finish_reason": "stop"},
        thinking_text="Mail a@b.co",
        citations=[Citation(url="https://example.com", title="Docs", start_index=0)],
        server_tool_calls=[ServerToolCall(name="web_search", id="ws1", arguments={"q": "x"})],
        cache_boundary=True,
    )
    spent = Cost(Decimal("0.000007"), Decimal("0.000012"), total=Decimal("0.000019"))
    usage(chat, cited, tokens=Tokens(7, 3, None, 2, 1), cost=spent)
    usage(chat, cited, input_tokens=5, status="failed")
    cited.rate(1, "good", user=owner)
    image = {"filename": "map.png", "mime_type": "image/png", "size": 9, "sha256": "1" * 64}
    Attachment.objects.create(message=cited, file="llmchat/x/map.png", **image)
    # tool calls: approved and answered, denied, still waiting
    asking = chat.add_message(role="assistant", content="", finish_reason="tool_calls")
    calls = [
        {"call_id": "c1", "arguments": {"card": "4242 4242 4242 4242"}, "approval": "approved"},
        {"call_id": "c2", "approval": "denied"},
        {"call_id": "c3", "arguments": [1]},
    ]
    approved, *_ = (
        ToolCall.objects.create(chat=chat, message=asking, name="vault", **call) for call in calls
    )
    chat.add_message(role="tool", content="opened", parent_tool_call=approved)
    LLMModel.objects.create(provider="acme", model_id="acme-1", name="A", pricing={"input_mtok": 2})
    for content, fields in PRICED:
        chat.add_message(role="assistant", content=content, **fields)
    chat.add_message(role="user", content="Counted.", tokens=Tokens(input_tokens=4))
    # a summary, a prompt queued behind a run
    summary = chat.add_message(role="user", content="So far: weather.")
    Message.objects.filter(pk=summary.pk).update(summary_until=reply)
    queued = QUEUED_POSITION + clock_position()
    Message.objects.create(chat=chat, role="user", content="Queued.", position=queued)
    return chat


def serialized(path: str, params: dict, user, chat: Chat) -> bytes:
    """The page as the serializers render it: the ORM queryset through the same
    paginator, ``load_messages``, ``MessageSerializer``, DRF's JSON renderer."""
    request = Request(APIRequestFactory().get(path, params))
    rows = Message.objects.filter(chat=chat)
    if params.get("path") != "all":
        rows = rows.filter(on_path=True)
    paginator = MessageCursorPagination()
    page = paginator.paginate_queryset(rows.select_related("parent_tool_call"), request)
    load_messages(page)
    data = MessageSerializer(page, many=True, context={"request": request}).data
    return JSONRenderer().render(paginator.get_paginated_response(data).data)


def walk(api, chat, **params):
    """Every page from the start (or the end), following the links; each page's bytes
    beside the serializers' bytes of the same page."""
    path = url("chat-messages", pk=chat.pk)
    pages = []
    link_name = "previous" if params.get("from") == "end" else "next"
    response = api.get(path, params)
    while True:
        assert response.status_code == 200
        query = response.wsgi_request.GET.dict()
        pages.append((response.content, serialized(path, query, api.user, chat)))
        link = response.json()[link_name]
        if not link:
            return pages
        response = api.get(link)


@pytest.mark.parametrize("scope", ["active", "all"])
@pytest.mark.parametrize("start", ["start", "end"])
@pytest.mark.parametrize("size", [4, 50])
def test_the_page_is_the_serializers_page_to_the_byte(api, owner, scope, start, size):
    with override_settings(LLMCHAT=AT_REST):
        chat = rich_chat(owner)
        pages = walk(api, chat, path=scope, page_size=size, **{"from": start})
    assert sum(len(fast) for fast, _ in pages) > 1000
    for fast, reference in pages:
        assert fast == reference


def test_encrypted_and_redacted_at_rest_read_as_plain_redacted_text(api, owner):
    with override_settings(LLMCHAT=AT_REST):
        chat = rich_chat(owner)
        body = api.get(url("chat-messages", pk=chat.pk), {"page_size": 200}).json()
    with connection.cursor() as cursor:
        cursor.execute("SELECT content FROM llmchat_message WHERE chat_id = %s", [chat.pk])
        assert all(not text or text.startswith("llmchat-fernet:") for (text,) in cursor.fetchall())
    shown = {m["content"]: m for m in body["results"]}
    cited = shown[CITED.replace("ops@example.com", "[email]")]
    assert cited["thinking"] == "Mail [email]"
    assert cited["tokens"] == {**Tokens(12, 3, None, 2, 1).to_dict(), "total_tokens": 17}
    assert cited["cost"] == {
        "input": "0.0000070000",
        "output": "0.0000120000",
        "total": "0.0000190000",
    }
    assert cited["attachments"][0]["url"] == "http://testserver/llmchat/x/map.png"
    assert shown["Priced by hand."]["cost"] == {"total": "0.5000000000"}
    acme = shown["Acme."]["cost"]  # from the registry's table, which has no output price
    assert acme["input"] == "0.0020000000" and "total" not in acme
    assert shown["Listed."]["cost"]["total"]  # genai-prices
    assert shown["Counted."]["cost"] == {} and shown["Nothing known."]["cost"] == {}
    [asking] = [m for m in body["results"] if len(m["tool_calls"]) == 3]
    assert [c["arguments"] for c in asking["tool_calls"]] == [{"card": "[card]"}, {}, [1]]
    assert [c["approval"] for c in asking["tool_calls"]] == ["approved", "denied", ""]
    assert asking["tool_calls"][0]["result"]["content"] == "opened"
    assert [c["result"] for c in asking["tool_calls"][1:]] == [None, None]


def test_a_warm_page_compiles_no_statement(api, owner):
    chat = rich_chat(owner)
    path = url("chat-messages", pk=chat.pk)
    compiled = []
    real = SQLCompiler.as_sql

    def as_sql(self, *args, **kwargs):
        compiled.append(self.query.model)
        return real(self, *args, **kwargs)

    for params in ({}, {"from": "end"}, {"path": "all", "page_size": 7}):
        first = api.get(path, params)  # compiles the page's statements, once per process
        compiled.clear()
        with (
            mock.patch.object(SQLCompiler, "as_sql", as_sql),
            CaptureQueriesContext(connection) as queries,
        ):
            again = api.get(path, params)
        assert again.content == first.content
        # the token's statement is the ORM's, the registry's too (when a message priced
        # from it is on the page): nothing else is compiled again
        assert set(compiled) <= {LLMModel, Token}
        assert len(queries) == 6 + (LLMModel in compiled)


def test_times_in_the_current_time_zone(api, owner):
    chat = rich_chat(owner)
    with override_settings(TIME_ZONE="Asia/Kolkata"):
        pages = walk(api, chat, page_size=9)
    assert json.loads(pages[0][0])["results"][0]["created_at"].endswith("+05:30")
    for fast, reference in pages:
        assert fast == reference
