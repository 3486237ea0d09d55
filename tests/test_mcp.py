"""MCP tools (django_llmchat.mcp) against servers built with the SDK itself: in process
(the SDK's in-memory transport), over streamable HTTP on a loopback port (uvicorn in a
thread) and over stdio (a subprocess), driven through real chat runs against the fake
provider."""

import asyncio
import base64
import json
import logging
import os
import socket
import sys
import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings

from django_llmchat import mcp as llm_mcp
from django_llmchat.agents import Agent
from django_llmchat.checks import check_settings
from django_llmchat.events import Interrupt, ToolResultDone
from django_llmchat.models import Chat, Message, ToolCall
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as Call
from django_llmchat.tools import get_tools
from tests.conftest import import_or_unavailable

import_or_unavailable("mcp")

from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402
from mcp.types import (  # noqa: E402
    BlobResourceContents,
    EmbeddedResource,
    ImageContent,
    TextContent,
)

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = ("openai", "gpt-4.1-mini")

# -- the servers --------------------------------------------------------------------------
files = MCPServer("files", log_level="ERROR")
deleted: list[str] = []
slow_release = threading.Event()


@files.tool()
def read_file(path: str) -> str:
    """Reads a file of the user's workspace."""
    return f"contents of {path}"


@files.tool()
def delete_file(path: str) -> str:
    """Deletes a file."""
    deleted.append(path)
    return f"deleted {path}"


@files.tool()
def broken(path: str) -> str:
    """A tool whose disk is on fire."""
    raise ToolError(f"cannot read {path}: disk on fire")


@files.tool()
def whoami(ctx: Context) -> str:
    """Says whose token the request carried."""
    return (ctx.headers or {}).get("authorization", "nobody")


@files.tool()
async def slow(path: str) -> str:
    """Takes its time."""
    await asyncio.sleep(5)
    return "late"


# a server whose answers break the rules: each tool counts its calls
odd = MCPServer("odd", log_level="ERROR")
odd_calls: list[str] = []
HTML = b"<html><body><script>alert(document.cookie)</script></body></html>"
SVG = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
HUGE = 10 * 1024 * 1024


@odd.tool()
def bad_image() -> list[ImageContent]:
    """Sends a picture whose bytes are not base64."""
    odd_calls.append("bad_image")
    return [ImageContent(type="image", data="%%% not base64 %%%", mime_type="image/png")]


@odd.tool()
def huge_log() -> str:
    """Sends ten megabytes of log."""
    odd_calls.append("huge_log")
    return "x" * HUGE


@odd.tool()
def web_page() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Sends a page, a picture and a report."""
    odd_calls.append("web_page")
    return [
        TextContent(type="text", text="three files"),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(
                uri="file:///srv/evil.html",
                mime_type="text/html",
                blob=base64.b64encode(HTML).decode(),
            ),
        ),
        ImageContent(type="image", data=base64.b64encode(SVG).decode(), mime_type="image/svg+xml"),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(
                uri="file:///srv/report.txt",
                mime_type="text/plain",
                blob=base64.b64encode(b"all good").decode(),
            ),
        ),
    ]


@pytest.fixture(autouse=True)
def _fresh():
    llm_mcp.clear_cache()
    deleted.clear()
    odd_calls.clear()
    yield
    llm_mcp.clear_cache()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackMCP:
    """An SDK server's streamable HTTP app served by uvicorn on 127.0.0.1."""

    def __init__(self, server):
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(
            server.streamable_http_app() if isinstance(server, MCPServer) else server,
            host="127.0.0.1",
            port=self.port,
            log_level="error",
        )
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)

    def start(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.uvicorn.started:
            assert time.monotonic() < deadline, "the MCP server did not start"
            time.sleep(0.02)
        return self

    def stop(self):
        self.uvicorn.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def http_files():
    server = LoopbackMCP(files).start()
    yield server
    server.stop()


def configure(fake_llm, **servers):
    fake_llm.configure(*MODEL, MCP_SERVERS=servers)


def tool_messages(chat):
    return list(chat.messages.filter(role="tool").order_by("created_at", "id"))


def spec_names(request) -> list[str]:
    body = request.body
    return sorted(t.get("name") or t["function"]["name"] for t in body.get("tools", []))


# -- in memory ----------------------------------------------------------------------------
def test_a_chat_calls_an_mcp_tool_in_memory(fake_llm):
    configure(fake_llm, files={"server": files})
    fake_llm.script(
        Reply(tool_calls=[Call("read_file", {"path": "notes.txt"}, call_id="call_1")]),
        Reply("The notes say hello."),
    )
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:files")
    reply = chat.ask("What do my notes say?")
    assert reply.content == "The notes say hello."
    assert chat.tools == ["mcp:files"]
    call = ToolCall.objects.get(call_id="call_1")
    assert (call.name, call.arguments) == ("read_file", {"path": "notes.txt"})
    assert call.get_result().content == "contents of notes.txt"
    # the model saw the server's tools, with the server's schema and description
    first = fake_llm.requests[0]
    assert spec_names(first) == ["broken", "delete_file", "read_file", "slow", "whoami"]
    (spec,) = [t for t in first.body["tools"] if t.get("name") == "read_file"]
    assert spec["description"] == "Reads a file of the user's workspace."
    assert spec["parameters"]["properties"] == {"path": {"type": "string"}}
    assert spec["parameters"]["required"] == ["path"]
    # the result went back to the model
    assert "contents of notes.txt" in json.dumps(fake_llm.requests[1].body)


def test_a_filtered_spec_takes_some_tools(fake_llm):
    configure(fake_llm, files={"server": files})
    fake_llm.script(Reply("ok"))
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1])
    chat.with_tools("mcp:files/read_file,whoami").ask("hi")
    assert spec_names(fake_llm.requests[0]) == ["read_file", "whoami"]


