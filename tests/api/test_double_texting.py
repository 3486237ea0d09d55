"""Double texting over REST (``POST chats/{id}/messages/``: 202, inline SSE) and
``ui/chat``: the ``double_texting`` field of the body (or the chat's), per policy, and a
400 naming the field for a bad value.

The live run is an inline SSE stream read in this thread. A 202 prompt is sent from this
thread (its task, recorded, is run once the live run ended); a streamed one waits for its
turn, so it is sent from another thread while this one reads (on PostgreSQL: threads
writing at once need a server database). The Python paths are in
tests/test_double_texting.py."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection, connections

from django_llmchat import runs
from django_llmchat.models import Chat, Message, Run, Usage
from django_llmchat.runs import base
from django_llmchat.tasks import complete_chat
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing.invariants import assert_one_path

from .conftest import sse_frames, url
from .test_ui_chat import user

pytestmark = pytest.mark.django_db(transaction=True)

SSE = {"HTTP_ACCEPT": "text/event-stream"}
LONG = "word " * 200


@pytest.fixture
def sent(monkeypatch, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    calls: list[int] = []

    def record(chat_id, run_id, **kwargs):
        calls.append(run_id)

    monkeypatch.setattr(base, "send", record)
    monkeypatch.setattr(runs, "send", record)
    return calls


def slow() -> Fault:
    return Fault(chunk_delay=0.01, reply=Reply(LONG, chunk_size=5))


class Live:
    """An inline SSE run of the chat, read until its first text delta."""

    def __init__(self, api, chat):
        response = api.post(
            url("chat-messages", pk=chat.pk), {"content": "Talk a lot"}, format="json", **SSE
        )
        assert response.status_code == 200
        self.stream = iter(response.streaming_content)
        self.seen = ""
        while "text_delta" not in self.seen:
            self.seen += next(self.stream).decode()

    def rest(self) -> list[dict]:
        return sse_frames(self.seen + b"".join(self.stream).decode())


def message(api, chat, body, **extra):
    return api.post(url("chat-messages", pk=chat.pk), body, format="json", **extra)


def ui(api, chat, text="Stop, and say this", headers=None, **extra):
    body = {"id": str(chat.pk), "message": user(text), "trigger": "submit-message", **extra}
    return api.post(url("ui-chat"), body, format="json", **(headers or {}))


def path(chat):
    return [(m.role, m.content) for m in chat.messages.all()]


def first_run(chat) -> Run:
    return chat.runs.order_by("id").first()


def assert_stopped(chat, chosen: str, frames: list[dict]) -> None:
    """The live run stopped by the new prompt, its partial reply kept (``interrupt``) or
    deleted (``rollback``), the new prompt answered after it."""
    stopped = first_run(chat)
    reason = "rollback" if chosen == "rollback" else "double_texting"
    assert (stopped.status, stopped.interrupt_reason) == (Run.CANCELLED, reason)
    assert frames[-1]["event"] == "run_finished" and frames[-1]["data"]["status"] == "cancelled"
    assert any(f.get("event") == "interrupt" for f in frames)
    replies = list(Message.objects.filter(run=stopped, role="assistant"))
    if chosen == "interrupt":
        (partial,) = replies
        assert partial.content and LONG.startswith(partial.content) and partial.content != LONG
        expected = [("user", "Talk a lot"), ("assistant", partial.content)]
    else:
        assert replies == []
        assert Usage.objects.get(run=stopped).message_id is None  # billed all the same
        expected = [("user", "Talk a lot")]
    assert path(chat) == [
        *expected,
        ("user", "Stop, and say this"),
        ("assistant", "Second answer"),
    ]
    assert_one_path(chat.pk)


# -- 202 ------------------------------------------------------------------------------------
def test_a_202_prompt_under_reject_is_a_409_with_its_code(api, chat, sent, fake_llm):
    fake_llm.script(slow())
    live = Live(api, chat)
    refused = message(api, chat, {"content": "Me too", "double_texting": "reject"})
    assert refused.status_code == 409
    assert refused.json()["code"] == "double_texting_rejected"
    assert "'reject'" in refused.json()["detail"]
    assert list(Message.objects.filter(chat=chat).values_list("content", flat=True)) == [
        "Talk a lot"
    ]
    live.rest()
    assert first_run(chat).status == Run.SUCCEEDED


def test_a_202_prompt_under_enqueue_is_answered_after(api, chat, sent, fake_llm):
    fake_llm.script(slow(), "Second answer")
    live = Live(api, chat)
    accepted = message(api, chat, {"content": "Stop, and say this", "double_texting": "enqueue"})
    assert accepted.status_code == 202
    live.rest()
    complete_chat.apply(args=(chat.pk,), kwargs={"run_id": accepted.json()["run"]["id"]})
    assert first_run(chat).status == Run.SUCCEEDED
    assert path(chat)[-1] == ("assistant", "Second answer")


@pytest.mark.parametrize("chosen", ["interrupt", "rollback"])
def test_a_202_prompt_stops_the_live_run(api, chat, sent, fake_llm, chosen):
    fake_llm.script(slow(), "Second answer")
    live = Live(api, chat)
    accepted = message(api, chat, {"content": "Stop, and say this", "double_texting": chosen})
    assert accepted.status_code == 202, accepted.content
    run_id = accepted.json()["run"]["id"]
    assert accepted.json()["run"]["status"] == "queued"
    frames = live.rest()
    assert run_id in sent
    complete_chat.apply(args=(chat.pk,), kwargs={"run_id": run_id})
    assert_stopped(chat, chosen, frames)


def test_the_chats_own_policy_applies_and_is_validated(api, chat, sent, fake_llm):
    bad = api.patch(url("chat-detail", pk=chat.pk), {"double_texting": "later"}, format="json")
    assert bad.status_code == 400 and "double_texting" in bad.json()
    ok = api.patch(url("chat-detail", pk=chat.pk), {"double_texting": "reject"}, format="json")
    assert ok.status_code == 200 and ok.json()["double_texting"] == "reject"
    fake_llm.script(slow())
    live = Live(api, chat)
    refused = message(api, chat, {"content": "Me too"})
    assert refused.status_code == 409 and refused.json()["code"] == "double_texting_rejected"
    live.rest()


@pytest.mark.parametrize("bad", ["later", "", 3, None, ["reject"]])
def test_a_bad_policy_is_a_400_naming_the_field(api, chat, sent, bad):
    for extra in ({}, SSE):
        refused = message(api, chat, {"content": "Hi", "double_texting": bad}, **extra)
        assert refused.status_code == 400, refused.content
        assert "double_texting" in refused.json()
    form = api.post(url("chat-messages", pk=chat.pk), {"content": "Hi", "double_texting": "later"})
    assert form.status_code == 400 and "double_texting" in form.json()
    refused = ui(api, chat, "Hi", double_texting=bad)
    assert refused.status_code == 400 and "double_texting" in refused.content.decode()
    assert not chat.messages.exists() and not chat.runs.exists()


# -- inline SSE and ui/chat -------------------------------------------------------------------
def test_a_streamed_prompt_under_reject_is_a_409(api, chat, sent, fake_llm):
    fake_llm.script(slow())
    live = Live(api, chat)
    refused = message(api, chat, {"content": "Me too", "double_texting": "reject"}, **SSE)
    assert refused.status_code == 409
    assert json.loads(refused.content)["code"] == "double_texting_rejected"
    refused = ui(api, chat, "Me too", double_texting="reject")
    assert refused.status_code == 409 and "'reject'" in refused.content.decode()
    refused = ui(
        api, chat, "Me too", headers={"HTTP_ACCEPT": "application/json"}, double_texting="reject"
    )
    assert refused.status_code == 409
    assert json.loads(refused.content)["code"] == "double_texting_rejected"
    assert Message.objects.filter(chat=chat).count() == 1
    live.rest()


def _second(clients_owner, chat, post) -> dict:
    """``post(api)`` from another thread; the response's status and body."""
    out: dict = {}

    def go():
        try:
            response = post(clients_owner)
            out["status"] = response.status_code
            out["body"] = (
                b"".join(response.streaming_content)
                if getattr(response, "streaming", False)
                else response.content
            ).decode()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    out["thread"] = thread
    return out


@pytest.mark.parametrize("where", ["sse", "ui"])
@pytest.mark.parametrize("chosen", ["interrupt", "rollback"])
def test_a_streamed_prompt_stops_the_live_run(api, chat, fake_llm, where, chosen):
    if connection.vendor == "sqlite":
        pytest.skip("threads writing at once need a server database (SQLite: one writer)")
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(slow(), "Second answer")
    live = Live(api, chat)
    if where == "sse":

        def post(client):
            body = {"content": "Stop, and say this", "double_texting": chosen}
            return message(client, chat, body, **SSE)
    else:

        def post(client):
            return ui(client, chat, double_texting=chosen)

    second = _second(api, chat, post)
    frames = live.rest()
    second["thread"].join(60)
    assert "error" not in second, second.get("error")
    assert second["status"] == 200, second.get("body")
    assert "Second" in second["body"]
    assert Chat.objects.get(pk=chat.pk).status == "idle"
    assert_stopped(chat, chosen, frames)
