"""Users, authenticated API clients and a chat per test."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_llmchat.models import Chat, LLMModel


class Clients:
    """``clients.owner``, ``clients.other``, ``clients.staff`` (token auth) and
    ``clients.anon``."""

    def __init__(self, users):
        self.users = users
        self.anon = APIClient()
        for name, user in users.items():
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
            client.user = user
            setattr(self, name, client)


@pytest.fixture
def users(django_user_model):
    return {
        "owner": django_user_model.objects.create_user("owner", password="pw"),
        "other": django_user_model.objects.create_user("other", password="pw"),
        "staff": django_user_model.objects.create_user("staff", password="pw", is_staff=True),
    }


@pytest.fixture
def clients(users):
    return Clients(users)


@pytest.fixture
def owner(users):
    return users["owner"]


@pytest.fixture
def api(clients):
    """The owner's client."""
    return clients.owner


@pytest.fixture
def chat(owner):
    return Chat.objects.create(user=owner, title="Trip", model_id="gpt-4.1-mini", provider="openai")


def url(name: str, **kwargs) -> str:
    from django.urls import reverse

    return reverse(f"llmchat-api:{name}", kwargs=kwargs)


def sse_frames(body: str) -> list[dict]:
    """Parse a text/event-stream body into ``{"event", "data", "id"}`` dicts (comments
    skipped, ``data`` JSON-decoded)."""
    import json

    frames = []
    for block in body.split("\n\n"):
        fields: dict = {}
        for line in block.splitlines():
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields[name] = value[1:] if value.startswith(" ") else value
        if "event" in fields or "data" in fields:
            if "data" in fields:
                fields["data"] = json.loads(fields["data"])
            frames.append(fields)
    return frames


def close_response(response) -> None:
    """Close a streaming response as the server does when the client goes away, keeping
    the test's database connection (``request_finished`` would close it)."""
    from unittest import mock

    from django.db import connections

    patches = [
        mock.patch.object(conn, "close_if_unusable_or_obsolete", lambda: None)
        for conn in connections.all(initialized_only=True)
    ]
    for patch in patches:
        patch.start()
    try:
        response.close()
    finally:
        for patch in patches:
            patch.stop()


@pytest.fixture
def registry():
    rows = [
        ("openai", "gpt-4.1", "GPT-4.1", "gpt-4.1", 1_047_576, ["streaming", "tools", "vision"]),
        ("openai", "gpt-4.1-mini", "GPT-4.1 mini", "gpt-4.1", 1_047_576, ["streaming", "tools"]),
        (
            "anthropic",
            "claude-haiku-4-5",
            "Claude Haiku 4.5",
            "claude-haiku",
            200_000,
            ["tools", "vision", "thinking"],
        ),
        ("gemini", "gemini-2.5-flash", "Gemini 2.5 Flash", "gemini-2.5", 1_048_576, ["streaming"]),
    ]
    return [
        LLMModel.objects.create(
            provider=p, model_id=m, name=n, family=f, context_window=c, capabilities=caps
        )
        for p, m, n, f, c, caps in rows
    ]


def ids(response):
    assert response.status_code == 200, response.content
    return [row["model_id"] for row in response.json()["results"]]
