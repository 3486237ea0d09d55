"""What django-llmchat adds to a reply: 300 ``chat.ask()`` calls against the loopback
server, beside a baseline of 300 bare httpx POSTs to the same server plus one INSERT of
the reply each. Prints both times and their ratio (target: at most 1.5).

The asks run as 30 conversations of 10 turns (each ask sends the history so far, as a
real chat does). The baseline posts the very request bodies the asks send (recorded by
the server in an untimed round), so both sides pay the same HTTP exchange and the ratio
is what the library adds: the prompt and reply rows, the history read, the usage row
with its cost, the request built and the answer parsed.

A third line shows the floor of that design: the same POSTs plus the six statements a
stored reply needs (prompt + run start, history read, reply + usage row + run end, in
the same two transactions), written by hand as raw SQL with their parameters prepared
in advance. No ORM work at all, so nothing the library does can be cheaper.

Rounds of the three are interleaved so machine noise hits them alike; the best round of
each is kept (as ``timeit`` does).

    python benchmarks/ask_overhead.py [--n 300] [--rounds 5] [--provider openai]
"""

from __future__ import annotations

import argparse
import json
import time

from _django import setup


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--provider", default="openai")
    args = parser.parse_args()

    from django_llmchat.testing import FakeProviderServer, Reply

    server = FakeProviderServer(
        default=Reply(
            "The capital of France is Paris.", usage={"input_tokens": 20, "output_tokens": 8}
        )
    )
    server.start()
    setup(
        {
            "DEFAULT_PROVIDER": args.provider,
            "PROVIDERS": server.provider_settings(api_key="bench-key"),
        }
    )
    import httpx

    from django_llmchat.models import Chat, Message
    from django_llmchat.providers import get_provider

    provider = get_provider(args.provider)
    model = {
        "openai": "gpt-4.1-mini",
        "anthropic": "claude-haiku-4-5",
        "gemini": "gemini-2.5-flash",
    }.get(args.provider, "gpt-4.1-mini")

    from django_llmchat.providers.types import ProviderMessage, ProviderRequest

    request = ProviderRequest(model_id=model, messages=[ProviderMessage("user", "q")])
    url = provider.url(request, stream=False)
    headers = provider.headers()
    client = httpx.Client()

    def baseline() -> float:
        base_chat = Chat.objects.create(provider=args.provider, model_id=model)
        start = time.perf_counter()
        for body in bodies:
            answer = client.post(url, content=body, headers=headers)
            text = json.dumps(answer.json())[:40]
            Message.objects.create(chat=base_chat, role="assistant", content=text)
        return time.perf_counter() - start

    def library() -> float:
        chats = [
            Chat.objects.create(provider=args.provider, model_id=model)
            for _ in range(max(1, args.n // 10))
        ]
        start = time.perf_counter()
        for i in range(args.n):
            chats[(i // 10) % len(chats)].ask(f"question {i}")
        return time.perf_counter() - start

    floor = _floor(args, model, url, headers, client)

    # an untimed round warms every path (client pools, prepared statements) and records
    # the request bodies the baseline and the floor replay
    library()
    recorded = server.requests[-args.n :]
    bodies = [r.raw_body for r in recorded]
    assert len(bodies) == args.n and {r.path for r in recorded} == {recorded[0].path}
    baseline()
    floor(bodies)

    base, low, lib = [], [], []
    for _ in range(args.rounds):
        base.append(baseline())
        low.append(floor(bodies))
        lib.append(library())
    server.stop()
    n = args.n

    def line(label: str, times: list[float]) -> str:
        best = min(times)
        return f"{label:36} {best / n * 1000:.2f} ms each (best of {len(times)} rounds)"

    print(f"provider: {args.provider}, {n} calls per round")
    print(line("baseline (httpx POST + INSERT):", base))
    print(line("floor (same POSTs + raw SQL):", low))
    print(line("chat.ask():", lib))
    print(f"floor ratio: {min(low) / min(base):.2f}")
    print(f"ratio: {min(lib) / min(base):.2f} (target <= 1.5)")


def _floor(args, model, url, headers, client):
    """The same exchange plus the six statements of a stored reply, as raw SQL."""
    from django.db import connection, transaction
    from django.utils import timezone

    from django_llmchat.models import Chat, Message, Usage

    def insert(model_class):
        fields = [f for f in model_class._meta.concrete_fields if not f.primary_key]
        table = model_class._meta.db_table
        columns = ", ".join(f.column for f in fields)
        marks = ", ".join(["%s"] * len(fields))
        return fields, f"INSERT INTO {table} ({columns}) VALUES ({marks}) RETURNING id"

    message_fields, insert_message = insert(Message)
    usage_fields, insert_usage = insert(Usage)
    update_chat = "UPDATE llmchat_chat SET status = %s, updated_at = %s WHERE id = %s"
    history = (
        "SELECT id, role, content, raw, parent_tool_call_id FROM llmchat_message "
        "WHERE chat_id = %s ORDER BY created_at, id"
    )

    def run(bodies: list[bytes]) -> float:
        chat = Chat.objects.create(provider=args.provider, model_id=model)
        prompt = Message(chat=chat, role="user", content="question")
        prompt_params = [
            f.get_db_prep_save(f.pre_save(prompt, True), connection) for f in message_fields
        ]
        usage = Usage(chat=chat, provider=args.provider, model_id=model, status="succeeded")
        usage_params = [
            f.get_db_prep_save(f.pre_save(usage, True), connection) for f in usage_fields
        ]
        message_slot = [f.name for f in usage_fields].index("message")
        names = [f.name for f in message_fields]
        content_slot = names.index("content")
        reply_params = list(prompt_params)
        reply_params[names.index("role")] = "assistant"
        start = time.perf_counter()
        for body in bodies:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(insert_message, prompt_params)
                cursor.fetchone()
                cursor.execute(update_chat, ["running", timezone.now(), chat.pk])
            with connection.cursor() as cursor:
                cursor.execute(history, [chat.pk])
                cursor.fetchall()
            answer = client.post(url, content=body, headers=headers)
            text = json.dumps(answer.json())[:40]
            with transaction.atomic(), connection.cursor() as cursor:
                reply_params[content_slot] = text
                cursor.execute(insert_message, reply_params)
                (message_id,) = cursor.fetchone()
                usage_params[message_slot] = message_id
                cursor.execute(insert_usage, usage_params)
                cursor.fetchone()
                cursor.execute(update_chat, ["idle", timezone.now(), chat.pk])
        return time.perf_counter() - start

    return run


if __name__ == "__main__":
    main()
