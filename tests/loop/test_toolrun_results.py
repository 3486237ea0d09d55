"""What a tool's result is stored and sent as: text bounded by
``LLMCHAT["TOOL_RESULT_MAX_CHARS"]`` (the cut marked for the model and on the row), files
through the upload rules, a result that cannot be stored an error result; and no tool
call is ever left without a result, so no later prompt runs a tool again."""

import json
import os

import pytest

from django_llmchat.agents import Agent
from django_llmchat.events import StepFinished, ToolResultDone
from django_llmchat.models import Chat, Run, ToolCall
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call
from django_llmchat.tools import ToolResult, tool
from tests.factories import taken_run

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = ("openai", "gpt-4.1-mini")
HUGE = 10 * 1024 * 1024
HTML = b"<html><body><script>alert(document.cookie)</script></body></html>"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'

ran: list[str] = []


@pytest.fixture(autouse=True)
def _count():
    ran.clear()
    yield
    ran.clear()


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure(*MODEL)
    return Chat.objects.create(provider=MODEL[0], model_id=MODEL[1])


@tool(name="results_huge")
def huge() -> str:
    """Dumps a huge log"""
    ran.append("huge")
    return "x" * HUGE


@tool(name="results_files")
def files() -> ToolResult:
    """Returns a report, a page and a picture"""
    ran.append("files")
    return ToolResult(
        "three files",
        attachments=[
            ("evil.html", HTML, "text/html"),
            ("logo.svg", SVG, "image/svg+xml"),
            ("report.txt", b"all good"),
        ],
    )


class Unprintable:
    def __str__(self):
        raise RuntimeError("no text for you")


def circular():
    value: dict = {}
    value["self"] = value
    return value


JUNK = {
    "circular": circular,
    "unprintable": lambda: {"value": Unprintable()},
    "not_bytes": lambda: ToolResult("a file", attachments=[("a.txt", "text, not bytes")]),
    "not_a_tuple": lambda: ToolResult("a file", attachments=["a.txt"]),
}


@pytest.fixture
def junk_tool(request):
    make = JUNK[request.param]

    @tool(name="results_junk")
    def junk():
        """Charges the card, then returns junk"""
        ran.append("junk")
        return make()

    return junk


def tool_results(chat):
    return list(chat.messages.filter(role="tool").order_by("id"))


def media_files(settings) -> list[str]:
    found = []
    for _root, _dirs, names in os.walk(settings.MEDIA_ROOT):
        found.extend(names)
    return sorted(found)


# -- the bound ------------------------------------------------------------------------------
def test_a_huge_result_is_stored_and_sent_truncated(chat, fake_llm):
    fake_llm.script(Reply(tool_calls=[Call("results_huge", call_id="call_h")]), Reply("Long."))
    assert chat.with_tools(huge).ask("dump the log").content == "Long."
    (result,) = tool_results(chat)
    marker = "\n[truncated: 10,485,760 characters, 100,000 kept]"
    assert result.content == "x" * 100_000 + marker
    assert result.raw == {"truncated": {"characters": HUGE, "kept": 100_000}}
    # the model got the bounded text, not 10 MB
    sent = fake_llm.requests[1]
    assert len(sent.raw_body) < 110_000
    assert marker.strip() in json.dumps(sent.body)
    assert ran == ["huge"]


def test_the_bound_is_a_setting(chat, fake_llm, settings):
    fake_llm.configure(*MODEL, TOOL_RESULT_MAX_CHARS=10)
    fake_llm.script(Reply(tool_calls=[Call("results_huge")]), Reply("Long."))
    chat.with_tools(huge).ask("dump the log")
    (result,) = tool_results(chat)
    assert result.content == "xxxxxxxxxx\n[truncated: 10,485,760 characters, 10 kept]"
    assert result.raw["truncated"] == {"characters": HUGE, "kept": 10}


def test_a_long_error_message_is_bounded_and_stays_json(chat, fake_llm):
    fake_llm.configure(*MODEL, TOOL_RESULT_MAX_CHARS=50)

    @tool(name="results_loud_failure")
    def loud() -> str:
        """Fails with a long story"""
        raise ValueError("y" * 5000)

    fake_llm.script(Reply(tool_calls=[Call("results_loud_failure")]), Reply("Failed."))
    chat.with_tools(loud).ask("go")
    (result,) = tool_results(chat)
    error = json.loads(result.content)["error"]
    assert error["type"] == "execution_error"
    assert error["message"].startswith("ValueError: yyy")
    assert error["message"].endswith("\n[truncated: 5,012 characters, 50 kept]")
    assert result.raw["error"] == error and result.raw["truncated"]["characters"] == 5012


