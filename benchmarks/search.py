"""What a search costs on PostgreSQL: ``Chat.objects.search(words, user=...)`` (the query
``GET chats/?search=`` runs, first page of 50) over ``--messages`` messages (default
1,000,000) in chats of 50 messages, 20 chats per user.

The rows are made by ``INSERT ... SELECT generate_series`` (so the index trigger runs on
every row, as on every write path); the build time printed includes the trigger and the
GIN index. Each message draws 12 words from a vocabulary of 5,000 made-up words (rank r
drawn with a Zipf-like skew); a search asks for one rare word, one common word, or two
words, for a random user. Prints the p50 and p95 of each.

    DATABASE_URL=postgres://... python benchmarks/search.py [--messages 1000000]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from _django import setup

CHAT_SIZE = 50
CHATS_PER_USER = 20


def build(messages: int) -> float:
    from django.db import connection

    chats = messages // CHAT_SIZE
    users = max(1, chats // CHATS_PER_USER)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO auth_user (id, password, is_superuser, username, first_name, "
            "last_name, email, is_staff, is_active, date_joined) SELECT g, '', false, "
            "'u' || g, '', '', '', false, true, now() FROM generate_series(1, %s) g",
            [users],
        )
        cursor.execute(
            "INSERT INTO llmchat_chat (id, title, model_id, provider, agent, params, "
            "tools, context, status, client_id, created_at, updated_at, user_id) "
            "SELECT g, 'chat ' || g, 'm', 'openai', '', '{}', '[]', '{}', 'idle', '', "
            "now(), now() - g * interval '1 second', 1 + (g - 1) %% %s "
            "FROM generate_series(1, %s) g",
            [users, chats],
        )
        # w<n>: n = floor(5000 * random()^3): low ranks common, high ranks rare
        cursor.execute(
            "INSERT INTO llmchat_message (chat_id, role, content, model_id, provider, "
            "finish_reason, thinking_text, thinking_signature, citations, "
            "server_tool_calls, cache_boundary, position, created_at, on_path) "
            "SELECT 1 + (g - 1) / %s, CASE WHEN g %% 2 = 0 THEN 'user' ELSE 'assistant' END, "
            "(SELECT string_agg('w' || floor(5000 * power(random(), 3))::int, ' ') "
            " FROM generate_series(1, 12) WHERE g > 0), "
            "'', '', '', '', '', '[]', '[]', false, g, now(), true "
            "FROM generate_series(1, %s) g",
            [CHAT_SIZE, messages],
        )
        cursor.execute("ANALYZE llmchat_message")
        cursor.execute("ANALYZE llmchat_chat")
    return time.perf_counter() - started


def timed(words: str, users: int, rng: random.Random) -> float:
    from django_llmchat.models import Chat

    started = time.perf_counter()
    list(Chat.objects.search(words, user=rng.randint(1, users))[:50])
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--searches", type=int, default=200, help="per kind")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        raise SystemExit("benchmarks/search.py needs DATABASE_URL=postgres://...")
    setup()
    from django.db import connection

    print(f"building {args.messages:,} messages ...", flush=True)
    seconds = build(args.messages)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_size_pretty(pg_relation_size('llmchat_message_search'))")
        size = cursor.fetchone()[0]
    print(f"build: {seconds:.1f} s (rows, trigger and GIN index {size})")
    users = max(1, args.messages // CHAT_SIZE // CHATS_PER_USER)
    rng = random.Random(7)
    kinds = {
        "rare word": lambda: f"w{rng.randint(4000, 4999)}",
        "common word": lambda: f"w{rng.randint(0, 20)}",
        "two words": lambda: f"w{rng.randint(0, 200)} w{rng.randint(200, 2000)}",
    }
    for kind, make in kinds.items():
        for _ in range(10):  # warm the cache
            timed(make(), users, rng)
        times = sorted(timed(make(), users, rng) for _ in range(args.searches))
        p50 = statistics.median(times) * 1000
        p95 = times[int(len(times) * 0.95) - 1] * 1000
        print(f"{kind:12s}: p50 {p50:6.1f} ms  p95 {p95:6.1f} ms  ({args.searches} searches)")


if __name__ == "__main__":
    main()