def test_an_approval_required_mcp_tool_pauses_and_resumes(fake_llm):
    configure(fake_llm, files={"server": files, "requires_approval": ["delete_file"]})
    fake_llm.script(
        Reply(tool_calls=[Call("delete_file", {"path": "a.txt"}, call_id="call_del")]),
        Reply("Deleted a.txt."),
    )
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:files")
    events = list(chat.stream("delete a.txt"))
    assert events[-2] == Interrupt(reason="approval_required")
    assert events[-1].status == "awaiting_approval"
    assert deleted == [] and tool_messages(chat) == []
    reply = chat.approve("call_del")
    assert deleted == ["a.txt"]
    assert reply.content == "Deleted a.txt."
    assert ToolCall.objects.get(call_id="call_del").get_result().content == "deleted a.txt"


def test_a_denied_mcp_call_never_reaches_the_server(fake_llm):
    configure(fake_llm, files={"server": files, "requires_approval": True})
    fake_llm.script(
        Reply(tool_calls=[Call("delete_file", {"path": "a.txt"}, call_id="call_del")]),
        Reply("Kept it."),
    )
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:files")
    list(chat.stream("delete a.txt"))
    assert chat.deny("call_del").content == "Kept it."
    assert deleted == []
    assert json.loads(tool_messages(chat)[0].content)["error"]["type"] == "denied"


def test_a_failing_mcp_tool_stores_an_error_result(fake_llm):
    configure(fake_llm, files={"server": files})
    fake_llm.script(
        Reply(tool_calls=[Call("broken", {"path": "a.txt"}, call_id="call_b")]),
        Reply("The disk is broken."),
    )
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:files")
    events = list(chat.stream("read a.txt"))
    (done,) = [e for e in events if isinstance(e, ToolResultDone)]
    assert done.error_type == "execution_error"
    result = ToolCall.objects.get(call_id="call_b").get_result()
    assert json.loads(result.content) == {
        "error": {
            "type": "execution_error",
            "message": "Error executing tool broken: cannot read a.txt: disk on fire",
        }
    }
    assert result.raw == {"error": json.loads(result.content)["error"]}
    assert chat.messages.filter(role="assistant").last().content == "The disk is broken."


def test_arguments_are_checked_against_the_servers_schema(fake_llm):
    configure(fake_llm, files={"server": files})
    fake_llm.script(Reply(tool_calls=[Call("read_file", {"path": 3})]), Reply("Sorry."))
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:files")
    chat.ask("read")
    error = json.loads(tool_messages(chat)[0].content)["error"]
    assert error["type"] == "validation_error"
    assert error["message"] == "invalid arguments for read_file: path: 3 is not of type 'string'"


