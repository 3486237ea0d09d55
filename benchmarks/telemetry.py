"""What OpenTelemetry adds to a ``chat.ask()``: the same asks with ``LLMCHAT["OPENTELEMETRY"]``
off and on, side by side in one process, against the loopback fake provider server.

"On" is the real SDK, configured as an application would: a ``TracerProvider`` with a
``BatchSpanProcessor`` (spans queued on the asking thread, exported by the SDK's own
thread) and a ``MeterProvider`` whose reader aggregates the two histograms the library
records. The exporter is ``InMemorySpanExporter``, cleared after each round: it does the
SDK's real per-span work (the span's attributes checked and copied, the span ended,
queued and handed over in batches) but no encoding and no network, so what the asking
thread pays is the library's cost plus the SDK's unavoidable share, not a collector's.
``--exporter otlp`` instead encodes every batch as an OTLP/HTTP exporter would (protobuf,
with ``opentelemetry-exporter-otlp-proto-common``) and drops the bytes: closer to
production, but that encoding runs on the SDK's export thread, which on a small machine
competes with the asks for the CPU and the GIL.

A third side, ``sdk floor``, is telemetry off plus, around each ask, the very spans and
metric points the library makes (an ``invoke_agent`` span, a ``chat {model}`` client
span inside it with the same attributes, three histogram records), made by hand with no
library code between them: what the SDK itself costs per ask, which no change to
django-llmchat can go below.

Two shapes: 1-turn (every ask a new chat, created before the clock starts) and 10-turn
(chats of ten turns, each ask sending the history so far). The server runs in a process
of its own, so its work never shows in this process's CPU time; the asking thread's CPU
is ``time.thread_time()`` (the export thread's is not in it, it is in the wall time).
The sides take turns a block at a time, in a rotating order, round after round, so a
slow spell of this shared machine hits them alike. Each ask is timed on its own; printed
are the mean and the median ms per ask of each side (wall and CPU) and their ratios to
"off". The median is the steadier figure: the mean takes in the odd ask that pays for a
SQLite checkpoint, a full garbage collection or another process's burst. What the warm-up
left in memory is frozen (``gc.freeze()``) so collections weigh the asks' own objects.

    python benchmarks/telemetry.py [--block 10] [--rounds 100] [--exporter memory|otlp]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/llmchat python benchmarks/telemetry.py
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _django import setup

MODEL = "gpt-4.1-mini"
SHAPES = (1, 10)  # turns per chat
SIDES = ("off", "on", "sdk floor")


def serve() -> None:
    """The server process: prints its base URL; ``reset`` lines clear its record."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from django_llmchat.testing import FakeProviderServer, Reply

    server = FakeProviderServer(
        default=Reply(
            "The capital of France is Paris.",
            usage={"input_tokens": 20, "output_tokens": 8, "cache_read_tokens": 4},
            response_id="resp_bench",
        )
    ).start()
    print(server.base_url("openai"), flush=True)
    for line in sys.stdin:
        if line.strip() == "reset":
            server.reset()
    server.stop()


def install_sdk(exporter_name: str):
    """The global tracer and meter providers, as an application configures them."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if exporter_name == "otlp":
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        class EncodingExporter(SpanExporter):
            """An OTLP exporter's work up to the wire: the batch encoded, then dropped."""

            def __init__(self):
                self.encoded = 0

            def export(self, spans):
                self.encoded += len(encode_spans(spans).SerializeToString())
                return SpanExportResult.SUCCESS

            def clear(self):
                self.encoded = 0

        exporter = EncodingExporter()
    else:
        exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return provider, exporter, reader


