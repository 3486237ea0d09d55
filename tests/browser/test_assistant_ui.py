"""docs/assistant-ui.md's page, built as pasted, in a real browser against a live server.

The recipe's ``jsx`` block (after ``<!-- pasted: assistant-ui -->``) is bundled with
esbuild from the packages of ``tests/js/assistant-ui/package-lock.json`` (``npm ci``,
skipped when node_modules matches the lock; the bundle is kept while the lock and the
block are unchanged). The server is ``manage.py runserver`` with
``tests.api.ui_server_settings`` (the demo model behind a loopback FakeProviderServer),
as for tests/test_js_clients.py. Chromium (``/usr/bin/chromium``, driven by Playwright)
opens the page on the server's origin; the page's own files are served by Playwright's
routing, every ``/api/`` request goes to the server with the test user's token.

Without node, npm or Chromium the test is skipped, except under ``CI=true``, where that
is a failure.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser.test_chat_page import CHROMIUM, CHROMIUM_FLAGS
from tests.conftest import unavailable
from tests.test_js_clients import Servers

# serves its own server on its own SQLite database, whatever DATABASE_URL says
pytestmark = pytest.mark.own_database

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "tests" / "js" / "assistant-ui"
DOC = ROOT / "docs" / "assistant-ui.md"
BLOCK = re.compile(r"^<!-- pasted: assistant-ui -->\n```jsx\n(?P<body>.*?)^```", re.S | re.M)
SECONDS = 30_000  # Playwright's waits, in milliseconds


def _npm(*args: str) -> None:
    done = subprocess.run(
        ["npm", *args, "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=APP,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _build(name: str, source: str) -> Path:
    """``source`` bundled into ``build/<name>.js`` (one ES module), kept while the lock
    file and the source are unchanged; ``npm ci`` first when node_modules does not match
    the lock file."""
    if not shutil.which("node") or not shutil.which("npm"):
        unavailable("node and npm are not installed")
    lock = (APP / "package-lock.json").read_bytes()
    installed = APP / "node_modules" / ".llmchat-lock"
    if not installed.exists() or installed.read_bytes() != lock:
        _npm("ci")
        installed.write_bytes(lock)
    key = hashlib.sha256(lock + source.encode()).hexdigest()
    build = APP / "build"
    out = build / f"{name}.js"
    stamp = build / f".{name}-key"
    if not (out.exists() and stamp.exists() and stamp.read_text() == key):
        build.mkdir(exist_ok=True)
        (build / f"{name}.jsx").write_text(source)
        done = subprocess.run(
            [
                str(APP / "node_modules" / ".bin" / "esbuild"),
                f"build/{name}.jsx",
                "--bundle",
                "--format=esm",
                "--jsx=automatic",
                '--define:process.env.NODE_ENV="production"',
                "--log-level=warning",
                f"--outfile=build/{name}.js",
            ],
            cwd=APP,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        stamp.write_text(key)
    return out


@pytest.fixture(scope="module")
def bundle() -> Path:
    """docs/assistant-ui.md's page, as pasted."""
    found = BLOCK.findall(DOC.read_text())
    assert len(found) == 1, "docs/assistant-ui.md: one block after <!-- pasted: assistant-ui -->"
    return _build("assistant-ui", found[0])


FENCE = re.compile(r"^```(?P<lang>javascript|jsx)\n(?P<body>.*?)^```", re.S | re.M)
USE_CHAT_BLOCKS = (
    "export function ChatLoader",
    "async function wholeStreams",
    "async function editMessage",
    "function MessageTools",
)
USE_CHAT_PAGE = """
import { createRoot } from "react-dom/client";

const query = new URLSearchParams(location.search);
createRoot(document.getElementById("app")).render(
  <ChatLoader chatId={query.get("chat")} token={query.get("token")} />,
);
"""


@pytest.fixture(scope="module")
def use_chat_bundle() -> Path:
    """docs/frontends.md's ``useChat`` page: ``ChatLoader`` and ``ChatPage``, their
    ``wholeStreams``, the branch recipes and ``MessageTools``, as pasted, mounted."""
    blocks = [m["body"] for m in FENCE.finditer((ROOT / "docs" / "frontends.md").read_text())]
    parts = []
    for marker in USE_CHAT_BLOCKS:
        found = [block for block in blocks if marker in block]
        assert len(found) == 1, f"docs/frontends.md has one block with {marker}"
        parts.append(found[0])
    return _build("use-chat", "\n".join(parts) + USE_CHAT_PAGE)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``manage.py runserver`` with the UI test settings: ``(url, token, env, work)``."""
    started = Servers(tmp_path_factory)
    try:
        yield started("runserver")
    finally:
        started.close()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        unavailable(f"{CHROMIUM} is not installed")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>chat</title>
<script>
// signed in with a token: each of the page's requests to the API carries it
const pageFetch = window.fetch;
window.fetch = (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set("Authorization", "Bearer %(token)s");
  return pageFetch(url, { ...init, headers });
};
</script></head><body><div id="app"></div>
<script type="module" src="/app/app.js"></script></body></html>"""