def test_a_slow_mcp_tool_gets_the_tool_timeout(fake_llm):
    fake_llm.configure(*MODEL, MCP_SERVERS={"files": {"server": files}}, TOOL_TIMEOUT=0.3)
    fake_llm.script(Reply(tool_calls=[Call("slow", {"path": "a"})]), Reply("Too slow."))
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:files")
    started = time.monotonic()
    assert chat.ask("go").content == "Too slow."
    assert time.monotonic() - started < 3
    error = json.loads(tool_messages(chat)[0].content)["error"]
    assert error == {"type": "timeout_error", "message": "slow did not finish within 0.3 s"}


class FileAgent(Agent):
    model = MODEL[1]
    provider = MODEL[0]
    instructions = "You read files."
    tools = [llm_mcp.MCPTools("files", only=["read_file"], prefix="files_")]


def test_an_agent_takes_mcp_tools_with_a_prefix(fake_llm):
    configure(fake_llm, files={"server": files})
    fake_llm.script(
        Reply(tool_calls=[Call("files_read_file", {"path": "b.txt"}, call_id="c")]), Reply("ok")
    )
    chat = FileAgent.start_chat()
    Chat.objects.get(pk=chat.pk).ask("read b.txt")
    assert spec_names(fake_llm.requests[0]) == ["files_read_file"]
    call = ToolCall.objects.get(call_id="c")
    assert call.name == "files_read_file"
    assert call.get_result().content == "contents of b.txt"


def test_listings_are_cached_per_process(fake_llm, monkeypatch):
    configure(fake_llm, files={"server": files, "cache_ttl": 60})
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1])
    opened = []
    real = llm_mcp._Connection.client

    async def counting(self, stack, timeout):
        opened.append(self.server)
        return await real(self, stack, timeout)

    monkeypatch.setattr(llm_mcp._Connection, "client", counting)
    first = get_tools("mcp:files", chat=chat)
    second = get_tools("mcp:files/read_file", chat=chat)
    assert opened == ["files"]  # one listing serves both
    assert [t.name for t in second] == ["read_file"] and len(first) == 5
    with override_settings(LLMCHAT={"MCP_SERVERS": {"files": {"server": files, "cache_ttl": 0}}}):
        get_tools("mcp:files", chat=chat)
        get_tools("mcp:files", chat=chat)
    assert opened == ["files"] * 3


def test_unknown_and_unreachable_servers_give_no_tools(fake_llm, caplog):
    configure(fake_llm, down={"url": f"http://127.0.0.1:{free_port()}/mcp"})
    fake_llm.script(Reply("No tools today."), Reply("Still none."))
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:down")
    with caplog.at_level(logging.WARNING, logger="django_llmchat.mcp"):
        assert chat.ask("hi").content == "No tools today."
    assert "tools" not in fake_llm.requests[0].body
    assert "MCP server 'down' is unavailable (ConnectError): no tools from it" in caplog.text
    chat.with_tools("mcp:nowhere", replace=True)
    with caplog.at_level(logging.ERROR, logger="django_llmchat.mcp"):
        assert chat.ask("hi").content == "Still none."
    assert "no MCP server named 'nowhere': add it to LLMCHAT['MCP_SERVERS']" in caplog.text


# -- answers that break the rules ---------------------------------------------------------
def media_files(settings) -> list[str]:
    found = []
    for _root, _dirs, names in os.walk(settings.MEDIA_ROOT):
        found.extend(names)
    return sorted(found)


def test_an_image_that_is_not_base64_is_an_error_result_and_runs_once(fake_llm):
    configure(fake_llm, odd={"server": odd})
    fake_llm.script(
        Reply(tool_calls=[Call("bad_image", {}, call_id="call_i")]),
        Reply("The picture was broken."),
        Reply("Hello again."),
        Reply("Still here."),
    )
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:odd")
    events = list(chat.stream("show me the picture"))
    assert events[-1].status == "succeeded"
    (done,) = [e for e in events if isinstance(e, ToolResultDone)]
    assert done.error_type == "execution_error"
    error = json.loads(ToolCall.objects.get(call_id="call_i").get_result().content)["error"]
    assert error == {
        "type": "execution_error",
        "message": "MCP server 'odd' sent a malformed result for bad_image: "
        "ValueError: the image of block 1 is not valid base64",
    }
    assert "malformed result" in json.dumps(fake_llm.requests[1].body)
    # later prompts in the same chat go on, and never call the tool again
    assert Chat.objects.get(pk=chat.pk).ask("hi").content == "Hello again."
    assert Chat.objects.get(pk=chat.pk).ask("and now?").content == "Still here."
    assert odd_calls == ["bad_image"]