# -- files ----------------------------------------------------------------------------------
def test_html_and_svg_files_of_a_tool_pass_the_upload_rules(chat, fake_llm, settings):
    fake_llm.script(Reply(tool_calls=[Call("results_files", call_id="call_f")]), Reply("Ok."))
    chat.with_tools(files).ask("make the report")
    (result,) = tool_results(chat)
    # as for a user's upload: the page is refused, the SVG is the text it holds
    assert [(a.filename, a.mime_type) for a in result.attachments.all()] == [
        ("logo.txt", "text/plain"),
        ("report.txt", "text/plain"),
    ]
    assert media_files(settings) == ["logo.txt", "report.txt"]  # no .html, no .svg
    assert result.content.startswith("three files\n")
    assert "[file evil.html refused: type text/html is not allowed" in result.content
    assert [r["filename"] for r in result.raw["refused"]] == ["evil.html"]
    # the model was told
    assert "file evil.html refused" in json.dumps(fake_llm.requests[1].body)


def test_a_tool_file_over_the_size_limit_is_refused(chat, fake_llm, settings):
    fake_llm.configure(*MODEL, MAX_ATTACHMENT_SIZE=4)
    fake_llm.script(Reply(tool_calls=[Call("results_files")]), Reply("Ok."))
    chat.with_tools(files).ask("make the report")
    (result,) = tool_results(chat)
    assert result.attachments.count() == 0 and media_files(settings) == []
    assert "[file report.txt refused: too large (8 bytes; at most 4)]" in result.content


# -- malformed results ----------------------------------------------------------------------
@pytest.mark.parametrize("junk_tool", sorted(JUNK), indirect=True)
def test_junk_from_a_tool_is_an_error_result_and_later_prompts_never_run_it_again(
    chat, fake_llm, junk_tool
):
    fake_llm.script(
        Reply(tool_calls=[Call("results_junk", call_id="call_j")]),
        Reply("The tool failed."),
        Reply("Hello again."),
        Reply("Still here."),
    )
    chat.with_tools(junk_tool)
    events = list(chat.stream("charge the card"))
    (done,) = [e for e in events if isinstance(e, ToolResultDone)]
    assert done.error_type == "execution_error"
    assert events[-1].status == "succeeded"
    (result,) = tool_results(chat)
    error = json.loads(result.content)["error"]
    assert error["type"] == "execution_error"
    assert "the result of results_junk cannot be stored" in error["message"]
    assert chat.messages.filter(role="assistant").last().content == "The tool failed."
    assert Chat.objects.get(pk=chat.pk).ask("hi").content == "Hello again."
    assert Chat.objects.get(pk=chat.pk).ask("and now?").content == "Still here."
    assert ran == ["junk"]  # the card was charged once
    assert all(c.get_result() is not None for c in ToolCall.objects.filter(chat=chat))


def test_a_result_whose_files_cannot_be_stored_is_an_error_result(chat, fake_llm, settings):
    blocker = os.path.join(settings.MEDIA_ROOT, "llmchat")
    os.makedirs(settings.MEDIA_ROOT, exist_ok=True)
    with open(blocker, "w") as fh:  # a file where the storage needs a folder
        fh.write("in the way")
    fake_llm.script(
        Reply(tool_calls=[Call("results_files", call_id="call_s")]),
        Reply("Could not store it."),
        Reply("Hello again."),
    )
    assert chat.with_tools(files).ask("make the report").content == "Could not store it."
    (result,) = tool_results(chat)
    error = json.loads(result.content)["error"]
    assert error["type"] == "execution_error"
    assert error["message"].startswith("the result of results_files could not be stored")
    assert result.attachments.count() == 0
    assert Chat.objects.get(pk=chat.pk).ask("hi").content == "Hello again."
    assert ran == ["files"]


# -- no call left without a result ----------------------------------------------------------
@tool(name="results_charge")
def charge() -> str:
    """Charges the card"""
    ran.append("charge")
    return "charged"


def test_a_stream_closed_before_the_tools_ran_answers_the_calls(chat, fake_llm):
    fake_llm.script(
        Reply(tool_calls=[Call("results_charge", call_id="call_c")]),
        Reply("Hello again."),
        Reply("Still here."),
    )
    stream = chat.with_tools(charge).stream("charge the card")
    for event in stream:
        if isinstance(event, StepFinished):
            break  # the step with the call is stored; its tool has not run yet
    stream.close()
    assert Chat.objects.get(pk=chat.pk).last_run.status == "cancelled"
    (result,) = tool_results(chat)
    assert json.loads(result.content)["error"]["type"] == "cancelled"
    assert Chat.objects.get(pk=chat.pk).ask("hi").content == "Hello again."
    assert Chat.objects.get(pk=chat.pk).ask("and now?").content == "Still here."
    assert ran == []  # never run, not by a later prompt either


