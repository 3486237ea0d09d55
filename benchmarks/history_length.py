"""What a long transcript costs an ask: ``chat.ask()`` on chats holding 10, 1,000 and
5,000 stored messages, beside a baseline that sends the same history from memory.

For each length, chats are filled with that many stored messages (user and assistant
turns, every tenth assistant turn calling a tool whose result follows it). The model is
registered with a window large enough for all of it, so the default ``"window"`` policy
runs and sends everything. The baseline is the same conversation held in memory: a list
of provider messages (built once, untimed) sent with ``provider.complete()``, the reply
appended to the list and INSERTed as a row. Both sides pay the same vendor request
building, HTTP exchange and answer parsing over the same history; the ratio is what the
library adds on top of sending that history: reading and building it from the rows, the
policy deciding what fits, and the prompt, run, reply and usage rows.

The sides take turns every few asks, so a slow spell of this shared machine hits them
alike; ratios are of the total times over all rounds, with the range of the per-round
ratios.

``--clock cpu`` times the process's CPU (this process runs the asks, the baseline and the
fake server's threads, and SQLite): on a machine other jobs keep busy, it leaves out the
time spent waiting for a core. With PostgreSQL the database's own work is then not
counted: keep the default wall clock there.

    python benchmarks/history_length.py [--lengths 10,1000,5000] [--asks 20] [--rounds 5]
                                        [--clock wall|cpu]
"""

from __future__ import annotations

import argparse
import time

from _django import setup


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lengths", default="10,1000,5000")
    parser.add_argument("--asks", type=int, default=20, help="asks per length per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--provider", default="openai")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    lengths = [int(n) for n in args.lengths.split(",")]

    from django_llmchat.testing import FakeProviderServer, Reply

    server = FakeProviderServer(
        default=Reply("Noted, thank you.", usage={"input_tokens": 20, "output_tokens": 5})
    )
    server.start()
    setup(
        {
            "DEFAULT_PROVIDER": args.provider,
            "PROVIDERS": server.provider_settings(api_key="bench-key"),
        }
    )
    from django_llmchat.models import Chat, LLMModel, Message, ToolCall
    from django_llmchat.providers import get_provider
    from django_llmchat.providers.types import ProviderMessage, ProviderRequest

    model = {
        "openai": "gpt-4.1-mini",
        "anthropic": "claude-haiku-4-5",
        "gemini": "gemini-2.5-flash",
    }.get(args.provider, "gpt-4.1-mini")
    LLMModel.objects.update_or_create(
        provider=args.provider,
        model_id=model,
        defaults={"name": model, "context_window": 10_000_000, "max_output_tokens": 8_000},
    )
    from django_llmchat.loop.transcript import load_history

    provider = get_provider(args.provider)

    def filled_chat(length: int) -> Chat:
        chat = Chat.objects.create(provider=args.provider, model_id=model)
        position = 1
        for i in range(0, length, 2):
            text = f"Message {i}: " + "some words of a conversation " * 4
            Message.objects.create(chat=chat, role="user", content=text, position=position)
            reply = Message.objects.create(
                chat=chat, role="assistant", content="Reply " + text, position=position + 1
            )
            position += 2
            if i % 20 == 0 and i + 2 < length:
                call = ToolCall.objects.create(
                    chat=chat,
                    message=reply,
                    call_id=f"call_{i}",
                    name="lookup",
                    arguments={"q": i},
                )
                Message.objects.create(
                    chat=chat,
                    role="tool",
                    content="found",
                    parent_tool_call=call,
                    position=position,
                )
                position += 1
        return chat

    chats = {n: filled_chat(n) for n in lengths}
    counts = {n: Message.objects.filter(chat=chats[n]).count() for n in lengths}

    def library(chat: Chat, count: int, turn: int) -> float:
        start = clock()
        for i in range(count):
            chat.ask(f"question {turn + i}")
        return clock() - start

    base_chat = Chat.objects.create(provider=args.provider, model_id=model)

    def baseline(memory: list[ProviderMessage], count: int, turn: int) -> float:
        start = clock()
        for i in range(count):
            memory.append(ProviderMessage("user", f"question {turn + i}"))
            response = provider.complete(ProviderRequest(model_id=model, messages=memory))
            memory.append(ProviderMessage("assistant", response.content))
            Message.objects.create(chat=base_chat, role="assistant", content=response.content)
        return clock() - start

    block = 5
    # an untimed pass warms every path; the in-memory twins start from the stored rows
    memories = {n: load_history(chats[n]).messages for n in lengths}
    turn = 0
    for n in lengths:
        library(chats[n], block, turn)
        baseline(memories[n], block, turn)
        turn += block

    results = {n: [] for n in lengths}
    for _ in range(args.rounds):
        for n in lengths:
            spent = {"baseline": 0.0, "library": 0.0}
            for _ in range(0, args.asks, block):
                server.reset()  # the server's record of requests is not the library's
                spent["library"] += library(chats[n], block, turn)
                spent["baseline"] += baseline(memories[n], block, turn)
                turn += block
            results[n].append(spent)
    server.stop()

    print(
        f"provider: {args.provider}, {args.asks} asks per length per round, "
        f"{args.rounds} rounds, {args.clock} clock"
    )
    for n in lengths:
        rounds = results[n]
        base = sum(r["baseline"] for r in rounds)
        lib = sum(r["library"] for r in rounds)
        asks = args.asks * args.rounds
        ratios = sorted(r["library"] / r["baseline"] for r in rounds)
        print(
            f"{counts[n]:>6} stored messages: baseline {base / asks * 1000:7.2f} ms, "
            f"chat.ask() {lib / asks * 1000:7.2f} ms, ratio {lib / base:.2f} "
            f"(rounds {ratios[0]:.2f} to {ratios[-1]:.2f}; target <= 2.0)"
        )


if __name__ == "__main__":
    main()
