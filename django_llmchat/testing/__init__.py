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

from .server import PROVIDER_NAMES, FakeProviderServer, Responder, echo
from .wire import FORMATS, Fault, RecordedRequest, Reply, ToolCall

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
]