class Fragile(Agent):
    """An agent whose callback fails on the first reply that calls a tool."""

    provider, model = MODEL
    tools = [charge]
    failed: list[int] = []

    def on_message(self, message, context):
        if message.role == "assistant" and message.tool_calls.exists() and not self.failed:
            self.failed.append(message.pk)
            raise RuntimeError("the callback broke")


def test_a_run_that_fails_after_storing_its_calls_answers_them(fake_llm):
    fake_llm.configure(*MODEL)
    Fragile.failed.clear()
    chat = Fragile.start_chat()
    fake_llm.script(
        Reply(tool_calls=[Call("results_charge", call_id="call_c")]),
        Reply("Hello again."),
        Reply("Still here."),
    )
    with pytest.raises(RuntimeError, match="the callback broke"):
        chat.ask("charge the card")
    assert Chat.objects.get(pk=chat.pk).last_run.status == "failed"
    (result,) = tool_results(chat)
    error = json.loads(result.content)["error"]
    assert error["type"] == "execution_error" and "not run again" in error["message"]
    assert Chat.objects.get(pk=chat.pk).ask("hi").content == "Hello again."
    assert Chat.objects.get(pk=chat.pk).ask("and now?").content == "Still here."
    assert ran == []


def test_a_run_taken_over_from_a_dead_worker_does_not_run_its_calls_again(chat, fake_llm):
    prompt = chat.add_message(role="user", content="charge the card")
    # the dead worker stored the step calling the tool, then died while it ran
    run = taken_run(chat, None, lease=-5, worker="dead-host:1", steps=1)
    Run.objects.filter(pk=run.pk).update(prompt=prompt)
    call_message = chat.add_message(role="assistant", content="", run=run)
    ToolCall.objects.create(
        chat=chat, message=call_message, call_id="call_d", name="results_charge"
    )
    fake_llm.script(Reply("It may have been charged."), Reply("Hello again."))
    chat = Chat.objects.get(pk=chat.pk).with_tools(charge)
    assert chat.complete().content == "It may have been charged."
    assert ran == []
    (result,) = tool_results(chat)
    error = json.loads(result.content)["error"]
    assert error["type"] == "interrupted"
    assert "not run again" in error["message"]
    assert "interrupted" in json.dumps(fake_llm.requests[0].body)
    run.refresh_from_db()
    assert run.status == "succeeded" and run.attempt == 2
    assert Chat.objects.get(pk=chat.pk).ask("hi").content == "Hello again."
    assert ran == []


@tool(name="results_binary_text")
def binary_text() -> str:
    """Returns text read from a binary file"""
    ran.append("binary_text")
    return "before\x00after \ud800 end"


def test_text_no_database_stores_is_made_storable(chat, fake_llm):
    # PostgreSQL refuses NUL characters, every encoding a lone surrogate
    fake_llm.script(Reply(tool_calls=[Call("results_binary_text")]), Reply("Read."))
    assert chat.with_tools(binary_text).ask("read it").content == "Read."
    (result,) = tool_results(chat)
    assert result.content == "before\ufffdafter ? end"
    assert ran == ["binary_text"]


def test_an_error_result_of_plain_text_is_stored_as_an_error(chat, fake_llm):
    @tool(name="results_plain_error")
    def plain_error() -> ToolResult:
        """Says it failed in its own words"""
        return ToolResult("the printer is out of paper", is_error=True)

    fake_llm.script(Reply(tool_calls=[Call("results_plain_error")]), Reply("No paper."))
    events = list(chat.with_tools(plain_error).stream("print it"))
    (done,) = [e for e in events if isinstance(e, ToolResultDone)]
    assert done.error_type == "execution_error"
    (result,) = tool_results(chat)
    error = {"type": "execution_error", "message": "the printer is out of paper"}
    assert json.loads(result.content) == {"error": error}
    assert result.raw == {"error": error}


def test_a_run_given_up_after_its_workers_died_answers_its_calls(chat, fake_llm, settings):
    fake_llm.configure(*MODEL, RUN_MAX_ATTEMPTS=2)
    prompt = chat.add_message(role="user", content="charge the card")
    run = taken_run(chat, None, lease=-5, worker="dead-host:2", attempt=2, steps=1)
    Run.objects.filter(pk=run.pk).update(prompt=prompt)
    call_message = chat.add_message(role="assistant", content="", run=run)
    ToolCall.objects.create(
        chat=chat, message=call_message, call_id="call_g", name="results_charge"
    )
    fake_llm.script(Reply("Hello again."))
    chat = Chat.objects.get(pk=chat.pk).with_tools(charge)
    assert chat.ask("hi").content == "Hello again."  # the dead run is given up first
    run.refresh_from_db()
    assert (run.status, run.error_type) == ("failed", "worker_lost")
    (result,) = tool_results(chat)
    assert json.loads(result.content)["error"]["type"] == "interrupted"
    assert ran == []
