"""Chats with a whole transcript (a tool call, an attachment file, usage rows, an
idempotency key and a live Redis event stream) for the retention and erasure tests."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.utils import timezone

from django_llmchat import streams
from django_llmchat.events import RunFinished, RunStarted
from django_llmchat.models import Attachment, Chat, IdempotencyKey
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call
from django_llmchat.tools import tool
from tests.conftest import require_service


@tool
def weather_lookup(city: str) -> str:
    """Looks a city up"""
    return f"{city}: sunny"


def redis_events():
    """The settings of a real Redis for the event streams, with a key prefix of its own
    (its keys deleted after): the body of a test module's ``events`` fixture."""
    url = require_service("REDIS_URL")
    prefix = f"llmchat-test-{uuid.uuid4().hex[:8]}"
    settings = {"EVENTS_URL": url, "EVENTS_KEY_PREFIX": prefix}
    yield settings
    client = streams.client()
    keys = list(client.scan_iter(match=f"{prefix}:*"))
    if keys:
        client.delete(*keys)


def make_chat(fake_llm, user, *, title="Trip to Paris", days_old=0, **fields) -> Chat:
    """A chat of ``user`` answered through the fake server: a prompt with a text file, a
    tool call and its result, the answer; its event stream published; an idempotency
    key; ``updated_at`` moved ``days_old`` days back."""
    chat = Chat.objects.create(
        user=user, title=title, provider="openai", model_id="gpt-4.1-mini", **fields
    )
    chat.tools = ["weather_lookup"]
    chat.save()
    fake_llm.script(
        Reply(tool_calls=[Call("weather_lookup", {"city": "Paris"})]),
        Reply("Sunny in Paris", usage={"input_tokens": 100, "output_tokens": 20}),
    )
    chat.ask("Weather in Paris?", attachments=[("notes.txt", b"my private notes")])
    if streams.enabled():
        streams.publish(chat.pk, RunStarted(run_id="r1"))
        streams.publish(chat.pk, RunFinished(run_id="r1"))
    if user is not None:
        IdempotencyKey.objects.create(
            user=user, chat=chat, scope="messages", key=uuid.uuid4().hex, request_hash="0" * 64
        )
    if days_old:
        Chat.objects.filter(pk=chat.pk).update(updated_at=timezone.now() - timedelta(days=days_old))
    chat.refresh_from_db()
    return chat


def files_of(chat) -> list[str]:
    return list(Attachment.objects.filter(message__chat=chat).values_list("file", flat=True))


def stream_exists(chat_id) -> bool:
    return bool(streams.client().exists(streams.stream_key(chat_id)))