def test_a_huge_mcp_result_is_stored_and_sent_truncated(fake_llm):
    configure(fake_llm, odd={"server": odd})
    fake_llm.script(Reply(tool_calls=[Call("huge_log", {}, call_id="call_h")]), Reply("Long."))
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:odd")
    assert chat.ask("dump the log").content == "Long."
    result = ToolCall.objects.get(call_id="call_h").get_result()
    marker = "\n[truncated: 10,485,760 characters, 100,000 kept]"
    assert result.content == "x" * 100_000 + marker
    assert result.raw == {"truncated": {"characters": HUGE, "kept": 100_000}}
    assert len(fake_llm.requests[1].raw_body) < 110_000
    assert marker.strip() in json.dumps(fake_llm.requests[1].body)


def test_html_and_svg_from_an_mcp_server_pass_the_upload_rules(fake_llm, settings):
    configure(fake_llm, odd={"server": odd})
    fake_llm.script(Reply(tool_calls=[Call("web_page", {}, call_id="call_w")]), Reply("Ok."))
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:odd")
    chat.ask("fetch the page")
    result = ToolCall.objects.get(call_id="call_w").get_result()
    # as for a user's upload: the page is refused, the SVG is the text it holds
    assert [(a.filename, a.mime_type) for a in result.attachments.all()] == [
        ("image-3.txt", "text/plain"),
        ("report.txt", "text/plain"),
    ]
    assert media_files(settings) == ["image-3.txt", "report.txt"]  # no .html, no .svg
    assert "[file evil.html refused: type text/html is not allowed" in result.content
    assert [r["filename"] for r in result.raw["refused"]] == ["evil.html"]
    assert "file evil.html refused" in json.dumps(fake_llm.requests[1].body)


