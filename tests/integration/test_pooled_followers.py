"""A web process on a small connection pool: fifty ``events/`` followers waiting on Redis
hold no database connection, so the requests that need one still get it (a follower used
to keep its connection for its whole life: the pool ran dry and requests failed 500)."""

from __future__ import annotations

import threading

import httpx
import pytest
from django.db import connection
from rest_framework.authtoken.models import Token

from django_llmchat.models import Chat

from .conftest import WebProcess

pytestmark = [pytest.mark.redis]

FOLLOWERS = 50
POOL = '{"min_size": 1, "max_size": 10, "timeout": 5}'


def test_fifty_followers_and_a_pool_of_ten(services, llm, django_user_model):
    if connection.vendor != "postgresql":
        pytest.skip("the psycopg connection pool is PostgreSQL's")
    user = django_user_model.objects.create_user("follower", password="pw")
    token = Token.objects.create(user=user).key
    headers = {"Authorization": f"Token {token}"}
    chat = Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")
    web = WebProcess(services, services.llmchat, LLMCHAT_TEST_DB_POOL=POOL)
    connected = threading.Semaphore(0)
    stop = threading.Event()
    statuses: list[int] = []

    def follow():
        try:
            with httpx.stream(
                "GET",
                f"{web.url}/api/chats/{chat.pk}/events/?follow=all",
                headers={**headers, "Accept": "text/event-stream"},
                timeout=httpx.Timeout(30, read=60),
            ) as response:
                statuses.append(response.status_code)
                for line in response.iter_lines():
                    if line.startswith(": connected"):
                        connected.release()
                    if stop.is_set():
                        return
        except httpx.HTTPError:
            if not stop.is_set():
                raise
        finally:
            connected.release()  # a failed follower counts too (its status says how)

    threads = [threading.Thread(target=follow, daemon=True) for _ in range(FOLLOWERS)]
    try:
        for thread in threads:
            thread.start()
        for _ in range(FOLLOWERS):
            assert connected.acquire(timeout=60), web.output()
        assert statuses.count(200) == FOLLOWERS, (statuses, web.output())
        with httpx.Client(base_url=web.url, headers=headers, timeout=30) as client:
            posted = [
                client.post(f"/api/chats/{chat.pk}/messages/", json={"content": f"Q{i}"})
                for i in range(10)
            ]
            listed = client.get(f"/api/chats/{chat.pk}/messages/")
        assert [r.status_code for r in posted] == [202] * 10, web.output()
        assert listed.status_code == 200
    finally:
        stop.set()
        web.kill()