def hand_made_spans(chat_id: int, run_id: int):
    """The spans and metric points of one ask, made by hand (the SDK's floor)."""
    from opentelemetry import metrics, trace

    tracer = trace.get_tracer("bench-floor")
    meter = metrics.get_meter("bench-floor")
    tokens = meter.create_histogram("gen_ai.client.token.usage", unit="{token}")
    duration = meter.create_histogram("gen_ai.client.operation.duration", unit="s")
    conversation, run = str(chat_id), str(run_id)

    def around(ask):
        run_span = tracer.start_span(
            "invoke_agent",
            kind=trace.SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": MODEL,
                "gen_ai.conversation.id": conversation,
                "django_llmchat.run.id": run,
            },
        )
        parent = trace.set_span_in_context(run_span)
        started = time.monotonic()
        call = tracer.start_span(
            f"chat {MODEL}",
            context=parent,
            kind=trace.SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": MODEL,
                "gen_ai.conversation.id": conversation,
                "django_llmchat.run.id": run,
            },
        )
        ask()
        call.set_attribute("gen_ai.usage.input_tokens", 24)
        call.set_attribute("gen_ai.usage.output_tokens", 8)
        call.set_attribute("gen_ai.usage.cache_read.input_tokens", 4)
        call.set_attribute("gen_ai.response.model", MODEL)
        call.set_attribute("gen_ai.response.finish_reasons", ["stop"])
        call.set_attribute("gen_ai.response.id", "resp_bench")
        call.set_attribute("django_llmchat.usage.status", "succeeded")
        labels = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": MODEL,
        }
        duration.record(time.monotonic() - started, labels)
        tokens.record(24, {**labels, "gen_ai.token.type": "input"})
        tokens.record(8, {**labels, "gen_ai.token.type": "output"})
        call.end()
        run_span.set_attribute("django_llmchat.run.status", "succeeded")
        run_span.end()

    return around


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--block", type=int, default=10, help="asks per side per turn")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--exporter", choices=("memory", "otlp"), default="memory")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve()
    if args.block <= 0 or args.block % 10:
        parser.error("--block must be a positive multiple of 10 (whole 10-turn chats)")

    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    base_url = server.stdout.readline().strip()
    llmchat = {
        "DEFAULT_PROVIDER": "openai",
        "PROVIDERS": {"openai": {"api_key": "bench-key", "base_url": base_url}},
        "OPENTELEMETRY": False,
    }
    setup(llmchat)
    from django.conf import settings as django_settings

    from django_llmchat.conf import settings as llmchat_settings
    from django_llmchat.models import Chat

    provider, exporter, reader = install_sdk(args.exporter)

    def telemetry(on: bool) -> None:
        django_settings.LLMCHAT["OPENTELEMETRY"] = on
        llmchat_settings.reload()

    floor_around = hand_made_spans(0, 0)

    def block(side: str, turns: int) -> list[tuple[float, float]]:
        """One block of asks: each one's (wall, asking thread's CPU) seconds."""
        telemetry(side == "on")
        chats = [
            Chat.objects.create(provider="openai", model_id=MODEL)
            for _ in range(args.block // turns)
        ]
        times = []
        for number in range(args.block):
            chat = chats[number // turns]
            wall, cpu = time.perf_counter(), time.thread_time()
            if side == "sdk floor":
                floor_around(lambda chat=chat, n=number: chat.ask(f"question {n}"))
            else:
                chat.ask(f"question {number}")
            times.append((time.perf_counter() - wall, time.thread_time() - cpu))
        provider.force_flush()  # this block's spans exported before the next one starts
        return times

    def between() -> None:
        exporter.clear()
        reader.get_metrics_data()  # collected, as a periodic reader would
        server.stdin.write("reset\n")
        server.stdin.flush()

    for turns in SHAPES:  # untimed warm-up of every side: imports, pools, caches
        for side in SIDES:
            block(side, turns)
    between()
    # what the warm-up left is not collected again and again by the asks' GC passes
    gc.collect()
    gc.freeze()
    asks: dict[tuple[str, int], list[tuple[float, float]]] = {
        (side, turns): [] for side in SIDES for turns in SHAPES
    }
    for number in range(args.rounds):
        order = SIDES[number % len(SIDES) :] + SIDES[: number % len(SIDES)]
        for turns in SHAPES:
            for side in order:
                asks[side, turns] += block(side, turns)
            between()
    telemetry(False)
    server.stdin.close()
    server.wait(timeout=30)
    provider.shutdown()
    report(args, asks, django_settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1])


def report(args, asks, database: str) -> None:
    """ms per ask of each side (mean and median, wall and CPU) and the ratios to off."""
    count = args.block * args.rounds
    print(
        f"{count} asks per side and shape, {args.rounds} rounds of blocks of {args.block}, "
        f"interleaved; exporter {args.exporter}; {database}"
    )
    print(
        f"{'':<19}{'mean ms (ratio to off)':^36}{'median ms (ratio to off)':^36}\n"
        f"{'shape':<9}{'side':<10}{'wall':>18}{'cpu':>18}{'wall':>18}{'cpu':>18}"
    )
    for turns in SHAPES:
        figures = {}
        for side in SIDES:
            walls = [wall for wall, _cpu in asks[side, turns]]
            cpus = [cpu for _wall, cpu in asks[side, turns]]
            figures[side] = (
                statistics.fmean(walls),
                statistics.fmean(cpus),
                statistics.median(walls),
                statistics.median(cpus),
            )
        for side in SIDES:
            cells = "".join(
                f"{value * 1000:>10.3f} ({value / off:.3f})"
                for value, off in zip(figures[side], figures["off"], strict=True)
            )
            print(f"{f'{turns}-turn':<9}{side:<10}{cells}")


if __name__ == "__main__":
    main()
