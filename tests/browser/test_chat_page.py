"""The example project's chat page in a real browser (Chromium driven by Playwright).

The example project runs as ``manage.py runserver`` in a subprocess, on a free port, with a
SQLite file and the offline demo model, as ``make run`` serves it. Its ``ollama`` provider
points at a scripted fake provider of this process, for replies that must go wrong.
Screenshots go to
``artifacts/screenshots/``. Without ``/usr/bin/chromium`` the tests are skipped, except
under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from django_llmchat.testing import FakeProviderServer, Fault, Reply
from tests.conftest import IN_CI, unavailable

# serves its own server on its own SQLite database, whatever DATABASE_URL says
pytestmark = pytest.mark.own_database

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def fake_llm():
    """A fake provider the example project's ``ollama`` chats talk to (scripted per test)."""
    with FakeProviderServer() as server:
        yield server


@pytest.fixture(scope="module")
def example_server(tmp_path_factory, fake_llm):
    """``manage.py runserver`` of the example project on the demo model; yields its URL."""
    workdir = tmp_path_factory.mktemp("example")
    env = {
        key: value
        for key, value in os.environ.items()
        if key
        not in (
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "GEMINI_API_KEY",
            "GOOGLE_API_KEY",
            "CELERY_BROKER_URL",
            "LLMCHAT_EVENTS_URL",
            "LLMCHAT_MODEL",
            "OLLAMA_HOST",
            "OLLAMA_API_KEY",
        )
    }
    env.update(
        DJANGO_SETTINGS_MODULE="example_project.settings",
        DJANGO_DEBUG="1",  # as make run serves it: runserver serves the static files
        DATABASE_URL=f"sqlite:///{workdir / 'example.sqlite3'}",
        LLMCHAT_PROVIDER="demo",
        PYTHONUNBUFFERED="1",
        DJANGO_SUPERUSER_USERNAME="admin",
        DJANGO_SUPERUSER_PASSWORD="admin",
        DJANGO_SUPERUSER_EMAIL="admin@example.com",
        OLLAMA_BASE_URL=fake_llm.base_url("ollama"),
        # the module's tests start more runs a minute, as one user, than the page's 30
        EXAMPLE_RUNS_RATE="1000/min",
    )
    if os.environ.get("REDIS_URL"):
        # live events through Redis, in a database of their own (13)
        base = os.environ["REDIS_URL"].rsplit("/", 1)[0]
        env["LLMCHAT_EVENTS_URL"] = f"{base}/13"
    manage = [sys.executable, str(ROOT / "manage.py")]
    for command in (
        ["migrate", "--noinput"],
        ["createsuperuser", "--noinput"],
        ["llmchat_sync_models"],  # the demo model's prices, as make run has them
        ["llmchat_demo_data", "--per-day", "12"],  # a month for the usage dashboard
    ):
        subprocess.run(manage + command, cwd=ROOT, env=env, check=True, capture_output=True)
    port = _free_port()
    log = open(workdir / "runserver.log", "w")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(
        manage + ["runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/login/", timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    output = (workdir / "runserver.log").read_text()
                    pytest.fail(f"the example project did not start:\n{output}")
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        unavailable(f"{CHROMIUM} is missing (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, example_server):
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=example_server)
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def log_in(page) -> None:
    page.goto("/")
    assert "/login/" in page.url  # the chat page needs a user
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("admin")
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/")


def start_chat(page) -> None:
    page.get_by_role("button", name="Start chat").click()
    page.wait_for_url("**/?chat=*")
    page.wait_for_selector("text=No messages yet")


def send(page, text: str) -> None:
    page.get_by_label("Message").fill(text)
    page.keyboard.press("Enter")


def wait_idle(page) -> None:
    page.wait_for_selector("#transcript[aria-busy=false]")


def wait_shown(page, text: str) -> None:
    """Wait until the transcript shows ``text``; when it does not, fail with what the page
    shows instead (its transcript, notices and status line), not a bare timeout."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    try:
        page.locator("#transcript").get_by_text(text).wait_for()
    except PlaywrightTimeoutError:
        shown = page.locator("#transcript").inner_text(timeout=5_000)
        status = page.locator("#status").inner_text(timeout=5_000)
        raise AssertionError(
            f"{text!r} was not shown; the transcript:\n{shown}\nthe status: {status!r}"
        ) from None


def start_fake_chat(page) -> str:
    """A chat on the fake provider (``ollama``), opened in the page; returns its id."""
    chat = page.evaluate(
        "async () => {"
        "  const csrf = document.cookie.match(/csrftoken=([^;]+)/)?.[1] ?? '';"
        "  const r = await fetch('/api/chats/', {method: 'POST',"
        "    headers: {'Content-Type': 'application/json', 'X-CSRFToken': csrf},"
        "    body: JSON.stringify({provider: 'ollama', model_id: 'fake-model'})});"
        "  return r.json();"
        "}"
    )
    page.goto(f"/?chat={chat['id']}")
    page.wait_for_selector("text=No messages yet")
    return str(chat["id"])


def api_get(page, path: str):
    return page.evaluate("async (path) => (await fetch(path)).json()", path)


def after_prompt(page, text: str) -> list[dict]:
    """The transcript items after the user message ``text``, up to the next user message."""
    return page.evaluate(
        "(text) => {"
        "  const users = [...document.querySelectorAll('#transcript li.msg.user')];"
        "  const prompt = users.find((li) => li.querySelector('.body').textContent === text);"
        "  const out = [];"
        "  for (let li = prompt.nextElementSibling; li; li = li.nextElementSibling) {"
        "    if (li.matches('.msg.user')) break;"
        "    out.push({cls: li.className, text: li.textContent});"
        "  }"
        "  return out;"
        "}",
        text,
    )


def assistant_text(page) -> str:
    return page.eval_on_selector_all(
        "#transcript li.msg.assistant .body", "els => els.map(e => e.textContent).join('')"
    )


def test_chat_page_streams_replies_with_tools_and_approvals(page):
    log_in(page)
    banner = page.locator("#demo-banner")
    assert banner.is_visible()
    assert "Demo mode" in banner.inner_text()
    assert page.locator("#provider").input_value() == "demo"
    assert page.locator("#model").input_value() == "demo-model"
    start_chat(page)

    # the reply streams in: its text is seen growing before the run ends (recorded in the
    # page at each change, as plain text; it is rendered as markdown once its step ends)
    page.evaluate(
        "() => { window.__lengths = [];"
        "  new MutationObserver(() => {"
        "    const body = document.querySelector('#transcript li.msg.streaming .body');"
        "    if (body) window.__lengths.push(body.textContent.length);"
        "  }).observe(document.querySelector('#transcript'),"
        "    {subtree: true, childList: true, characterData: true}); }"
    )
    send(page, "Hello there, tell me about streaming please")
    seen: list[int] = []
    shot_taken = False
    deadline = time.monotonic() + 20
    while page.get_attribute("#transcript", "aria-busy") == "true":
        assert time.monotonic() < deadline, "the reply did not finish"
        length = len(assistant_text(page))
        seen.append(length)
        if length > 40 and not shot_taken:
            page.screenshot(path=str(SHOTS / "chat-streaming.png"))
            shot_taken = True
        time.sleep(0.05)
    final = assistant_text(page)
    assert "offline demo model" in final
    lengths = page.evaluate("window.__lengths")
    partial = sorted({n for n in lengths if n > 0})
    assert len(partial) >= 3, f"the text did not appear progressively: {lengths}"

    reply = page.locator("#transcript li.msg.assistant").last
    thinking = reply.locator("details.thinking")
    assert thinking.count() == 1
    assert thinking.get_attribute("open") is None  # collapsed
    assert "The user wrote" in thinking.locator("p").text_content()
    assert "tokens" in reply.locator(".usage").inner_text()
    # the demo model is priced: USD per message and per chat, never "cost unknown"
    assert re.search(r"\$0\.0\d+", reply.locator(".usage").inner_text())
    page.wait_for_function("document.querySelector('#chat-totals').innerText.includes('$')")
    assert "cost unknown" not in page.locator("#transcript").inner_text()

    # a tool call and its result, then the answer built from it
    send(page, "What's the weather in Oslo?")
    wait_idle(page)
    call = page.locator(".tool-call", has_text="demo_weather")
    assert '{"city":"Oslo"}' in call.locator(".args").inner_text()
    assert "temperature_c" in call.locator(".result").inner_text()
    page.wait_for_selector("text=in Oslo right now (made-up demo data)")

    # a tool that waits for approval
    send(page, "Book a table at Luigi for 4")
    wait_idle(page)
    page.get_by_role("button", name="Approve demo_book_table").wait_for()
    page.screenshot(path=str(SHOTS / "chat-approval.png"))
    page.get_by_role("button", name="Approve demo_book_table").click()
    wait_idle(page)
    page.wait_for_selector("text=Done. Booked a table for 4 at Luigi")
    assert page.locator(".decide").count() == 0

    totals = page.locator("#chat-totals").inner_text()
    assert totals.startswith("Chat total:") and "tokens" in totals
    assert (
        page.locator("#chat-list a[aria-current=page]")
        .inner_text()
        .startswith("Hello there, tell me about streaming")
    )
    page.screenshot(path=str(SHOTS / "chat-page.png"), full_page=True)

    # the same chat in the admin
    page.get_by_role("link", name="open in the admin").click()
    page.wait_for_url("**/admin/django_llmchat/chat/*/change/")
    assert "demo mode" in page.locator("#site-name").inner_text()
    body = page.locator("body").inner_text()
    assert "demo_weather" in body and "demo_book_table" in body
    assert "Done. Booked a table for 4 at Luigi" in body
    assert re.search(r"\$0\.0\d+", page.locator("#transcript .llmchat-totals").inner_text())
    assert page.locator("#transcript strong", has_text="offline demo model").count() >= 1
    page.screenshot(path=str(SHOTS / "admin-chat.png"), full_page=True)


def test_a_chat_started_while_the_page_loads_stays_open(page):
    """The page opens the latest chat once its list arrives; a chat the user started in the
    meantime must stay the one shown, whichever answer comes back first."""
    log_in(page)
    start_chat(page)
    earlier = page.url.rsplit("chat=", 1)[1]
    held: dict[str, tuple] = {}

    def hold_list(route):  # answered now (the earlier chat on top), delivered later
        if "list" in held:
            route.continue_()
        else:
            held["list"] = (route, route.fetch())

    def hold_new_chat(route):
        if "start" in held and "chat" not in held:
            held["chat"] = (route, None)
        else:
            route.continue_()

    def wait_for(key):
        deadline = time.monotonic() + 10
        while key not in held:
            assert time.monotonic() < deadline, f"no {key} request"
            page.wait_for_timeout(20)

    page.route("**/api/chats/?page_size=100", hold_list)
    page.route("**/api/chats/*/", hold_new_chat)
    page.goto("/")
    wait_for("list")
    held["start"] = (None, None)
    page.get_by_role("button", name="Start chat").click()
    wait_for("chat")  # the new chat is being opened...
    route, response = held["list"]
    route.fulfill(response=response)  # ...when the list with the earlier one on top arrives
    page.wait_for_timeout(500)
    held["chat"][0].continue_()
    page.wait_for_url("**/?chat=*")
    started = page.url.rsplit("chat=", 1)[1]
    assert started != earlier
    page.wait_for_load_state("networkidle")
    assert page.locator("#chat-title").inner_text() == f"Chat {started}"
    assert page.url.endswith(f"?chat={started}")


def test_deny_and_stop(page):
    log_in(page)
    start_chat(page)

    send(page, "Please book a table at Chez Nous")
    wait_idle(page)
    page.get_by_role("button", name="Deny demo_book_table").click()
    wait_idle(page)
    page.wait_for_selector("text=You declined that, so I did nothing.")
    assert page.locator(".decide").count() == 0

    # Stop cancels the running reply; the text streamed so far stays, as the reply
    prompt = "Write me a long answer about nothing in particular"
    send(page, prompt)
    page.wait_for_function(
        "document.querySelector('#transcript li.msg.streaming .body')?.textContent.length > 10"
    )
    page.get_by_role("button", name="Stop").click()
    wait_idle(page)
    page.wait_for_selector("text=Stopped")
    assert page.get_by_role("button", name="Send").is_enabled()
    stopped = {"cls": "notice run cancelled", "text": "Stopped"}
    reply, notice = after_prompt(page, prompt)
    assert "assistant" in reply["cls"] and len(reply["text"]) > 10 and notice == stopped

    # after a reload the stopped run still says so, after the text it had streamed
    page.reload()
    page.wait_for_selector("#transcript li.notice.run.cancelled")
    assert after_prompt(page, prompt) == [reply, stopped]
    assert page.locator("#transcript li.notice.run").count() == 1  # the denied run went well
    # the stopped reply was paid for: its tokens and cost, estimated, never "cost unknown"
    usage = page.locator("#transcript li.msg.assistant").last.locator(".usage").inner_text()
    assert re.search(r"≈ \$0\.\d+ \(estimated\)", usage) and "cost unknown" not in usage
    page.wait_for_function("document.querySelector('#chat-totals').innerText.includes('≈')")


def test_a_failed_reply_is_shown_where_it_happened(page, fake_llm):
    log_in(page)
    chat_id = start_fake_chat(page)

    # the failure is said as soon as the stream ends, before the transcript is reloaded
    held = []

    def runs_url(url: str) -> bool:
        return f"/api/chats/{chat_id}/runs/" in url

    page.route(runs_url, lambda route: held.append(route))
    fake_llm.script(Fault(status=401))
    send(page, "This reply will fail")
    live = page.locator("#transcript li.notice.run.failed")
    live.wait_for()
    assert page.get_attribute("#transcript", "aria-busy") == "true"
    assert live.get_attribute("role") == "alert"
    assert live.inner_text().startswith("Reply failed: ")
    for route in held:
        route.continue_()
    page.unroute(runs_url)
    wait_idle(page)

    [run] = api_get(page, f"/api/chats/{chat_id}/runs/")["results"]
    assert run["status"] == "failed" and run["error"]
    failed = {"cls": "notice run failed error", "text": f"Reply failed: {run['error']}"}
    assert after_prompt(page, "This reply will fail") == [failed]
    assert page.locator("#transcript li.msg.assistant").count() == 0

    # the next prompt is answered; the failure stays after the first one
    fake_llm.script("All good now.")
    send(page, "Try again")
    wait_idle(page)
    page.wait_for_selector("text=All good now.")
    page.reload()
    page.wait_for_selector("#transcript li.msg.assistant")
    assert after_prompt(page, "This reply will fail") == [failed]
    assert [i["cls"] for i in after_prompt(page, "Try again")] == ["msg assistant"]
    page.screenshot(path=str(SHOTS / "chat-failed-reply.png"))

    # an error text is shown as text, never as markup
    def with_markup(route):
        body = route.fetch().json()
        body["results"][-1]["error"] = '<img src=x onerror="window.__hit=1"> <b>bold</b>'
        route.fulfill(json=body)

    page.route(runs_url, with_markup)
    page.reload()
    notice = page.locator("#transcript li.notice.run.failed")
    notice.wait_for()
    assert notice.inner_text() == 'Reply failed: <img src=x onerror="window.__hit=1"> <b>bold</b>'
    assert notice.locator("img, b").count() == 0
    assert page.evaluate("window.__hit") is None


def test_a_running_and_a_queued_reply_show_after_a_reload(page, fake_llm):
    log_in(page)
    chat_id = start_fake_chat(page)
    seen = len(fake_llm.requests)
    fake_llm.script(Fault(first_byte_delay=4, reply=Reply("First answer.")), "Second answer.")
    statuses = page.evaluate(
        "async (chatId) => {"
        "  const csrf = document.cookie.match(/csrftoken=([^;]+)/)?.[1] ?? '';"
        "  const out = [];"
        "  for (const content of ['First question', 'Second question']) {"
        "    const r = await fetch(`/api/chats/${chatId}/messages/`, {method: 'POST',"
        "      headers: {'Content-Type': 'application/json', 'X-CSRFToken': csrf},"
        "      body: JSON.stringify({content})});"
        "    out.push(r.status);"
        "  }"
        "  return out;"
        "}",
        chat_id,
    )
    assert statuses == [202, 202]  # the second one waits its turn
    fake_llm.wait_for_requests(seen + 1)  # the first is being answered

    page.reload()
    page.wait_for_selector("#transcript li.notice.run.queued")
    answering = {"cls": "notice run running", "text": "Answering…"}
    assert after_prompt(page, "First question") == [answering]
    [queued] = after_prompt(page, "Second question")
    assert queued["cls"] == "notice run queued" and queued["text"].startswith("Queued")
    page.wait_for_function("document.querySelector('#status').innerText.includes('elsewhere')")

    deadline = time.monotonic() + 20
    while api_get(page, f"/api/chats/{chat_id}/")["status"] != "idle":
        assert time.monotonic() < deadline, "the queued runs did not finish"
        time.sleep(0.1)
    page.reload()
    page.wait_for_selector("text=Second answer.")
    assert page.locator("#transcript li.notice.run").count() == 0
    [first] = after_prompt(page, "First question")
    assert first["cls"] == "msg assistant" and "First answer." in first["text"]


def _docs_javascript(page_name: str) -> list[str]:
    import re

    text = (ROOT / "docs" / page_name).read_text()
    return re.findall(r"^```javascript\n(.*?)^```", text, re.S | re.M)


def test_the_rest_docs_javascript_streams_a_reply(page):
    """The ``ask()`` function of docs/rest.md, run as written in the logged-in page."""
    ask_function = _docs_javascript("rest.md")[0]
    assert ask_function.startswith("async function ask(")
    log_in(page)
    start_chat(page)
    chat_id = page.url.rsplit("chat=", 1)[1]
    result = page.evaluate(
        "async ([source, chatId]) => {"
        "  const ask = new Function(source + '; return ask;')();"
        "  const pieces = [];"
        "  const status = await ask(chatId, 'Tell me about streams', (t) => pieces.push(t));"
        "  return {status, pieces};"
        "}",
        [ask_function, chat_id],
    )
    assert result["status"] == "succeeded"
    assert len(result["pieces"]) > 2  # the reply arrived in pieces
    assert "".join(result["pieces"]).strip()


def test_the_rest_docs_eventsource_follows_a_queued_run(page):
    """The ``EventSource`` example of docs/rest.md, run as written (it needs Redis)."""
    if not os.environ.get("REDIS_URL"):
        if IN_CI:
            pytest.fail("REDIS_URL is not set but CI=true requires it")
        pytest.skip("REDIS_URL not set: the events endpoint needs Redis")
    follow = _docs_javascript("rest.md")[1]
    assert "new EventSource(run.events_url)" in follow
    log_in(page)
    start_chat(page)
    chat_id = page.url.rsplit("chat=", 1)[1]
    page.evaluate(
        "async ([source, chatId]) => {"
        "  const csrfToken = document.cookie.match(/csrftoken=([^;]+)/)?.[1] ?? '';"
        "  window.__docs = {text: '', done: false};"
        "  const render = (text) => { window.__docs.text = text; };"
        "  const showError = (message) => { window.__docs.error = message; };"
        "  const run = new Function('chatId', 'csrfToken', 'render', 'showError',"
        "    'return (async () => {' + source +"
        '    \'; source.addEventListener("run_finished", () => { window.__docs.done = true; });'
        "    })();');"
        "  await run(chatId, csrfToken, render, showError);"
        "}",
        [follow, chat_id],
    )
    page.wait_for_function("window.__docs.done", timeout=20_000)
    docs = page.evaluate("window.__docs")
    assert not docs.get("error")
    assert docs["text"].strip()


def test_the_events_docs_javascript_receives_text(page):
    """The ``EventSource`` snippet of docs/events.md, following a chat, then a message."""
    if not os.environ.get("REDIS_URL"):
        if IN_CI:
            pytest.fail("REDIS_URL is not set but CI=true requires it")
        pytest.skip("REDIS_URL not set: the events endpoint needs Redis")
    [snippet] = _docs_javascript("events.md")
    assert 'source.addEventListener("text_delta"' in snippet
    log_in(page)
    start_chat(page)
    chat_id = page.url.rsplit("chat=", 1)[1]
    page.evaluate(
        "([source, chatId]) => {"
        "  window.__output = document.createElement('pre');"
        "  window.__source = new Function('chatId', 'output', source + '; return source;')("
        "    chatId, window.__output);"
        "}",
        [snippet, chat_id],
    )
    # the stream is open (the server follows the chat) before the run starts
    page.wait_for_function("window.__source.readyState === 1")
    page.evaluate(
        "async (chatId) => {"
        "  const csrf = document.cookie.match(/csrftoken=([^;]+)/)?.[1] ?? '';"
        "  const r = await fetch(`/api/chats/${chatId}/messages/`, {method: 'POST',"
        "    headers: {'Content-Type': 'application/json', 'X-CSRFToken': csrf},"
        "    body: JSON.stringify({content: 'Say something'})});"
        "  if (r.status !== 202) throw new Error('status ' + r.status);"
        "}",
        chat_id,
    )
    page.wait_for_function("window.__output.textContent.length > 10", timeout=20_000)


def _section_javascript(page_name: str, heading: str) -> list[str]:
    """The ``javascript`` blocks of one section (``### heading``) of a docs page."""
    text = (ROOT / "docs" / page_name).read_text()
    section = text.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^```javascript\n(.*?)^```", section, re.S | re.M)


def test_the_frontends_docs_session_recipes_run_as_pasted(page):
    """docs/frontends.md's same-origin recipes in a page signed in with Django's login: the
    CSRF token from the ``csrftoken`` cookie lets a POST through (without it, ``403``), and
    ``EventSource`` on ``events/`` follows the chat with the session cookie alone."""
    if not os.environ.get("REDIS_URL"):
        if IN_CI:
            pytest.fail("REDIS_URL is not set but CI=true requires it")
        pytest.skip("REDIS_URL not set: the events endpoint needs Redis")
    create, follow = _section_javascript(
        "frontends.md", "### Same origin: the session cookie and CSRF"
    )
    assert "document.cookie.match(/csrftoken=" in create
    assert "new EventSource(" in follow
    log_in(page)
    before = api_get(page, "/api/chats/?page_size=100")["results"]
    # the same POST without the token is refused: the recipe's header is what lets it in
    refused = page.evaluate(
        "async () => (await fetch('/api/chats/', {method: 'POST',"
        "  headers: {'Content-Type': 'application/json'},"
        "  body: JSON.stringify({title: 'Trip'})})).status"
    )
    assert refused == 403
    page.evaluate("(source) => new Function('return (async () => {' + source + '})();')()", create)
    after = api_get(page, "/api/chats/?page_size=100")["results"]
    made = [c for c in after if c["id"] not in {b["id"] for b in before}]
    assert [c["title"] for c in made] == ["Trip"]
    chat_id = made[0]["id"]
    page.evaluate(
        "([source, chatId]) => {"
        "  window.__out = document.createElement('output');"
        "  window.__source = new Function('chatId', 'out', source + '; return source;')("
        "    chatId, window.__out);"
        "}",
        [follow, chat_id],
    )
    page.wait_for_function("window.__source.readyState === 1")  # following, before the run
    status = page.evaluate(
        "async (chatId) => {"
        "  const csrf = document.cookie.match(/csrftoken=([^;]+)/)?.[1] ?? '';"
        "  const r = await fetch(`/api/chats/${chatId}/messages/`, {method: 'POST',"
        "    headers: {'Content-Type': 'application/json', 'X-CSRFToken': csrf},"
        "    body: JSON.stringify({content: 'Plan a trip'})});"
        "  return r.status;"
        "}",
        chat_id,
    )
    assert status == 202
    page.wait_for_function("window.__out.textContent.length > 10", timeout=20_000)
    page.evaluate("window.__source.close()")


def overflow(page) -> int:
    """How far the page is wider than the viewport, in CSS pixels (0: no side scroll)."""
    return page.evaluate(
        "Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"
        " - document.documentElement.clientWidth"
    )


def too_wide(page) -> list[str]:
    """The elements reaching past the viewport's right edge (for the failure message)."""
    return page.evaluate(
        "() => [...document.querySelectorAll('body *')]"
        ".filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth)"
        ".slice(0, 8).map((e) => `${e.tagName}.${e.className}#${e.id}`)"
    )


def test_the_page_fits_a_375px_phone(browser, example_server):
    context = browser.new_context(
        viewport={"width": 375, "height": 740}, base_url=example_server, is_mobile=True
    )
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        log_in(page)
        assert overflow(page) == 0, too_wide(page)
        start_chat(page)
        send(page, "A **long** question with a_very_long_identifier_that_does_not_wrap_at_all?")
        wait_idle(page)
        page.wait_for_function("document.querySelector('#chat-totals').innerText.includes('$')")
        assert overflow(page) == 0, too_wide(page)
        for name in ("#send", "#chat-totals", "#prompt"):
            box = page.locator(name).bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 375, (name, box)
        # the title: plain text (no markdown markers), cut at a word boundary
        title = page.locator("#chat-title").inner_text()
        assert title == "A long question with…", title
        page.screenshot(path=str(SHOTS / "chat-375px.png"), full_page=True)
    finally:
        context.close()


MARKDOWN_REPLY = """Here is **the summary**:

| city | temp |
|------|-----:|
| Oslo | 4 |
| Rome | 18 |

```python
def greet(name):
    return f"hi {name}"
```

- one
- two

<script>window.__xss = "script"</script>
<img src=x onerror="window.__xss = 'img'">
<a href="#" onclick="window.__xss = 'click'">raw link</a>
[a javascript link](javascript:window.__xss='href') and [a good one](https://example.com/)
"""


def test_a_markdown_reply_renders_and_its_html_stays_inert(page, fake_llm):
    log_in(page)
    start_fake_chat(page)
    fake_llm.script(MARKDOWN_REPLY)
    send(page, "Show me markdown")
    wait_idle(page)
    body = page.locator("#transcript li.msg.assistant .body.markdown").last
    body.wait_for()
    # a table, a code block and a list, drawn as such
    assert body.locator("table th").all_inner_texts() == ["city", "temp"]
    assert body.locator("table td").all_inner_texts() == ["Oslo", "4", "Rome", "18"]
    assert "def greet(name):" in body.locator("pre code").inner_text()
    assert body.locator("ul li").all_inner_texts() == ["one", "two"]
    assert body.locator("strong").inner_text() == "the summary"
    # the payload: nothing ran, no element or attribute of it made it into the page
    assert page.evaluate("window.__xss") is None
    assert body.locator("script, img, [onerror], [onclick]").count() == 0
    assert "<script>" in body.inner_text()  # shown as text
    hrefs = body.locator("a").evaluate_all("els => els.map(a => a.getAttribute('href'))")
    assert "https://example.com/" in hrefs
    assert not [h for h in hrefs if h and h.lower().startswith("javascript")]
    assert body.locator("a", has_text="a javascript link").count() == 0  # left as text
    body.locator("a", has_text="a good one").wait_for()
    assert body.locator("a", has_text="a good one").get_attribute("rel") == (
        "noopener noreferrer nofollow"
    )
    page.screenshot(path=str(SHOTS / "chat-markdown.png"), full_page=True)

    # the same reply in the admin, rendered on the server (markdown-it-py + nh3)
    page.get_by_role("link", name="open in the admin").click()
    page.wait_for_url("**/admin/django_llmchat/chat/*/change/")
    reply = page.locator("#transcript .llmchat-markdown").last
    assert reply.locator("table td").all_inner_texts() == ["Oslo", "4", "Rome", "18"]
    assert "def greet(name):" in reply.locator("pre code").inner_text()
    assert reply.locator("script, img, [onerror], [onclick]").count() == 0
    assert page.evaluate("window.__xss") is None
    page.screenshot(path=str(SHOTS / "admin-markdown.png"), full_page=True)


def _canvas_pixels(page, selector: str) -> int:
    """How many pixels of a canvas are not transparent (0: nothing drawn)."""
    return page.eval_on_selector(
        selector,
        "c => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "  let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n; }",
    )


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_usage_dashboard_draws_its_charts(browser, example_server, scheme):
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, base_url=example_server, color_scheme=scheme
    )
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto("/admin/login/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "admin")
        page.click("input[type=submit]")
        page.goto("/admin/")
        page.get_by_role("link", name="Usage dashboard").click()
        page.wait_for_selector("html[data-llmchat-charts='4']")
        for chart in ("spend", "tokens", "models", "status"):
            assert _canvas_pixels(page, f"#chart-{chart}") > 500, chart
        assert page.locator("#by-model tbody tr").count() >= 4  # the sample month's models
        assert page.locator("#top-chats a", has_text="Sample: ").count() > 0
        assert re.match(r"\$\d+\.\d{4}", page.locator("#total-cost").inner_text())
        # chart text follows the theme: light text on the dark theme, dark on the light
        color = page.evaluate("Chart.defaults.color")
        fg = page.evaluate(
            "getComputedStyle(document.documentElement).getPropertyValue('--body-quiet-color')"
        )
        assert color == fg.strip()
        page.screenshot(path=str(SHOTS / f"admin-dashboard-{scheme}.png"), full_page=True)
        # a week view of the same month
        page.select_option("#id_period", "week")
        page.get_by_role("button", name="Show").click()
        page.wait_for_selector("html[data-llmchat-charts='4']")
        assert "period=week" in page.url
        assert _canvas_pixels(page, "#chart-spend") > 500
    finally:
        context.close()
    assert not errors, f"JavaScript errors on the dashboard: {errors}"


# -- branches and feedback ----------------------------------------------------------------------
def reply_text(page) -> str:
    """The text of the last reply shown."""
    return page.locator("#transcript li.msg.assistant .body").last.inner_text()


def regenerate(page) -> None:
    """The page's Regenerate button on the last reply (``POST ui/chat``, as an AI SDK
    client regenerates), then the chat drawn again."""
    page.get_by_role("button", name="Regenerate this reply").click()
    wait_idle(page)


def feedback_of(page, chat_id: str, message_id: str):
    """The signed-in user's feedback row on a reply, read back through the API."""
    return page.evaluate(
        "async (path) => { const r = await fetch(path);"
        "  return r.status === 200 ? r.json() : r.status; }",
        f"/api/chats/{chat_id}/messages/{message_id}/feedback/",
    )


def test_alternatives_edit_and_thumbs(page, fake_llm):
    log_in(page)
    chat_id = start_fake_chat(page)
    fake_llm.script("Apples are red.")
    send(page, "Tell me about apples")
    wait_idle(page)
    assert page.locator(".alternatives").count() == 0  # one reply: nothing to flip through

    # a second reply to the question: the page shows it, the first one a click away
    fake_llm.script(Reply("Apples are green.", chunk_size=3))
    page.evaluate(
        "() => { window.__streamed = [];"
        "  new MutationObserver(() => {"
        "    const body = document.querySelector('#transcript li.msg.streaming .body');"
        "    if (body) window.__streamed.push(body.textContent);"
        "  }).observe(document.querySelector('#transcript'),"
        "    {subtree: true, childList: true, characterData: true}); }"
    )
    regenerate(page)
    page.wait_for_selector("text=Apples are green.")
    # it streamed into the page (a live reply, before the chat was drawn again)
    assert any("Apples are green." in text for text in page.evaluate("window.__streamed"))
    assert page.locator("text=Apples are red.").count() == 0
    reply = page.locator("#transcript li.msg.assistant").last
    assert reply.locator(".alt-count").inner_text() == "2/2"
    assert reply.get_by_role("button", name="Next alternative").is_disabled()
    reply.get_by_role("button", name="Previous alternative").click()
    page.wait_for_selector("text=Apples are red.")
    assert page.locator("text=Apples are green.").count() == 0
    assert page.locator("#transcript li.msg.assistant .alt-count").inner_text() == "1/2"
    page.reload()  # the switch is the chat's: it survives a reload
    page.wait_for_selector("text=Apples are red.")
    assert page.locator("#transcript li.msg.assistant .alt-count").inner_text() == "1/2"
    page.get_by_role("button", name="Next alternative").click()
    page.wait_for_selector("text=Apples are green.")
    assert page.locator("text=Apples are red.").count() == 0

    # edit a prompt: its answer replaces the path after it; the old one stays reachable
    fake_llm.script("Pears are green.")
    send(page, "Tell me about pears")
    wait_idle(page)
    page.wait_for_selector("text=Pears are green.")
    fake_llm.script("Plums are purple.")
    pears = page.locator("#transcript li.msg.user", has_text="Tell me about pears")
    pears.get_by_role("button", name="Edit prompt").click()
    page.get_by_label("Edited prompt").fill("Tell me about plums")
    page.get_by_role("button", name="Send edited").click()
    page.wait_for_selector("text=Plums are purple.")
    wait_idle(page)
    assert page.locator("text=Pears are green.").count() == 0
    assert page.locator("#transcript li.msg.user .body").all_inner_texts() == [
        "Tell me about apples",
        "Tell me about plums",
    ]
    asked = json.dumps(fake_llm.requests[-1].body)
    assert "Tell me about plums" in asked and "pears" not in asked
    assert "Apples are green." in asked  # the path it follows: the chosen reply
    edited = page.locator("#transcript li.msg.user", has_text="Tell me about plums")
    assert edited.locator(".alt-count").inner_text() == "2/2"
    page.screenshot(path=str(SHOTS / "chat-branches.png"))
    edited.get_by_role("button", name="Previous alternative").click()
    page.wait_for_selector("text=Pears are green.")
    assert page.locator("text=Plums are purple.").count() == 0
    page.reload()
    page.wait_for_selector("text=Pears are green.")
    assert page.locator("text=Tell me about plums").count() == 0

    # thumbs: a click stores the rating, another changes it; both survive a reload
    last = page.locator("#transcript li.msg.assistant").last
    message_id = last.get_attribute("data-id")
    assert feedback_of(page, chat_id, message_id) == 404
    last.get_by_role("button", name="Good reply").click()
    page.wait_for_selector("li.msg.assistant >> button[aria-label='Good reply'][aria-pressed=true]")
    assert feedback_of(page, chat_id, message_id)["rating"] == 1
    page.locator("#transcript li.msg.assistant").last.get_by_role(
        "button", name="Bad reply"
    ).click()
    page.wait_for_selector("li.msg.assistant >> button[aria-label='Bad reply'][aria-pressed=true]")
    assert feedback_of(page, chat_id, message_id)["rating"] == -1
    page.reload()
    page.wait_for_selector("text=Pears are green.")
    last = page.locator("#transcript li.msg.assistant").last
    assert last.get_by_role("button", name="Bad reply").get_attribute("aria-pressed") == "true"
    assert last.get_by_role("button", name="Good reply").get_attribute("aria-pressed") == "false"


def test_the_branch_controls_fit_a_375px_phone(browser, example_server, fake_llm):
    context = browser.new_context(
        viewport={"width": 375, "height": 740}, base_url=example_server, is_mobile=True
    )
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        log_in(page)
        start_fake_chat(page)
        fake_llm.script("A first answer with a_very_long_identifier_that_does_not_wrap_at_all.")
        send(page, "A question")
        wait_idle(page)
        fake_llm.script("A second answer.")
        regenerate(page)
        page.wait_for_selector("#transcript .alternatives")
        for name in (".alternatives", ".thumbs", ".msg.user .edit"):
            box = page.locator(name).last.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 375, (name, box)
        assert overflow(page) == 0, too_wide(page)
        page.screenshot(path=str(SHOTS / "chat-branches-375px.png"), full_page=True)
    finally:
        context.close()


# -- small screens ------------------------------------------------------------------------------
def phone(browser, example_server):
    """A 375 px wide phone's page (is_mobile: the viewport meta tag counts)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(
        viewport={"width": 375, "height": 740}, base_url=example_server, is_mobile=True
    )
    page = context.new_page()
    page.set_default_timeout(15_000)
    return context, page


def in_view(page, locator) -> bool:
    """Whether the element is wholly inside the viewport as the page stands (no scrolling)."""
    box = locator.bounding_box()
    size = page.evaluate("[window.innerWidth, window.innerHeight]")
    return (
        box is not None
        and box["y"] >= 0
        and box["y"] + box["height"] <= size[1]
        and box["x"] >= 0
        and box["x"] + box["width"] <= size[0]
    )


def test_the_approval_card_is_in_view_on_a_375px_phone(browser, example_server):
    context, page = phone(browser, example_server)
    try:
        log_in(page)
        start_chat(page)
        # a few turns first: the transcript is longer than the screen
        for question in ("Hello there", "Tell me a long story please", "And another one"):
            send(page, question)
            wait_idle(page)
        send(page, "Book a table at Luigi for 4")
        wait_idle(page)
        approve = page.get_by_role("button", name="Approve demo_book_table")
        approve.wait_for()
        page.wait_for_timeout(300)  # any scrolling the page does has ended
        # without the test scrolling: the card and both its buttons are on the screen
        assert in_view(page, approve), approve.bounding_box()
        assert in_view(page, page.get_by_role("button", name="Deny demo_book_table"))
        page.screenshot(path=str(SHOTS / "chat-approval-375px.png"))
        approve.click()
        wait_idle(page)
        page.wait_for_selector("text=Done. Booked a table for 4 at Luigi")
    finally:
        context.close()


def admin_log_in(page) -> None:
    page.goto("/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", "admin")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")


def scroll_width(page) -> tuple[int, int]:
    """The document's width and the viewport's (a phone's layout viewport, 375 px)."""
    root = "document.documentElement"
    return tuple(page.evaluate(f"[{root}.scrollWidth, {root}.clientWidth]"))


def test_the_usage_dashboard_fits_a_375px_phone(browser, example_server):
    context, page = phone(browser, example_server)
    try:
        admin_log_in(page)
        page.get_by_role("link", name="Usage dashboard").click()
        page.wait_for_selector("html[data-llmchat-charts='4']")
        width, viewport = scroll_width(page)
        assert width <= viewport, (width, too_wide(page))
        for chart in ("spend", "tokens", "models", "status"):
            assert _canvas_pixels(page, f"#chart-{chart}") > 500, chart
        # the user table names the sample users (the demo rows carry them)
        assert "(no user)" not in page.locator("#by-user").inner_text()
        page.screenshot(path=str(SHOTS / "admin-dashboard-375px.png"), full_page=True)
    finally:
        context.close()


def test_the_feedback_admin_renders_a_rated_reply_at_375px(browser, example_server, fake_llm):
    context, page = phone(browser, example_server)
    try:
        log_in(page)
        start_fake_chat(page)
        fake_llm.script(MARKDOWN_REPLY)
        send(page, "Show me markdown to rate")
        wait_idle(page)
        page.locator("#transcript li.msg.assistant").last.get_by_role(
            "button", name="Good reply"
        ).click()
        page.wait_for_selector(
            "li.msg.assistant >> button[aria-label='Good reply'][aria-pressed=true]"
        )
        page.goto("/admin/django_llmchat/feedback/")
        row = page.locator("#result_list tbody tr").first
        assert "Here is the summary:" in row.inner_text()
        assert "**" not in row.inner_text()
        row.locator("a").first.click()
        page.wait_for_url("**/admin/django_llmchat/feedback/*/change/")
        reply = page.locator(".llmchat-markdown").first
        assert reply.locator("strong").inner_text() == "the summary"
        assert reply.locator("table td").all_inner_texts() == ["Oslo", "4", "Rome", "18"]
        assert "**the summary**" not in page.locator("#content").inner_text()
        assert reply.locator("script, img, [onerror], [onclick]").count() == 0
        assert page.evaluate("window.__xss") is None
        page.screenshot(path=str(SHOTS / "admin-feedback-375px.png"), full_page=True)
    finally:
        context.close()


CONTRAST = """(el) => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const c = [r, g, b].map((v) => { v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  };
  let bg = el;
  while (bg && (rgb(getComputedStyle(bg).backgroundColor)[3] === 0
                || getComputedStyle(bg).backgroundColor === 'transparent')) bg = bg.parentElement;
  const back = bg ? rgb(getComputedStyle(bg).backgroundColor) : [255, 255, 255];
  const [a, b] = [lum(rgb(getComputedStyle(el).color)), lum(back)];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


def test_the_branch_switcher_is_a_readable_tappable_control(browser, example_server, fake_llm):
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(
        viewport={"width": 375, "height": 740},
        base_url=example_server,
        is_mobile=True,
        color_scheme="light",
    )
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        log_in(page)
        start_fake_chat(page)
        fake_llm.script("A first answer.")
        send(page, "A question")
        # the reply drawn (not only the page idle before the send), then regenerated
        page.locator("#transcript").get_by_text("A first answer.").wait_for()
        wait_idle(page)
        fake_llm.script("A second answer.")
        regenerate(page)
        wait_shown(page, "A second answer.")
        switcher = page.locator("#transcript .alternatives").last
        switcher.wait_for()
        for scheme in ("light", "dark"):  # the same control in both colour schemes
            page.emulate_media(color_scheme=scheme)
            for name in ("Previous alternative", "Next alternative"):
                button = switcher.get_by_role("button", name=name)
                box = button.bounding_box()
                # a tap target of at least 44 x 44 CSS px (WCAG 2.5.5; 2.5.8's minimum is 24)
                assert box["width"] >= 44 and box["height"] >= 44, (scheme, name, box)
                assert button.evaluate(CONTRAST) >= 4.5, (scheme, name)  # AA for text
            count = switcher.locator(".alt-count")
            assert count.evaluate(CONTRAST) >= 4.5, scheme
            size = float(count.evaluate("e => parseFloat(getComputedStyle(e).fontSize)"))
            assert size >= 14, (scheme, size)
            assert switcher.get_by_role("button", name="Previous alternative").is_enabled()
            assert overflow(page) == 0, too_wide(page)
            page.screenshot(path=str(SHOTS / f"chat-branch-switcher-375px-{scheme}.png"))
    finally:
        context.close()


def test_the_sidebar_lists_pinned_chats_first_and_leaves_archived_out(page):
    log_in(page)
    made = page.evaluate(
        "async () => {"
        "  const csrf = document.cookie.match(/csrftoken=([^;]+)/)?.[1] ?? '';"
        "  const post = async (body) => (await fetch('/api/chats/', {method: 'POST',"
        "    headers: {'Content-Type': 'application/json', 'X-CSRFToken': csrf},"
        "    body: JSON.stringify(body)})).json();"
        "  const out = [];"
        "  out.push(await post({title: 'Sidebar pinned (oldest)', pinned: true, tags: ['work']}));"
        "  out.push(await post({title: 'Sidebar archived', archived: true}));"
        "  out.push(await post({title: 'Sidebar newest'}));"
        "  return out.map((c) => c.id);"
        "}"
    )
    try:
        page.goto("/")
        page.wait_for_selector("#chat-list li a")
        titles = page.eval_on_selector_all(
            "#chat-list li a",
            "els => els.map(e => [...e.childNodes].filter(n => n.nodeType === Node.TEXT_NODE)"
            "  .map(n => n.textContent).join(''))",
        )
        assert titles[0] == "Sidebar pinned (oldest)"  # before the newer, unpinned chats
        assert "Sidebar newest" in titles and "Sidebar archived" not in titles
        first = page.locator("#chat-list li").first
        assert first.get_attribute("class") == "pinned"
        assert "#work" in first.inner_text()
        page.screenshot(path=str(SHOTS / "sidebar-pinned.png"))
    finally:  # the later tests open the first chat of the list: no pinned one left
        page.evaluate(
            "async (ids) => {"
            "  const csrf = document.cookie.match(/csrftoken=([^;]+)/)?.[1] ?? '';"
            "  for (const id of ids) await fetch(`/api/chats/${id}/`, {method: 'DELETE',"
            "    headers: {'X-CSRFToken': csrf}});"
            "}",
            made,
        )
