"""Test helpers: a real loopback HTTP server that speaks the LLM vendors' wire formats.

::

    from django_llmchat.testing import FakeProviderServer, Reply, ToolCall, Fault

    with FakeProviderServer() as server:
        server.script(
            Reply(tool_calls=[ToolCall("weather", {"city": "Berlin"})]),
            Reply("It is 15°C in Berlin."),
        )
        ...  # point LLMCHAT["PROVIDERS"][name]["base_url"] at server.base_url(name)
        assert server.requests[0].body["model"] == "gpt-4.1-mini"

Pytest users can register :mod:`django_llmchat.testing.pytest_plugin` for a ready
``fake_llm`` fixture. See ``docs/testing.md``.
"""

import importlib
from typing import Any

from .server import PROVIDER_NAMES, FakeProviderServer, Responder, echo
from .wire import FORMATS, Fault, RecordedRequest, Reply, ToolCall

# read lazily: the pytest plugin imports pytest, the invariants and the demo the models
_EXPORTS = {
    "FakeLLM": ".pytest_plugin",
    "assert_one_path": ".invariants",
    "path_problems": ".invariants",
    "DEMO_TOOLS": ".demo",
    "DEMO_MODEL": ".demo",
    "demo_server": ".demo",
}

__all__ = [
    "FORMATS",
    "PROVIDER_NAMES",
    "FakeProviderServer",
    "Fault",
    "RecordedRequest",
    "Reply",
    "Responder",
    "ToolCall",
    "echo",
    *_EXPORTS,
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
