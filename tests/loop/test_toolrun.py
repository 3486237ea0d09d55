"""Tool time limits: every timed call runs in a fresh daemon thread of its own, so hung
tools keep only their own threads and never starve later calls; only the limit passing
is a ``timeout_error``; a tool's own exceptions (its ``TimeoutError`` too) are
``execution_error``; ``InterruptError`` still propagates."""

import contextvars
import json
import logging
import threading
import time

import pytest

from django_llmchat.agents import interrupt
from django_llmchat.errors import InterruptError
from django_llmchat.models import Chat
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call
from django_llmchat.tools import Tool, abandoned_tool_threads, tool

LIMIT = 0.05  # small, so 40 hung calls take about 2 s in all
HUNG = 40  # more than the 32 threads of the old shared pool
WAIT = 30.0  # generous: the machine is shared, nothing here asserts on speed


def wait_until(predicate, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def release():
    """An event hung tools block on; set at teardown, which then waits for their threads
    to end (and fails if they do not)."""
    # threads another test abandoned (tests/test_tools_agents.py's ``slow`` sleeps
    # 2 s) end first, so the counts below are this test's own
    assert wait_until(lambda: abandoned_tool_threads() == 0)
    event = threading.Event()
    try:
        yield event
    finally:
        event.set()
        assert wait_until(lambda: abandoned_tool_threads() == 0)


def hang_on(event):
    def hang(n: int = 0) -> str:
        """Blocks until the test releases it"""
        event.wait(WAIT * 2)
        return "released"

    return Tool(hang, name="timeouts_hang")


def add(a: int, b: int = 1) -> int:
    """Adds two numbers"""
    return a + b


def tool_threads():
    return [t for t in threading.enumerate() if t.name == "llmchat-tool-timeouts_hang"]


def test_hung_tools_do_not_starve_later_calls(release):
    # With the old code every timed call went to one process-wide
    # ThreadPoolExecutor(max_workers=32): the first 32 hung calls held all its threads,
    # calls 33..40 queued behind them and timed out without ever starting, and so did the
    # final ``add`` (queued behind 8 more hung calls, its future could not start within the
    # limit): its result was a timeout_error instead of 3. Checked by running this test's
    # body against the old ``git show HEAD:django_llmchat/tools.py`` loaded as a temporary
    # module: it fails (40 hung calls left 32 threads, and ``add`` got a timeout_error).
    hang = hang_on(release)
    for n in range(HUNG):
        result = hang.run({"n": n}, timeout=LIMIT)
        assert result.is_error and result.error_type == "timeout_error"
        message = result.content["error"]["message"]
        assert message == f"timeouts_hang did not finish within {LIMIT} s"
    assert len(tool_threads()) == HUNG  # one fresh thread per call, each still hung
    result = Tool(add).run({"a": 2}, timeout=WAIT)
    assert not result.is_error and result.content == 3


def test_abandoned_thread_count_goes_up_then_back_to_zero(release):
    hang = hang_on(release)
    for n in range(HUNG):
        hang.run({"n": n}, timeout=LIMIT)
    assert abandoned_tool_threads() == HUNG
    release.set()
    assert wait_until(lambda: abandoned_tool_threads() == 0)
    assert wait_until(lambda: not tool_threads())  # ended; their late results dropped


def test_abandoned_tool_is_logged_by_name_without_its_arguments(release, caplog):
    def hang(token: str) -> str:
        """Blocks until the test releases it"""
        release.wait(WAIT * 2)
        return "released"

    with caplog.at_level(logging.WARNING, logger="django_llmchat.tools"):
        result = Tool(hang, name="timeouts_secret").run({"token": "s3cr3t"}, timeout=LIMIT)
    assert result.error_type == "timeout_error"
    [record] = [r for r in caplog.records if r.name == "django_llmchat.tools"]
    assert record.levelno == logging.WARNING
    assert "timeouts_secret" in record.getMessage()
    assert "s3cr3t" not in record.getMessage()


def own_timeout() -> str:
    """Raises a TimeoutError of its own"""
    raise TimeoutError("upstream API timed out")


@pytest.mark.parametrize("limit", [None, WAIT], ids=["untimed", "timed"])
def test_tools_own_timeout_error_is_an_execution_error(limit):
    result = Tool(own_timeout).run({}, timeout=limit)
    assert result.is_error and result.error_type == "execution_error"
    assert result.content["error"]["message"] == "TimeoutError: upstream API timed out"


def test_tools_own_timeout_error_with_a_tool_level_limit():
    result = Tool(own_timeout, timeout=WAIT).run({})
    assert result.error_type == "execution_error"


def stop_here(reason: str) -> str:
    """Interrupts the run"""
    interrupt(reason)
    return "unreachable"


@pytest.mark.parametrize("limit", [None, WAIT], ids=["untimed", "timed"])
def test_interrupt_from_a_tool_propagates(limit):
    with pytest.raises(InterruptError) as info:
        Tool(stop_here).run({"reason": "needs a human"}, timeout=limit)
    assert info.value.reason == "needs a human"


@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt])
def test_base_exceptions_in_a_timed_tool_are_execution_errors(exc_type):
    def bail() -> str:
        """Exits"""
        raise exc_type("bye")

    result = Tool(bail).run({}, timeout=WAIT)
    assert result.error_type == "execution_error"
    assert result.content["error"]["message"] == f"{exc_type.__name__}: bye"


