"""A share link in a real browser (Chromium driven by Playwright): the owner shares a chat
of the example project, an anonymous visitor (a context without cookies) reads it,
markdown drawn and nothing run; once revoked the link says so. Skipped without
``/usr/bin/chromium`` as the chat page's tests are (a failure under ``CI=true``)."""

from __future__ import annotations

import time

import pytest

from .test_chat_page import (  # noqa: F401 (fixtures)
    SHOTS,
    browser,
    example_server,
    fake_llm,
    log_in,
    page,
)

# serves its own server on its own SQLite database, whatever DATABASE_URL says
pytestmark = pytest.mark.own_database

CALL = (
    "async ([method, path, body]) => {"
    "  const csrf = document.cookie.match(/csrftoken=([^;]+)/)?.[1] ?? '';"
    "  const r = await fetch(path, {method, headers: {'Content-Type': 'application/json',"
    "    'X-CSRFToken': csrf}, body: body === null ? undefined : JSON.stringify(body)});"
    "  return {status: r.status, body: r.status === 204 ? null : await r.json()};"
    "}"
)


def call(tab, method: str, path: str, body=None) -> dict:
    return tab.evaluate(CALL, [method, path, body])


def test_an_anonymous_visitor_reads_a_shared_chat(page, browser):  # noqa: F811
    log_in(page)
    chat = call(page, "POST", "/api/chats/", {"title": "Shared in the browser"})["body"]
    posted = call(
        page, "POST", f"/api/chats/{chat['id']}/messages/", {"content": "Make it **bold**"}
    )
    assert posted["status"] in (201, 202), posted
    deadline = time.monotonic() + 20
    while call(page, "GET", f"/api/chats/{chat['id']}/")["body"]["status"] != "idle":
        assert time.monotonic() < deadline, "the demo reply did not finish"
        time.sleep(0.2)
    shared = call(page, "POST", f"/api/chats/{chat['id']}/share/", {})
    assert shared["status"] == 201, shared
    link = shared["body"]["url"]

    visitor = browser.new_context(viewport={"width": 1000, "height": 800})
    try:
        errors: list[str] = []
        anon = visitor.new_page()
        anon.on("pageerror", lambda exc: errors.append(str(exc)))
        anon.set_default_timeout(15_000)
        anon.goto(link)
        assert "/login/" not in anon.url
        assert anon.title() == "Shared in the browser"
        anon.wait_for_selector("article.message.user strong")
        assert anon.inner_text("article.message.user strong") == "bold"
        assert anon.locator("article.message.assistant").count() >= 1
        assert anon.locator("script").count() == 0
        SHOTS.mkdir(parents=True, exist_ok=True)
        anon.screenshot(path=str(SHOTS / "shared-chat.png"), full_page=True)

        assert call(page, "DELETE", f"/api/chats/{chat['id']}/share/")["status"] == 204
        response = anon.goto(link)
        assert response.status == 404
        assert anon.inner_text("h1") == "Link not found"
        assert not errors, errors
    finally:
        visitor.close()
