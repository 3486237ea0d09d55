"""What encryption at rest (``LLMCHAT["ENCRYPTION_KEYS"]``) costs, side by side.

Three measures, each with and without a key, the sides taking turns every block so a slow
spell of this shared machine hits both alike:

* ``chat.ask()``: conversations of ten turns against the loopback server, every third
  turn a tool call answered by a tool (so each reply writes a message, and a tool turn a
  call and its result, and every ask reads the rows stored since the last one back),
  replies of ~600 characters; the server checks each request holds no ciphertext;
* reading a stored transcript of ``--messages`` messages (``list(chat.transcript())``,
  the ORM);
* reading the same transcript as a run does, from the rows (``load_history`` after
  ``forget_history``: the raw read whose encrypted columns are decrypted), checked to
  hold the plain text.

Prints the times and the ratios (encrypted / plain).

    python benchmarks/encryption.py [--n 120] [--rounds 5] [--messages 1000] [--reads 4]
"""

from __future__ import annotations

import argparse
import itertools
import time

from _django import setup

REPLY = ("The capital of France is Paris, on the Seine. " * 13).strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=4, help="reads of each kind per round")
    args = parser.parse_args()
    if args.n <= 0 or args.n % 10:
        parser.error("--n must be a positive multiple of 10 (conversations of ten turns)")

    from django_llmchat.testing import FakeProviderServer, Reply, ToolCall

    counter = itertools.count()

    def responder(request):
        # the measured path decrypts: a ciphertext sent would be a wrong measure
        assert MARKER not in request.raw_body.decode(), "a ciphertext was sent"
        # a tool turn: the first request of every third ask calls the tool
        last = (request.messages or [{}])[-1]
        if last.get("role") == "user" and next(counter) % 3 == 0:
            return Reply(tool_calls=[ToolCall("bench_lookup", {"city": "Paris", "units": "C"})])
        return Reply(REPLY, usage={"input_tokens": 200, "output_tokens": 150})

    server = FakeProviderServer(responder=responder, default=None)
    server.start()
    base = {"DEFAULT_PROVIDER": "openai", "PROVIDERS": server.provider_settings(api_key="k")}
    setup(base)
    import logging

    logging.getLogger("django_llmchat.loop.history").setLevel(logging.ERROR)  # no window known

    from cryptography.fernet import Fernet
    from django.db import connection
    from django.test import override_settings

    from django_llmchat.loop.transcript import forget_history, load_history
    from django_llmchat.models import Chat, Message
    from django_llmchat.models.protected import MARKER
    from django_llmchat.tools import tool

    @tool
    def bench_lookup(city: str, units: str) -> str:
        """Weather of a city"""
        return f"18 {units} and sunny in {city}; humidity 40%, wind 10 km/h from the west."

    keyed = {**base, "ENCRYPTION_KEYS": [Fernet.generate_key().decode()]}
    sides = {"plain": base, "encrypted": keyed}

    def asks(llmchat: dict, count: int) -> float:
        with override_settings(LLMCHAT=llmchat):
            chats = [
                Chat.objects.create(
                    provider="openai", model_id="gpt-4.1-mini", tools=["bench_lookup"]
                )
                for _ in range(count // 10)
            ]
            start = time.perf_counter()
            for i in range(count):
                chats[i // 10].ask(f"question {i}: what is the weather and the capital?")
            return time.perf_counter() - start

    def stored_chat(llmchat: dict) -> Chat:
        with override_settings(LLMCHAT=llmchat):
            chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
            Message.objects.bulk_create(
                Message(chat=chat, role=("user", "assistant")[i % 2], content=f"{i} {REPLY}")
                for i in range(args.messages)
            )
            return chat

    def read(llmchat: dict, chat: Chat) -> float:
        with override_settings(LLMCHAT=llmchat):
            start = time.perf_counter()
            rows = list(chat.transcript())
            spent = time.perf_counter() - start
            assert rows[-1].content.endswith(REPLY)
            return spent

    def history(llmchat: dict, chat: Chat) -> float:
        with override_settings(LLMCHAT=llmchat):
            forget_history()  # a new process: the whole history from the rows
            start = time.perf_counter()
            messages = load_history(chat).messages
            spent = time.perf_counter() - start
            assert len(messages) == args.messages and messages[-1].content.endswith(REPLY)
            assert not any(m.content.startswith(MARKER) for m in messages)
            return spent

    transcripts = {name: stored_chat(value) for name, value in sides.items()}
    with connection.cursor() as cursor:  # the encrypted side holds ciphertext
        cursor.execute(
            "SELECT content FROM llmchat_message WHERE chat_id = %s ORDER BY id DESC LIMIT 1",
            [transcripts["encrypted"].pk],
        )
        assert cursor.fetchone()[0].startswith(MARKER)
    for name, value in sides.items():  # untimed: warm pools, caches, prepared paths
        asks(value, 10)
        read(value, transcripts[name])
        history(value, transcripts[name])

    spent = {key: dict.fromkeys(sides, 0.0) for key in ("ask", "read", "history")}
    block = 10
    order = list(sides)
    for _ in range(args.rounds):
        for _first in range(0, args.n, block):
            order.reverse()  # neither side always goes first
            for name in order:
                spent["ask"][name] += asks(sides[name], block)
        for _read in range(args.reads):
            order.reverse()
            for name in order:
                spent["read"][name] += read(sides[name], transcripts[name])
                spent["history"][name] += history(sides[name], transcripts[name])
    server.stop()
    tool_turns = Message.objects.filter(role="tool").count()
    assert tool_turns, "no tool turn was measured"

    calls, reads = args.n * args.rounds, args.reads * args.rounds
    print(
        f"{args.n} asks and {args.reads} reads of each kind per side per round, "
        f"{args.rounds} rounds; transcript of {args.messages}"
    )
    for side in sides:
        print(
            f"{side:9}: chat.ask() {spent['ask'][side] / calls * 1000:7.2f} ms each   "
            f"transcript (ORM) {spent['read'][side] / reads * 1000:7.2f} ms   "
            f"history from rows {spent['history'][side] / reads * 1000:7.2f} ms"
        )
    ratio = {key: spent[key]["encrypted"] / spent[key]["plain"] for key in spent}
    print(
        f"ratio encrypted/plain: ask {ratio['ask']:.2f}, transcript read {ratio['read']:.2f}, "
        f"history read from rows {ratio['history']:.2f}"
    )


if __name__ == "__main__":
    main()
