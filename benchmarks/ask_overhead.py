"""What django-llmchat adds to a reply: 300 ``chat.ask()`` calls against the loopback
server, beside a baseline of 300 bare httpx POSTs to the same server plus one INSERT of
the reply each. Prints both times and their ratio (target: at most 1.5).

The asks run as 30 conversations of 10 turns (each ask sends the history so far, as a
real chat does). The baseline posts the very request bodies the asks send (recorded by
the server in an untimed round), so both sides pay the same HTTP exchange and the ratio
is what the library adds: the prompt and reply rows, the history read, the usage row
with its cost, the request built and the answer parsed.

A third line shows the floor of that design: the same POSTs plus the fourteen statements
a stored reply needs, written by hand as raw SQL with their parameters prepared in
advance, in the same transactions: the prompt with its run, started (the chat's lock, the
runs ahead, the active leaf the prompt follows, the prompt and run rows, the chat's
status), the history read, the attempt's
pending usage row (before the POST), then the reply and the run's end (the chat's lock,
the reply row, the usage row closed, the fenced run update, the next run, the chat's
status). No ORM work at all, so nothing the
library does can be cheaper.

The three sides take turns every 30 calls, so a slow spell of this shared machine hits
them alike; the ratios are of the total times over all rounds, printed with the range of
the per-round ratios.

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
    if args.n <= 0 or args.n % 30:
        parser.error("--n must be a positive multiple of 30 (conversations of ten turns)")

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

    block_size = 30  # three conversations of ten turns

    def baseline(block: list[bytes]) -> float:
        base_chat = Chat.objects.create(provider=args.provider, model_id=model)
        start = time.perf_counter()
        for body in block:
            answer = client.post(url, content=body, headers=headers)
            text = json.dumps(answer.json())[:40]
            reply = Message(chat=base_chat, role="assistant", content=text)
            reply.placed = True  # one INSERT: save() does not look for the active leaf
            reply.save()
        return time.perf_counter() - start

    def library(first: int, count: int) -> float:
        chats = [
            Chat.objects.create(provider=args.provider, model_id=model)
            for _ in range(max(1, count // 10))
        ]
        start = time.perf_counter()
        for i in range(first, first + count):
            chats[(i - first) // 10].ask(f"question {i}")
        return time.perf_counter() - start

    floor = _floor(args, model, url, headers, client)

    # an untimed pass warms every path (client pools, prepared statements) and records
    # the request bodies the baseline and the floor replay
    library(0, args.n)
    recorded = server.requests[-args.n :]
    bodies = [r.raw_body for r in recorded]
    assert len(bodies) == args.n and {r.path for r in recorded} == {recorded[0].path}
    baseline(bodies)
    floor(bodies)

    # the three sides take turns every 30 calls, so a slow spell of the machine hits
    # them alike; each round covers the n calls once per side
    sides = ("baseline", "floor", "library")
    rounds = []
    for _ in range(args.rounds):
        spent = dict.fromkeys(sides, 0.0)
        for first in range(0, args.n, block_size):
            server.reset()  # the server's record of requests is not the library's memory
            block = bodies[first : first + block_size]
            spent["baseline"] += baseline(block)
            spent["floor"] += floor(block)
            spent["library"] += library(first, len(block))
        rounds.append(spent)
    server.stop()
    calls = args.n * args.rounds
    total = {side: sum(r[side] for r in rounds) for side in sides}

    def each(side: str) -> str:
        return f"{total[side] / calls * 1000:.2f} ms each"

    def spread(side: str) -> str:
        ratios = sorted(r[side] / r["baseline"] for r in rounds)
        return f"rounds {ratios[0]:.2f} to {ratios[-1]:.2f}"

    print(f"provider: {args.provider}, {args.n} calls per side per round, {args.rounds} rounds")
    print(f"baseline (httpx POST + INSERT):   {each('baseline')}")
    print(f"floor (same POSTs + raw SQL):     {each('floor')}")
    print(f"chat.ask():                       {each('library')}")
    print(f"floor ratio: {total['floor'] / total['baseline']:.2f} ({spread('floor')})")
    print(f"ratio: {total['library'] / total['baseline']:.2f} ({spread('library')}; target <= 1.5)")


def _floor(args, model, url, headers, client):
    """The same exchange plus the fourteen statements of a stored reply, as raw SQL."""
    from django.db import connection, transaction
    from django.utils import timezone

    from django_llmchat.models import Chat, Message, Run, Usage

    def insert(model_class):
        fields = [f for f in model_class._meta.concrete_fields if not f.primary_key]
        table = model_class._meta.db_table
        columns = ", ".join(f.column for f in fields)
        marks = ", ".join(["%s"] * len(fields))
        return fields, f"INSERT INTO {table} ({columns}) VALUES ({marks}) RETURNING id"

    message_fields, insert_message = insert(Message)
    usage_fields, insert_usage = insert(Usage)
    run_fields, insert_run = insert(Run)
    lock_chat = "UPDATE llmchat_chat SET updated_at = %s WHERE id = %s"
    close_usage = (
        "UPDATE llmchat_usage SET status = %s, message_id = %s, input_tokens = %s, "
        "output_tokens = %s, total_cost = %s, duration_ms = %s, estimated = %s WHERE id = %s"
    )
    chat_state = "UPDATE llmchat_chat SET status = %s, active_run_id = %s WHERE id = %s"
    head = (
        "SELECT id, status, lease_expires_at, attempt FROM llmchat_run WHERE chat_id = %s "
        "AND status IN ('queued', 'running', 'awaiting_approval') ORDER BY id LIMIT 1"
    )
    end_run = (
        "UPDATE llmchat_run SET steps = steps + 1, status = %s, finished_at = %s, "
        "lease_expires_at = NULL WHERE id = %s AND attempt = %s AND status = %s"
    )
    leaf = (
        "SELECT id, position FROM llmchat_message WHERE chat_id = %s AND on_path = %s "
        "AND position < %s AND role <> 'system' ORDER BY position DESC, id DESC LIMIT 1"
    )
    history = (
        "SELECT id, role, content, raw, parent_tool_call_id FROM llmchat_message "
        "WHERE chat_id = %s AND on_path = %s AND position < %s ORDER BY position, id"
    )

    def run(bodies: list[bytes]) -> float:
        chat = Chat.objects.create(provider=args.provider, model_id=model)
        prompt = Message(chat=chat, role="user", content="question")
        prompt_params = [
            f.get_db_prep_save(f.pre_save(prompt, True), connection) for f in message_fields
        ]
        run_row = Run(chat=chat, status="running", attempt=1, worker="bench")
        run_params = [f.get_db_prep_save(f.pre_save(run_row, True), connection) for f in run_fields]
        usage = Usage(chat=chat, provider=args.provider, model_id=model, status="pending")
        usage_params = [
            f.get_db_prep_save(f.pre_save(usage, True), connection) for f in usage_fields
        ]
        names = [f.name for f in message_fields]
        content_slot = names.index("content")
        reply_params = list(prompt_params)
        reply_params[names.index("role")] = "assistant"
        start = time.perf_counter()
        for body in bodies:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(lock_chat, [timezone.now(), chat.pk])
                cursor.execute(head, [chat.pk])
                cursor.fetchall()
                cursor.execute(leaf, [chat.pk, True, 10**17])
                cursor.fetchall()
                cursor.execute(insert_message, prompt_params)
                cursor.fetchone()
                cursor.execute(insert_run, run_params)
                (run_id,) = cursor.fetchone()
                cursor.execute(chat_state, ["running", run_id, chat.pk])
            with connection.cursor() as cursor:
                cursor.execute(history, [chat.pk, True, 10**17])
                cursor.fetchall()
                cursor.execute(insert_usage, usage_params)
                (usage_id,) = cursor.fetchone()
            answer = client.post(url, content=body, headers=headers)
            text = json.dumps(answer.json())[:40]
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(lock_chat, [timezone.now(), chat.pk])
                reply_params[content_slot] = text
                cursor.execute(insert_message, reply_params)
                (message_id,) = cursor.fetchone()
                cursor.execute(
                    close_usage, ["succeeded", message_id, 20, 8, "0.00002", 5, False, usage_id]
                )
                cursor.execute(end_run, ["succeeded", timezone.now(), run_id, 1, "running"])
                cursor.execute(head, [chat.pk])
                cursor.fetchall()
                cursor.execute(chat_state, ["idle", None, chat.pk])
        return time.perf_counter() - start

    return run


if __name__ == "__main__":
    main()
