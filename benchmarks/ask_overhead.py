"""What django-llmchat adds to a reply: 300 ``chat.ask()`` calls against the loopback
server, beside a baseline of 300 bare httpx POSTs to the same server plus one INSERT of
the reply each. Prints both times and their ratio (target: at most 1.5).

The asks run as 30 conversations of 10 turns (each ask sends the history so far, as a
real chat does). The baseline posts the very request bodies the asks send (recorded by
the server in an untimed round), so both sides pay the same HTTP exchange and the ratio
is what the library adds: the prompt and reply rows, the history read, the usage row
with its cost, the request built and the answer parsed.

    python benchmarks/ask_overhead.py [--n 300] [--provider openai]
"""

from __future__ import annotations

import argparse
import json
import time

from _django import setup


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
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

    # an untimed round warms both paths (client pools, prepared statements) and records
    # the request bodies the baseline replays
    library()
    recorded = server.requests[-args.n :]
    bodies = [r.raw_body for r in recorded]
    assert len(bodies) == args.n and {r.path for r in recorded} == {recorded[0].path}
    baseline()

    # interleave two rounds of each so machine noise hits both sides alike
    base = lib = 0.0
    for _ in range(2):
        base += baseline()
        lib += library()
    server.stop()
    n = args.n * 2
    print(f"provider: {args.provider}")
    print(f"baseline (httpx POST + INSERT): {base:.3f} s for {n} ({base / n * 1000:.2f} ms each)")
    print(f"chat.ask():                     {lib:.3f} s for {n} ({lib / n * 1000:.2f} ms each)")
    print(f"ratio: {lib / base:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