class Api:
    """The REST API as the test user, to check what the page did."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url, token

    def __call__(self, path: str, body: dict | None = None):
        request = urllib.request.Request(
            f"{self.url}/api/{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=20) as response:
            return json.loads(response.read())

    def chats(self) -> list[dict]:
        return self("chats/")["results"]

    def transcript(self, chat_id) -> list[dict]:
        return self(f"chats/{chat_id}/messages/")["results"]


def ids(rows: list[dict]) -> list[int]:
    return [row["id"] for row in rows]


def _provider_requests(work: Path) -> list[dict]:
    log = work / "provider-requests.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line]


def _conversation(request: dict) -> list[str]:
    return [m["role"] for m in request["body"]["messages"] if m["role"] != "system"]


def test_the_assistant_ui_recipe_keeps_the_servers_chats_and_branches(bundle, server, browser):
    url, token, _env, work = server
    api = Api(url, token)
    context = browser.new_context()
    context.route(
        f"{url}/app/",
        lambda route: route.fulfill(content_type="text/html", body=PAGE % {"token": token}),
    )
    context.route(
        f"{url}/app/app.js",
        lambda route: route.fulfill(content_type="text/javascript", body=bundle.read_bytes()),
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_default_timeout(SECONDS)

    user = page.locator(".message.user")
    reply = page.locator(".message.assistant")
    composer = page.get_by_label("Message", exact=True)

    def settled(rows: int, old: set[int] = frozenset()) -> list[dict]:
        """The chat's transcript once it has ``rows`` messages, the last a reply not in
        ``old``, and the page shows that reply whole (the stream has ended)."""
        deadline = time.monotonic() + SECONDS / 1000
        while True:
            stored = api.transcript(chat_id)
            last = stored[-1] if stored else {}
            if len(stored) == rows and last["role"] == "assistant" and last["id"] not in old:
                break
            assert time.monotonic() < deadline, f"no reply stored: {stored}"
            time.sleep(0.1)
        page.wait_for_function(
            "text => [...document.querySelectorAll('.message.assistant')].at(-1)"
            "?.innerText.includes(text)",
            arg=stored[-1]["content"].strip()[-40:],
        )
        page.wait_for_selector(".thread:not([aria-busy=true])")
        return stored

    def send(text: str, rows: int) -> list[dict]:
        composer.fill(text)
        page.get_by_role("button", name="Send").click()
        return settled(rows)

    # the thread list is chats/: a new chat is made there, and the URL names it
    page.goto(f"{url}/app/")
    page.get_by_role("button", name="New chat").click()
    page.wait_for_url(re.compile(r"#chat=\d+$"))
    chat_id = int(page.url.rsplit("=", 1)[1])
    assert [c["id"] for c in api.chats()] == [chat_id]
    page.get_by_role("navigation", name="Chats").get_by_role("link", name="New chat").wait_for()

    first = send("Tell me about apples", 2)
    assert [m["role"] for m in first] == ["user", "assistant"]

    # regenerate keeps the old reply as a sibling: 2/2 at once, and on the server
    reply.first.get_by_role("button", name="Regenerate").click()
    page.wait_for_function(
        "() => document.querySelector('.message.assistant .branch-picker span')"
        "?.innerText.replace(/\\s/g, '') === '2/2'"
    )
    second = settled(2, {first[1]["id"]})
    assert second[0]["id"] == first[0]["id"] and second[1]["id"] != first[1]["id"]

    # a reload: the same chat (none made), its history, the server's branches
    page.reload()
    reply.first.wait_for()
    assert page.url.endswith(f"#chat={chat_id}")
    assert [c["id"] for c in api.chats()] == [chat_id], "a reload made no chat"
    assert user.first.inner_text().startswith("Tell me about apples")
    page.wait_for_function(
        "() => document.querySelector('.message.assistant .branch-picker span')"
        "?.innerText.replace(/\\s/g, '') === '2/2'"
    )
    assert user.first.locator(".branch-picker").count() == 0, "one prompt, no alternatives"

    # the BranchPicker switches on the server, then shows its path
    reply.first.get_by_role("button", name="Previous").click()
    deadline = time.monotonic() + SECONDS / 1000
    while ids(api.transcript(chat_id)) != ids(first):
        assert time.monotonic() < deadline, "the server did not switch"
        time.sleep(0.1)
    page.wait_for_function(
        "() => document.querySelector('.message.assistant .branch-picker span')"
        "?.innerText.replace(/\\s/g, '') === '1/2'"
        " && !document.querySelector('.thread[aria-busy=true]')"
    )
    assert reply.first.inner_text().startswith(first[1]["content"][:20])

    # sending on the switched branch continues it: the provider sees that path alone
    before = len(_provider_requests(work))
    send("And one more thing", 4)
    sent = _provider_requests(work)[before:]
    assert len(sent) == 1
    assert _conversation(sent[0]) == ["user", "assistant", "user"]
    assert sent[0]["body"]["messages"][-2]["content"] == first[1]["content"]
    rows = api.transcript(chat_id)
    assert [m["id"] for m in rows[:2]] == [m["id"] for m in first]
    assert [m["role"] for m in rows] == ["user", "assistant", "user", "assistant"]

    # edit the first prompt: the old one stays a sibling, shown 2/2 without a reload
    user.first.get_by_role("button", name="Edit").click()
    editor = page.get_by_label("Edit message")
    editor.fill("Tell me about plums")
    page.get_by_role("button", name="Update").click()
    page.wait_for_function(
        "() => document.querySelectorAll('.message.assistant').length === 1"
        " && /plums/.test(document.querySelector('.message.user').innerText)"
    )
    edited = settled(2)
    assert edited[0]["content"] == "Tell me about plums"
    page.wait_for_function(
        "() => document.querySelector('.message.user .branch-picker span')"
        "?.innerText.replace(/\\s/g, '') === '2/2'"
    )

    def switched(away_from: list[dict], number: str) -> list[dict]:
        """The server's path once a switch moved it from ``away_from``, as the page shows
        it after the switch (its first prompt's BranchPicker at ``number``)."""
        deadline = time.monotonic() + SECONDS / 1000
        while ids(path := api.transcript(chat_id)) == ids(away_from):
            assert time.monotonic() < deadline, "the server did not switch"
            time.sleep(0.1)
        page.wait_for_function(
            "([prompt, replies, number]) => document.querySelector('.message.user')"
            "?.innerText.includes(prompt)"
            " && document.querySelectorAll('.message.assistant').length === replies"
            " && document.querySelector('.message.user .branch-picker span')"
            "?.innerText.replace(/\\s/g, '') === number"
            " && !document.querySelector('.thread[aria-busy=true]')",
            arg=[path[0]["content"], sum(m["role"] == "assistant" for m in path), number],
        )
        return path

    # back to the first prompt without a reload (the reply's promptBranch named it): the
    # server's path through it, down to its newest leaf
    user.first.get_by_role("button", name="Previous").click()
    path = switched(edited, "1/2")
    assert path[0]["id"] == first[0]["id"]
    assert path[1]["id"] in {first[1]["id"], second[1]["id"]}
    assert reply.first.locator(".branch-picker span").inner_text().replace(" ", "") == (
        "1/2" if path[1]["id"] == first[1]["id"] else "2/2"
    )

    # after a reload the prompt still has its alternative; forward to the edited one
    page.reload()
    switched(edited, "1/2")
    user.first.get_by_role("button", name="Next").click()
    assert ids(switched(path, "2/2")) == ids(edited)
    assert [c["id"] for c in api.chats()] == [chat_id]

    # a second thread, made from the list; each thread opened from the list shows its own
    # history, and the URL names the one shown
    threads = page.get_by_role("navigation", name="Chats")
    first_id = chat_id
    page.get_by_role("button", name="New chat").click()
    page.wait_for_url(re.compile(rf"#chat=(?!{first_id}$)\d+$"))
    chat_id = int(page.url.rsplit("=", 1)[1])
    assert sorted(c["id"] for c in api.chats()) == sorted([first_id, chat_id])
    threads.locator(f'a[href="#chat={first_id}"]').wait_for()
    assert user.count() == 0, "a new thread starts empty"
    pears = send("Tell me about pears", 2)
    assert pears[0]["content"] == "Tell me about pears"
    assert ids(api.transcript(first_id)) == ids(edited), "the first thread is untouched"

    def opened(thread: int, rows: list[dict]) -> None:
        """Thread ``thread`` opened from the list: the page shows its path, whole."""
        threads.locator(f'a[href="#chat={thread}"]').click()
        page.wait_for_url(re.compile(rf"#chat={thread}$"))
        page.wait_for_function(
            "texts => { const shown = [...document.querySelectorAll('.message')];"
            " return shown.length === texts.length"
            " && texts.every((t, i) => shown[i].innerText.includes(t.slice(-40))); }",
            arg=[m["content"].strip() for m in rows],
        )
        assert threads.locator("a[aria-current=true]").get_attribute("href") == f"#chat={thread}"

    opened(first_id, edited)
    assert "pears" not in page.locator(".thread").inner_text()
    opened(chat_id, pears)
    assert "plums" not in page.locator(".thread").inner_text()
    page.reload()  # the thread opened from the list is the one a reload shows
    reply.first.wait_for()
    assert user.first.inner_text().startswith("Tell me about pears")
    assert sorted(c["id"] for c in api.chats()) == sorted([first_id, chat_id])
    assert errors == []
    context.close()


USE_CHAT_HTML = """<!doctype html><html><head><meta charset="utf-8"><title>chat</title></head>
<body><div id="app"></div><script type="module" src="/app/use-chat.js"></script></body></html>"""


# the first message of a role shows this "index/count" of its alternatives
BRANCH = "([role, shown]) => document.querySelector(`${role} .branch`)?.innerText === shown"


def _until(condition, what: str):
    deadline = time.monotonic() + SECONDS / 1000
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def test_the_use_chat_recipes_run_as_pasted(use_chat_bundle, server, browser):
    """docs/frontends.md's ``ChatLoader``/``ChatPage`` with ``MessageTools``: regenerate
    and edit show "2/2" at once (the edited prompt's from its reply's ``promptBranch``),
    feedback and switching go to the server."""
    url, token, _env, _work = server
    api = Api(url, token)
    chat_id = api("chats/", {"title": "useChat"})["id"]
    context = browser.new_context()
    context.route(
        f"{url}/app/use-chat/*",
        lambda route: route.fulfill(content_type="text/html", body=USE_CHAT_HTML),
    )
    context.route(
        f"{url}/app/use-chat.js",
        lambda route: route.fulfill(
            content_type="text/javascript", body=use_chat_bundle.read_bytes()
        ),
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.set_default_timeout(SECONDS)
    page.goto(f"{url}/app/use-chat/?chat={chat_id}&token={token}")
    user = page.locator(".message.user")
    reply = page.locator(".message.assistant")

    def shows(path: list[dict]) -> None:  # the page shows the server's path, whole
        page.wait_for_function(
            "texts => { const shown = [...document.querySelectorAll('.message')];"
            " return shown.length === texts.length"
            " && texts.every((t, i) => shown[i].innerText.includes(t)); }",
            arg=[m["content"].strip().splitlines()[-1] for m in path],
        )

    page.locator("input[name=q]").fill("Tell me about apples")
    page.locator("input[name=q]").press("Enter")
    first = _until(lambda: (rows := api.transcript(chat_id)) and len(rows) == 2 and rows, "a reply")
    shows(first)
    assert reply.first.locator(".branch").count() == 0

    # regenerate: the old reply is the new one's alternative, "2/2" with no reload
    page.get_by_role("button", name="Regenerate").click()
    second = _until(
        lambda: (
            len(rows := api.transcript(chat_id)) == 2 and rows[-1]["id"] != first[1]["id"] and rows
        ),
        "the regenerated reply",
    )
    shows(second)
    page.wait_for_function(BRANCH, arg=[".assistant", "2/2"])

    # feedback on the shown reply
    reply.first.get_by_role("button", name="👍").click()
    _until(lambda: api(f"ui/chat/{chat_id}/messages")[1]["metadata"].get("feedback"), "feedback")

    # the previous alternative: the server switches, the page shows its path
    reply.first.get_by_role("button", name="‹").click()
    _until(lambda: ids(api.transcript(chat_id)) == ids(first), "the switch")
    page.wait_for_function(BRANCH, arg=[".assistant", "1/2"])

    # edit the question: its alternative shows at once, from the reply's promptBranch
    page.once("dialog", lambda dialog: dialog.accept("Tell me about plums"))
    user.first.get_by_role("button", name="Edit").click()
    edited = _until(
        lambda: (
            (rows := api.transcript(chat_id))[0]["content"] == "Tell me about plums"
            and len(rows) == 2
            and rows
        ),
        "the edited question's reply",
    )
    shows(edited)
    page.wait_for_function(BRANCH, arg=[".user", "2/2"])
    user.first.get_by_role("button", name="‹").click()
    _until(lambda: api.transcript(chat_id)[0]["id"] == first[0]["id"], "the switch back")
    page.wait_for_function(BRANCH, arg=[".user", "1/2"])
    assert "apples" in user.first.inner_text()
    assert errors == []
    context.close()