def junk_server():
    """A streamable HTTP server that lists a tool, then answers its calls with JSON no
    ``CallToolResult`` validates (an image whose data is a number)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def endpoint(request):
        if request.method != "POST":
            return Response(status_code=405)
        body = await request.json()
        method, rid = body.get("method"), body.get("id")
        if rid is None:  # a notification
            return Response(status_code=202)
        result: dict = {}
        if method == "initialize":
            result = {
                "protocolVersion": body["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "junk", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [{"name": "charge", "inputSchema": {"type": "object"}}]}
        elif method == "tools/call":
            odd_calls.append("charge")
            result = {"content": [{"type": "image", "data": 12}]}
        return JSONResponse({"jsonrpc": "2.0", "id": rid, "result": result})

    app = Starlette(routes=[Route("/mcp", endpoint, methods=["GET", "POST", "DELETE"])])
    return LoopbackMCP(app).start()


def test_junk_json_from_a_server_is_an_error_result_and_runs_once(fake_llm):
    junk = junk_server()
    try:
        configure(fake_llm, junk={"url": junk.url})
        fake_llm.script(
            Reply(tool_calls=[Call("charge", {}, call_id="call_j")]),
            Reply("The server is confused."),
            Reply("Hello again."),
        )
        chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:junk")
        assert chat.ask("charge the card").content == "The server is confused."
        error = json.loads(ToolCall.objects.get(call_id="call_j").get_result().content)["error"]
        assert error == {
            "type": "execution_error",
            "message": "MCP server 'junk' sent a malformed answer (ValidationError)",
        }
        assert Chat.objects.get(pk=chat.pk).ask("hi").content == "Hello again."
        assert odd_calls == ["charge"]
    finally:
        junk.stop()


# -- streamable HTTP on loopback ------------------------------------------------------------
seen_users: list = []


def per_user_headers(*, server, chat, user, context):
    seen_users.append((server, user.username if user else None))
    return {"Authorization": f"Bearer secret-of-{user.username}"}


def test_over_streamable_http_with_per_user_credentials(fake_llm, http_files):
    seen_users.clear()
    configure(
        fake_llm,
        files={"url": http_files.url, "headers": f"{__name__}.per_user_headers"},
    )
    users = get_user_model()
    for username in ("ada", "bob"):
        user = users.objects.create(username=username)
        fake_llm.script(
            Reply(tool_calls=[Call("whoami", {}, call_id=f"call_{username}")]),
            Reply(f"You are {username}."),
        )
        chat = Chat.objects.create(user=user, provider=MODEL[0], model_id=MODEL[1])
        reply = chat.with_tools("mcp:files").ask("who am I?")
        assert reply.content == f"You are {username}."
        result = ToolCall.objects.get(call_id=f"call_{username}").get_result()
        # the server saw this user's token...
        assert result.content == f"Bearer secret-of-{username}"
    # ...asked for per user, for each listing and each call
    assert seen_users == [("files", "ada")] * 2 + [("files", "bob")] * 2
    # the tokens reach the database only as what the tool itself returned (whoami's job);
    # nothing the library stores carries them
    stored = json.dumps(
        [list(Chat.objects.values()), list(ToolCall.objects.values())], default=str
    ) + json.dumps(list(Message.objects.exclude(role="tool").values("content", "raw")), default=str)
    assert "secret-of" not in stored
    assert all(c.tools == ["mcp:files"] for c in Chat.objects.all())


def test_an_approval_and_a_failing_tool_over_http(fake_llm, http_files):
    configure(fake_llm, files={"url": http_files.url, "requires_approval": ["delete_file"]})
    fake_llm.script(
        Reply(
            tool_calls=[
                Call("broken", {"path": "x"}, call_id="call_b"),
                Call("delete_file", {"path": "x"}, call_id="call_d"),
            ]
        ),
        Reply("Done what I could."),
    )
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:files")
    events = list(chat.stream("clean up x"))
    assert events[-2] == Interrupt(reason="approval_required")
    assert deleted == []
    assert chat.approve("call_d").content == "Done what I could."
    assert deleted == ["x"]
    broken_result = json.loads(ToolCall.objects.get(call_id="call_b").get_result().content)
    assert broken_result["error"] == {
        "type": "execution_error",
        "message": "Error executing tool broken: cannot read x: disk on fire",
    }
    assert ToolCall.objects.get(call_id="call_d").get_result().content == "deleted x"


def test_a_server_gone_after_its_listing_gives_a_clear_error_result(fake_llm):
    flaky = LoopbackMCP(files).start()
    configure(fake_llm, flaky={"url": flaky.url, "headers": {"Authorization": "Bearer s3cret"}})
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:flaky")
    assert len(get_tools("mcp:flaky", chat=chat)) == 5  # listed and cached
    flaky.stop()
    fake_llm.script(
        Reply(tool_calls=[Call("read_file", {"path": "a"}, call_id="call_f")]),
        Reply("The file server is down."),
    )
    assert chat.ask("read a").content == "The file server is down."
    content = ToolCall.objects.get(call_id="call_f").get_result().content
    assert json.loads(content)["error"] == {
        "type": "execution_error",
        "message": "MCP server 'flaky' is unavailable (ConnectError)",
    }
    assert "s3cret" not in content and str(flaky.port) not in content


def test_a_server_refusing_the_credentials_gives_a_clear_error_result(fake_llm):
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    async def unauthorized(request):
        return PlainTextResponse("bad token", status_code=401)

    app = Starlette(routes=[Route("/mcp", unauthorized, methods=["GET", "POST", "DELETE"])])
    guarded = LoopbackMCP(app).start()
    try:
        configure(fake_llm, guarded={"url": guarded.url, "headers": {"Authorization": "Bearer x"}})
        listed = llm_mcp.Listed("read_file", "", {"type": "object"})
        tool = llm_mcp.MCPTool("guarded", listed, name="read_file")
        assert tool.run({}).content["error"] == {
            "type": "execution_error",
            "message": "MCP server 'guarded' refused the request: "
            "Server returned an error response",
        }
        assert get_tools("mcp:guarded") == []
    finally:
        guarded.stop()


def test_a_failing_credentials_callable_is_an_error_without_its_message(fake_llm, http_files):
    def leaky(**kwargs):
        raise RuntimeError("token sk-123 expired")

    configure(fake_llm, files={"url": http_files.url})
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1])
    (tool,) = get_tools("mcp:files/read_file", chat=chat)
    with override_settings(
        LLMCHAT={"MCP_SERVERS": {"files": {"url": http_files.url, "headers": leaky}}}
    ):
        result = tool.run({"path": "a"})
        assert result.content["error"] == {
            "type": "execution_error",
            "message": "MCP server 'files': credentials failed (RuntimeError)",
        }
        assert get_tools("mcp:files", chat=chat) == []


# -- stdio --------------------------------------------------------------------------------
STDIO_SERVER = """
import os
from mcp.server.mcpserver import MCPServer

