"""An offline demo model: a provider that needs no key and no network.

:class:`DemoProvider` speaks OpenAI Chat Completions to a
:class:`~django_llmchat.testing.FakeProviderServer` started lazily, once per process, on
``127.0.0.1``. Its :func:`demo_responder` streams a made-up answer built from the user's
message (with thinking and token usage), and calls the demo tools :func:`demo_weather` and
:func:`demo_clock` when the message asks about the weather or the time, and
:func:`demo_book_table` (a tool that waits for approval) when it asks to book.

Enable it with::

    LLMCHAT = {
        "DEFAULT_PROVIDER": "demo",
        "DEFAULT_MODEL": "demo-model",
        "PROVIDERS": {"demo": {"class": "django_llmchat.testing.demo.DemoProvider"}},
        "TOOL_MODULES": ["django_llmchat.testing.demo"],
    }

Nothing it says is true: it is a stand-in to try the app without an account.
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from ..providers.openai_chat import ChatCompletionsProvider
from ..providers.types import Capabilities
from ..tools import tool
from .server import FakeProviderServer
from .wire import RecordedRequest, Reply, ToolCall

__all__ = [
    "DEMO_MODEL",
    "DEMO_TOOLS",
    "DemoProvider",
    "demo_book_table",
    "demo_clock",
    "demo_responder",
    "demo_server",
    "demo_weather",
    "stop_demo_server",
]

DEMO_MODEL = "demo-model"
"""The model id the demo answers as (any other id works too)."""

CHUNK_SIZE = 12
"""Characters per streamed delta."""

CHUNK_DELAY = 0.025
"""Seconds between streamed frames, so that the reply visibly streams."""

_server: FakeProviderServer | None = None
_server_lock = threading.Lock()


# -- demo tools -----------------------------------------------------------------------------

_CONDITIONS = ("sunny", "partly cloudy", "overcast", "light rain", "windy", "foggy")


@tool
def demo_weather(city: str) -> dict[str, Any]:
    """Gets the current weather for a city (demo data, made up)."""
    seed = zlib.crc32(city.strip().lower().encode())
    return {
        "city": city,
        "temperature_c": 4 + seed % 24,
        "conditions": _CONDITIONS[seed % len(_CONDITIONS)],
        "source": "demo data",
    }


_ZONES = {
    "UTC": 0,
    "GMT": 0,
    "CET": 1,
    "EET": 2,
    "IST": 5.5,
    "JST": 9,
    "AEST": 10,
    "EST": -5,
    "CST": -6,
    "MST": -7,
    "PST": -8,
}


@tool
def demo_clock(timezone_name: str = "UTC") -> dict[str, Any]:
    """Tells the current time in a time zone abbreviation such as UTC, CET or PST."""
    name = timezone_name.strip().upper() or "UTC"
    if name not in _ZONES:
        raise ValueError(f"unknown time zone {timezone_name!r}; try one of {', '.join(_ZONES)}")
    zone = timezone(timedelta(hours=_ZONES[name]), name)
    now = datetime.now(UTC).astimezone(zone)
    return {"timezone": name, "time": now.strftime("%H:%M"), "date": now.date().isoformat()}


@tool(requires_approval=True)
def demo_book_table(restaurant: str, people: int = 2) -> str:
    """Books a table at a restaurant (demo: nothing is booked). Needs the user's approval."""
    return f"Booked a table for {people} at {restaurant} (demo: nothing was really booked)."


DEMO_TOOLS = ("demo_weather", "demo_clock", "demo_book_table")
"""The names of the demo tools, to enable on a chat: ``chat.with_tools(*DEMO_TOOLS)``."""


# -- the responder --------------------------------------------------------------------------

_CITY = re.compile(r"\b(?:in|at|for)\s+([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)")
_RESTAURANT = re.compile(r"\bat\s+([A-Z][\w'&-]*(?:\s+[A-Z][\w'&-]*)*)")
_PEOPLE = re.compile(r"\bfor\s+(\d{1,2})\b")
_ZONE = re.compile(r"\b(" + "|".join(_ZONES) + r")\b", re.I)


