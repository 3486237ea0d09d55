"""How fast the stream parsers turn SSE bytes into events, against plain line iteration.

    python benchmarks/stream_parse.py [--events 20000] [--repeat 7]

For each provider whose module imports, a large body is built from a recorded streaming
fixture (``tests/fixtures/wire/``) by repeating its text-delta frames. The same bytes are
then read, in the same run, by:

* ``http lines``: the headline baseline, plain line iteration over the HTTP response:
  ``for line in response.iter_lines(): pass`` through an in-memory httpx transport that
  delivers the body one SSE frame per read, as a streaming server sends it;
* ``lines``: ``for line in body.splitlines(): pass``, the cheapest possible pass;
* ``lines+json``: the same plus ``json.loads`` of every ``data:`` line, the least any
  decoder must do;
* ``parser``: the real path minus the network: SSEDecoder over 16 KiB chunks +
  ``parser.feed`` + ``ResponseBuilder``;
* ``stream``: ``provider.stream(request)`` end to end through the same transport as
  ``http lines``.

Figures are events per second (best of ``--repeat`` interleaved runs). The headline
ratio is ``stream`` against ``http lines`` (target: at most 2); the time of ``parser``
and ``stream`` relative to ``lines`` and ``lines+json`` is printed too.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from django_llmchat.events import TextDelta  # noqa: E402
from django_llmchat.providers import provider_classes  # noqa: E402
from django_llmchat.providers.base import SSEDecoder  # noqa: E402
from django_llmchat.providers.openai_chat import OllamaProvider, OpenAIChatProvider  # noqa: E402
from django_llmchat.providers.types import ProviderMessage, ProviderRequest  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "wire"
CHUNK = 16 * 1024

# label -> (registry name or a class, fixture, interaction index, model)
CASES: list[tuple[str, object, str, int, str]] = [
    ("openai_chat", OpenAIChatProvider,
     "chat_function_calling_deepseek_deepseek-chat_can_use_tools_with_multi-turn_streaming_conversations",
     1, "gpt-4.1-mini"),
    ("ollama", OllamaProvider,
     "chat_streaming_responses_ollama_qwen3_supports_streaming_responses", 0, "qwen3"),
    ("mistral", "mistral",
     "chat_function_calling_mistral_mistral-small-latest_can_use_tools_with_multi-turn_streaming_conversations",
     1, "mistral-small-latest"),
    ("openrouter", "openrouter",
     "chat_function_calling_openrouter_claude-haiku-4-5_can_use_tools_with_multi-turn_streaming_conversations",
     1, "anthropic/claude-haiku-4.5"),
    ("anthropic", "anthropic",
     "chat_streaming_responses_anthropic_claude-haiku-4-5_supports_streaming_responses", 0,
     "claude-haiku-4-5"),
    ("openai", "openai",
     "chat_streaming_responses_openai_gpt-5-nano_supports_streaming_responses", 0, "gpt-5-nano"),
    ("xai", "xai",
     "chat_function_calling_xai_grok-4-1-fast-non-reasoning_can_use_tools_with_multi-turn_streaming_conversations",
     1, "grok-4-1-fast-non-reasoning"),
    ("gemini", "gemini",
     "chat_streaming_responses_gemini_gemini-2_5-flash_supports_streaming_responses", 0,
     "gemini-2.5-flash"),
]  # fmt: skip


def _frames(body: str) -> list[str]:
    """The body's SSE frames, each with its trailing blank line, in wire form."""
    sep = "\r\n\r\n" if "\r\n\r\n" in body else "\n\n"
    parts = [p for p in body.split(sep) if p.strip()]
    return [p + sep for p in parts]


def build_body(provider, request: ProviderRequest, body: str, events: int) -> bytes:
    """Repeat the frames that produce exactly one TextDelta until there are ``events``."""
    frames = _frames(body)
    parser = provider.new_stream_parser(request)
    kinds = []
    for frame in frames:
        produced = []
        for name, data in SSEDecoder().feed(frame) + SSEDecoder().flush()[:0]:
            produced.extend(parser.feed(name, data))
        kinds.append(len(produced) == 1 and type(produced[0]) is TextDelta)
    text = [i for i, is_text in enumerate(kinds) if is_text]
    if not text:
        raise ValueError("no text-delta frames in the fixture")
    head, tail = frames[: text[0]], frames[text[-1] + 1 :]
    middle = [frames[i] for i in text]
    repeated = [middle[i % len(middle)] for i in range(events)]
    return "".join(head + repeated + tail).encode("utf-8")