def test_other_exceptions_and_values_of_a_timed_tool():
    def fail() -> str:
        """Fails"""
        raise ValueError("nope")

    assert Tool(fail).run({}, timeout=WAIT).content["error"] == {
        "type": "execution_error",
        "message": "ValueError: nope",
    }
    assert Tool(add).run({"a": 1, "b": 2}, timeout=WAIT).content == 3


REQUEST_ID = contextvars.ContextVar("request_id", default=None)


def test_timed_tool_sees_the_callers_context_variables_in_its_own_thread():
    def where() -> dict:
        """Reports its context variable and thread"""
        return {"request_id": REQUEST_ID.get(), "thread": threading.current_thread().name}

    token = REQUEST_ID.set("req-17")
    try:
        result = Tool(where, name="timeouts_where").run({}, timeout=WAIT)
    finally:
        REQUEST_ID.reset(token)
    assert result.content == {"request_id": "req-17", "thread": "llmchat-tool-timeouts_where"}


HANG_RUN = threading.Event()


@tool(name="timeouts_stuck", timeout=LIMIT)
def stuck() -> str:
    """Hangs until the test releases it"""
    HANG_RUN.wait(WAIT * 2)
    return "late"


@pytest.mark.django_db(transaction=True)
def test_run_goes_on_after_a_tool_times_out(fake_llm):
    assert wait_until(lambda: abandoned_tool_threads() == 0)
    HANG_RUN.clear()
    try:
        fake_llm.configure("openai", "gpt-4.1-mini")
        fake_llm.script(
            Reply(tool_calls=[Call("timeouts_stuck", call_id="call_stuck")]),
            Reply("The tool took too long, sorry."),
        )
        chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
        reply = chat.with_tools(stuck).ask("go")
        assert reply.content == "The tool took too long, sorry."
        [message] = chat.messages.filter(role="tool")
        assert message.tool_call_id == "call_stuck"
        assert json.loads(message.content) == {
            "error": {
                "type": "timeout_error",
                "message": f"timeouts_stuck did not finish within {LIMIT} s",
            }
        }
        assert [m.role for m in chat.messages.order_by("id")][-1] == "assistant"
        assert "timeout_error" in json.dumps(fake_llm.requests[1].body)
    finally:
        HANG_RUN.set()
    assert wait_until(lambda: abandoned_tool_threads() == 0)