def _offered(request: RecordedRequest) -> set[str]:
    """Tool names the request makes available to the model."""
    body = request.body if isinstance(request.body, dict) else {}
    names = set()
    for item in body.get("tools") or []:
        function = item.get("function") if isinstance(item, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def _tokens(request: RecordedRequest, text: str, thinking: str = "") -> dict[str, int]:
    """A rough count, four characters a token, as a real model would report it."""
    prompt = len(request.raw_body or b"") // 4
    thought = (len(thinking) + 3) // 4
    output = max(1, (len(text) + 3) // 4) + thought
    return {"input_tokens": max(1, prompt), "output_tokens": output, "thinking_tokens": thought}


def _reply(request: RecordedRequest, text: str = "", thinking: str = "", calls=()) -> Reply:
    arguments = "".join(json.dumps(c.arguments) for c in calls)
    return Reply(
        text=text,
        thinking=thinking or None,
        tool_calls=list(calls),
        usage=_tokens(request, text + arguments, thinking),
        chunk_size=CHUNK_SIZE,
    )


def _tool_results(request: RecordedRequest) -> list[tuple[str, str]]:
    """``(tool name, result text)`` for the tool messages at the end of the conversation.

    Each result pairs with the call of the assistant message before them at its position
    (preferring a call with its id when the order differs): ids may repeat or be empty."""
    messages = [m for m in request.messages if isinstance(m, dict)]
    start = len(messages)
    while start > 0 and messages[start - 1].get("role") == "tool":
        start -= 1
    calls = messages[start - 1].get("tool_calls") if start > 0 else None
    pending = [c for c in calls or () if isinstance(c, dict)]
    results: list[tuple[str, str]] = []
    for m in messages[start:]:
        call = _take_call(pending, m.get("tool_call_id"))
        name = ((call or {}).get("function") or {}).get("name") or "tool"
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        results.append((name, str(content or "")))
    return results


def _take_call(pending: list[dict[str, Any]], call_id: Any) -> dict[str, Any] | None:
    if not pending:
        return None
    for index, call in enumerate(pending):
        if call.get("id") == call_id:
            return pending.pop(index)
    return pending.pop(0)


def _describe(name: str, result: str) -> str:
    try:
        data = json.loads(result)
    except ValueError:
        data = result
    if isinstance(data, dict) and "error" in data:
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(error, dict) and error.get("type") == "denied":
            return "You declined that, so I did nothing."
        return f"The {name} tool failed: {message}."
    if name == "demo_weather" and isinstance(data, dict):
        return (
            f"It is {data.get('temperature_c')}°C and {data.get('conditions')} in "
            f"{data.get('city')} right now (made-up demo data)."
        )
    if name == "demo_book_table" and isinstance(data, str):
        return f"Done. {data}"
    if name == "demo_clock" and isinstance(data, dict):
        return f"It is {data.get('time')} in {data.get('timezone')} on {data.get('date')}."
    return f"The {name} tool answered: {data}"


def _answer(text: str) -> tuple[str, str]:
    """``(answer, thinking)`` for a plain message: several sentences about it."""
    words = re.findall(r"[\w'-]+", text)
    longest = max(words, key=len) if words else ""
    quoted = text if len(text) <= 120 else text[:117].rstrip() + "..."
    thinking = (
        f"The user wrote {len(words)} word{'s' if len(words) != 1 else ''}. "
        "No real model is configured, so I will reflect the message back, "
        "say what I noticed, and mention what the demo can do."
    )
    # markdown, as real models answer: a page that renders it shows bold, a list, code
    paragraphs = [
        "Hello! I am the **offline demo model**, so this answer is made up on the spot.",
        f"You wrote: “{quoted}”",
    ]
    if longest:
        paragraphs.append(
            f"That is {len(words)} word{'s' if len(words) != 1 else ''}, "
            f"and the longest one is “{longest}”."
        )
    if text.rstrip().endswith("?"):
        paragraphs.append("It sounds like a question; a real model would now try to answer it.")
    paragraphs.append(
        "Ask me about the **weather** in a city, the **time** in a time zone, or to **book** "
        "a table, and I will call a demo tool."
    )
    paragraphs.append(
        "Set `OPENAI_API_KEY`, `ANTHROPIC_API_KEY` or `GEMINI_API_KEY` (or run Ollama) "
        "to talk to a real model."
    )
    return "\n\n".join(paragraphs), thinking


def demo_responder(request: RecordedRequest) -> Reply:
    """Answer one request of the demo model (any wire format the fake server speaks)."""
    results = _tool_results(request)
    if results:
        text = " ".join(_describe(name, result) for name, result in results)
        thinking = "The tools answered; I will put their results into words."
        return _reply(request, text, thinking)
    text = request.last_user_text
    lowered = text.lower()
    offered = _offered(request)
    if "demo_weather" in offered and "weather" in lowered:
        found = _CITY.search(text)
        city = found.group(1) if found else "Paris"
        thinking = f"The user asks about the weather in {city}; the demo_weather tool knows."
        return _reply(request, "", thinking, [ToolCall("demo_weather", {"city": city})])
    if "demo_clock" in offered and re.search(r"\b(time|clock)\b", lowered):
        found = _ZONE.search(text)
        zone = found.group(1).upper() if found else "UTC"
        thinking = f"The user asks for the time; demo_clock tells it for {zone}."
        call = ToolCall("demo_clock", {"timezone_name": zone})
        return _reply(request, "", thinking, [call])
    if "demo_book_table" in offered and re.search(r"\b(book|reserve)\b", lowered):
        found = _RESTAURANT.search(text)
        people = _PEOPLE.search(text)
        arguments = {
            "restaurant": found.group(1) if found else "Chez Demo",
            "people": int(people.group(1)) if people else 2,
        }
        thinking = "Booking needs the user's approval first; I will ask for it."
        return _reply(
            request,
            "I can book that once you approve.",
            thinking,
            [ToolCall("demo_book_table", arguments)],
        )
    answer, thinking = _answer(text or "(nothing)")
    return _reply(request, answer, thinking)


# -- the server and the provider -----------------------------------------------------------


def demo_server() -> FakeProviderServer:
    """The process's demo server, started on first use."""
    global _server
    if _server is None or not _server.running:
        with _server_lock:
            if _server is None or not _server.running:
                _server = FakeProviderServer(
                    responder=demo_responder, chunk_delay=CHUNK_DELAY, default=None
                ).start()
    return _server


def stop_demo_server() -> None:
    """Stop the demo server (a later :func:`demo_server` call starts a new one)."""
    global _server
    with _server_lock:
        server, _server = _server, None
    if server is not None:
        server.stop()


class DemoProvider(ChatCompletionsProvider):
    """The offline demo model, over Chat Completions to the process's demo server.

    A configured ``base_url`` is used as it is (for instance a test's fake server);
    otherwise the demo server is started and used.
    """

    name = "demo"
    label = "Demo (offline, made-up answers)"
    requires_api_key = False
    capabilities = Capabilities(thinking=True, prompt_caching="none")

    def __init__(self, **kwargs: Any):
        if not kwargs.get("base_url"):
            kwargs["base_url"] = demo_server().base_url("openai")
        super().__init__(**kwargs)