server = MCPServer("env", log_level="ERROR")

@server.tool()
def token() -> str:
    \"\"\"The token this process was started with.\"\"\"
    return os.environ.get("NOTES_TOKEN", "none")

server.run()
"""


def test_over_stdio_with_an_environment(fake_llm, tmp_path):
    script = tmp_path / "server.py"
    script.write_text(STDIO_SERVER)
    configure(
        fake_llm,
        notes={"command": [sys.executable, str(script)], "env": {"NOTES_TOKEN": "t0k"}},
    )
    fake_llm.script(Reply(tool_calls=[Call("token", {}, call_id="call_t")]), Reply("ok"))
    chat = Chat.objects.create(provider=MODEL[0], model_id=MODEL[1]).with_tools("mcp:notes")
    assert chat.ask("token?").content == "ok"
    assert ToolCall.objects.get(call_id="call_t").get_result().content == "t0k"


# -- the sync face, settings ----------------------------------------------------------------
def test_a_thread_running_an_event_loop_still_calls_tools(fake_llm):
    configure(fake_llm, files={"server": files})
    (tool,) = get_tools("mcp:files/read_file")

    async def inside_a_loop():
        return tool.run({"path": "x"}).content

    assert asyncio.run(inside_a_loop()) == "contents of x"
    assert tool(path="y") == "contents of y"


@pytest.mark.parametrize(
    "servers, message",
    [
        ([], "LLMCHAT['MCP_SERVERS'] must be a dict of server name -> options dict."),
        ({"a/b": {"url": "http://x"}}, "LLMCHAT['MCP_SERVERS']['a/b']: a server name is"),
        ({"f": {}}, "LLMCHAT['MCP_SERVERS']['f'] needs exactly one of 'url'"),
        ({"f": {"url": "ftp://x"}}, "LLMCHAT['MCP_SERVERS']['f']['url'] must be an http://"),
        ({"f": {"url": "http://x", "env": {}}}, "['env'] applies only with 'command'"),
        ({"f": {"command": "x", "headers": {}}}, "['headers'] applies only with 'url'"),
        ({"f": {"url": "http://x", "headers": "no.such.path"}}, "['headers'] cannot be imported"),
        ({"f": {"url": "http://x", "headers": {"A": 1}}}, "must map strings to strings"),
        ({"f": {"command": ["x"], "requires_approval": "yes"}}, "['requires_approval'] must be"),
        ({"f": {"command": ["x"], "timeout": -1}}, "['timeout'] must be a number >= 0"),
        ({"f": {"command": ["x"], "token": "x"}}, "unknown keys ['token']"),
    ],
)
def test_the_system_check_names_the_bad_entry(servers, message):
    with override_settings(LLMCHAT={"MCP_SERVERS": servers}):
        problems = [p for p in check_settings() if p.id == "llmchat.E040"]
    assert problems and message in problems[0].msg, [p.msg for p in problems]


def test_good_entries_pass_the_checks():
    servers = {
        "files": {"url": "https://mcp.example.com/mcp", "headers": per_user_headers},
        "local": {"command": ["uvx", "mcp-server-git"], "env": {"GIT_DIR": "/srv"}},
        "inproc": {"server": files, "requires_approval": True, "cache_ttl": 0},
    }
    with override_settings(LLMCHAT={"MCP_SERVERS": servers}):
        assert check_settings() == []