def timed(paths: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best time of each path; runs are interleaved so machine noise hits all alike, and
    the garbage collector is paused while a path runs."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(repeat):
        for name, fn in paths.items():
            gc.collect()
            gc.disable()
            start = time.perf_counter()
            try:
                fn()
            finally:
                elapsed = time.perf_counter() - start
                gc.enable()
            times[name].append(elapsed)
    return {name: min(values) for name, values in times.items()}


def run_lines(raw: bytes) -> None:
    for _line in raw.decode("utf-8").splitlines():
        pass


def run_lines_json(raw: bytes) -> None:
    loads = json.loads
    for line in raw.decode("utf-8").splitlines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            loads(line[5:])


def run_parser(provider, request: ProviderRequest, raw: bytes) -> int:
    parser = provider.new_stream_parser(request)
    add = parser.builder.add
    decoder = SSEDecoder()
    count = 0
    for i in range(0, len(raw), CHUNK):
        for name, data in decoder.feed(raw[i : i + CHUNK]):
            for event in parser.feed(name, data):
                add(event)
                count += 1
    for name, data in decoder.flush():
        for event in parser.feed(name, data):
            add(event)
            count += 1
    parser.finish()
    return count


class _FrameStream(httpx.SyncByteStream):
    """The body one SSE frame per read, as a server writing each frame at once sends it."""

    def __init__(self, frames: list[bytes]):
        self.frames = frames

    def __iter__(self):
        yield from self.frames


def frame_transport(raw: bytes) -> httpx.MockTransport:
    text = raw.decode("utf-8")
    frames = [f.encode("utf-8") for f in _frames(text)]
    return httpx.MockTransport(
        lambda req: httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_FrameStream(frames)
        )
    )


def run_http_lines(raw: bytes) -> None:
    with httpx.Client(transport=frame_transport(raw)) as client:
        with client.stream("POST", "http://bench.invalid/v1/stream") as response:
            for _line in response.iter_lines():
                pass


def run_stream(cls, request: ProviderRequest, raw: bytes) -> int:
    provider = cls(
        api_key="bench-key", base_url="http://bench.invalid/v1", transport=frame_transport(raw)
    )
    count = sum(1 for _ in provider.stream(request))
    return count


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--events", type=int, default=20_000, help="text deltas per body")
    args.add_argument("--repeat", type=int, default=7, help="runs per figure (best is kept)")
    opts = args.parse_args()

    classes = provider_classes()
    header = (
        f"{'provider':<12} {'events':>7} {'MB':>6} | {'http lines':>11} {'stream ev/s':>11} "
        f"{'RATIO':>6} | {'lines ev/s':>11} {'lines+json':>11} {'parser ev/s':>11} | "
        f"{'parser/lines':>12} {'parser/json':>11} {'stream/json':>11}"
    )
    print(header)
    print("-" * len(header))
    for label, target, fixture, index, model in CASES:
        cls = classes.get(target) if isinstance(target, str) else target
        if cls is None:
            print(f"{label:<12} skipped (module not importable yet)")
            continue
        recorded = json.loads((FIXTURES / f"{fixture}.json").read_text())["interactions"][index]
        request = ProviderRequest(model_id=model, messages=[ProviderMessage("user", "hi")])
        provider = cls(api_key="bench-key", base_url="http://bench.invalid/v1")
        try:
            raw = build_body(provider, request, recorded["response"]["body"], opts.events)
        except Exception as exc:  # a parser that cannot replay single frames
            print(f"{label:<12} skipped ({exc})")
            continue
        events = run_parser(provider, request, raw)
        t = timed(
            {
                "http": lambda raw=raw: run_http_lines(raw),
                "lines": lambda raw=raw: run_lines(raw),
                "json": lambda raw=raw: run_lines_json(raw),
                "parser": lambda p=provider, q=request, raw=raw: run_parser(p, q, raw),
                "stream": lambda c=cls, q=request, raw=raw: run_stream(c, q, raw),
            },
            opts.repeat,
        )
        t_http, t_lines, t_json = t["http"], t["lines"], t["json"]
        t_parser, t_stream = t["parser"], t["stream"]
        print(
            f"{label:<12} {events:>7} {len(raw) / 1e6:>6.1f} | {events / t_http:>11,.0f} "
            f"{events / t_stream:>11,.0f} {t_stream / t_http:>6.2f} | {events / t_lines:>11,.0f} "
            f"{events / t_json:>11,.0f} {events / t_parser:>11,.0f} | "
            f"{t_parser / t_lines:>12.1f} {t_parser / t_json:>11.2f} {t_stream / t_json:>11.2f}"
        )
    print("\nRATIO = stream / http lines: time to read events through provider.stream() over")
    print("the time to iterate the same response's lines with httpx (target: at most 2).")


if __name__ == "__main__":
    main()
