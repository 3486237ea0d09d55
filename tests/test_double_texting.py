"""Double texting on the Python paths (``chat.ask``, ``chat.stream``, ``chat.ask_later``):
what a new prompt does while a run of the chat works, per policy (``enqueue``, ``reject``,
``interrupt``, ``rollback``), given per call, per chat or by ``LLMCHAT["DOUBLE_TEXTING"]``.

The live run is a slow stream read in this thread. ``ask_later`` sends the new prompt
from this thread too (its task, recorded, is run once the live run ended); ``ask`` and
``stream`` wait for their turn, so they are a second caller in another thread while this
one goes on reading (the live run sees the stop at its next poll): threads writing at once
need a server database, so those run on PostgreSQL. The gate's own tests (queued runs,
the race under ``reject``) are in tests/runs/test_policy.py; REST and
``ui/chat`` in tests/api/test_double_texting.py."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from django_llmchat import runs
from django_llmchat.errors import ArgumentError, DoubleTextingRejected
from django_llmchat.events import Interrupt, TextDelta
from django_llmchat.models import Chat, Message, Run, ToolCall, Usage
from django_llmchat.runs import base
from django_llmchat.tasks import complete_chat
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing import ToolCall as ScriptedCall
from django_llmchat.testing.invariants import assert_one_path
from django_llmchat.tools import tool

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gpt-4.1-mini"
LONG = "word " * 200


@tool
def dt_lookup(city: str) -> str:
    """Looks a city up."""
    return f"{city}: sunny"


@pytest.fixture
def chat(fake_llm, django_user_model):
    fake_llm.configure("openai", MODEL, TASKS_EAGER_WITHOUT_BROKER="inline")
    user = django_user_model.objects.create_user("texter", password="pw")
    return Chat.objects.create(user=user, provider="openai", model_id=MODEL)


@pytest.fixture
def sent(monkeypatch):
    """The run tasks sent, recorded instead of run (the test runs them)."""
    calls: list[int] = []

    def record(chat_id, run_id, **kwargs):
        calls.append(run_id)

    monkeypatch.setattr(base, "send", record)
    monkeypatch.setattr(runs, "send", record)
    return calls


def threads_need_a_server_database():
    if connection.vendor == "sqlite":
        pytest.skip("threads writing at once need a server database (SQLite: one writer)")


def slow() -> Fault:
    return Fault(chunk_delay=0.01, reply=Reply(LONG, chunk_size=5))


def live(chat) -> object:
    """A slow streamed run of ``chat``, read until its first text delta."""
    events = chat.stream("Talk a lot")
    for event in events:
        if isinstance(event, TextDelta):
            return events
    raise AssertionError("the stream ended before its first delta")


class Second(threading.Thread):
    """The second caller: ``call(chat)`` on its own instance of the chat, in a thread."""

    def __init__(self, chat_id: int, call):
        super().__init__(daemon=True)
        self.chat_id, self.call = chat_id, call
        self.result = self.error = None

    def run(self):
        try:
            self.result = self.call(Chat.objects.get(pk=self.chat_id))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            connections.close_all()


def double_text(chat, call) -> tuple[list, Second]:
    """A live run, then ``call`` from a second caller while the first is read to its end;
    the first run's remaining events and the second caller."""
    threads_need_a_server_database()
    events = live(chat)
    second = Second(chat.pk, call)
    second.start()
    rest = list(events)
    second.join(30)
    assert not second.is_alive(), "the second caller did not finish"
    return rest, second


def path(chat) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in chat.messages.all()]


def first_run(chat) -> Run:
    return chat.runs.order_by("id").first()


# -- enqueue (the default) -----------------------------------------------------------------
def test_enqueue_answers_the_new_prompt_after_the_live_run(chat, fake_llm):  # PostgreSQL
    fake_llm.script(slow(), "Second answer")
    rest, second = double_text(chat, lambda c: c.ask("And now?"))
    assert second.error is None
    assert second.result.content == "Second answer"
    assert not any(isinstance(e, Interrupt) for e in rest)
    assert first_run(chat).status == Run.SUCCEEDED
    assert path(chat) == [
        ("user", "Talk a lot"),
        ("assistant", LONG),
        ("user", "And now?"),
        ("assistant", "Second answer"),
    ]


# -- reject ---------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["ask", "stream", "ask_later"])
def test_reject_refuses_a_prompt_while_a_run_works_and_stores_nothing(chat, fake_llm, how):
    fake_llm.script(slow())
    events = live(chat)
    stored = Message.objects.filter(chat=chat).count()
    with pytest.raises(DoubleTextingRejected, match="'reject'"):
        if how == "stream":
            next(iter(chat.stream("Me too", double_texting="reject")))
        else:
            getattr(chat, how)("Me too", double_texting="reject")
    assert Message.objects.filter(chat=chat).count() == stored
    assert chat.runs.count() == 1
    list(events)  # the live run goes on untouched
    assert first_run(chat).status == Run.SUCCEEDED
    assert chat.messages.get(role="assistant").content == LONG


def test_reject_admits_a_prompt_to_an_idle_chat(chat, fake_llm):
    fake_llm.script("Hello")
    assert chat.ask("Hi", double_texting="reject").content == "Hello"


def test_the_chat_field_and_the_setting_give_the_policy(chat, fake_llm, settings, sent):
    fake_llm.script(slow())
    events = live(chat)
    chat.double_texting = "reject"
    chat.save()
    with pytest.raises(DoubleTextingRejected):
        Chat.objects.get(pk=chat.pk).ask_later("Me too")
    # a call's own policy wins over the chat's
    Chat.objects.get(pk=chat.pk).ask_later("Queued", double_texting="enqueue")
    Chat.objects.filter(pk=chat.pk).update(double_texting="")
    settings.LLMCHAT = {**settings.LLMCHAT, "DOUBLE_TEXTING": "reject"}
    with pytest.raises(DoubleTextingRejected):
        Chat.objects.get(pk=chat.pk).ask_later("Me three")
    list(events)


@pytest.mark.parametrize("bad", ["queue", 3, "REJECT"])
def test_an_unknown_policy_is_an_argument_error_naming_it(chat, bad):
    with pytest.raises(ArgumentError, match="double_texting must be one of"):
        chat.ask("Hi", double_texting=bad)
    with pytest.raises(ArgumentError, match="double_texting must be one of"):
        chat.ask_later("Hi", double_texting=bad)
    with pytest.raises(ArgumentError, match="double_texting must be one of"):
        chat.stream("Hi", double_texting=bad)
    assert not chat.messages.exists()


# -- interrupt ------------------------------------------------------------------------------
def calls(policy: str) -> dict:
    """The second prompt on each Python path, under ``policy``."""
    prompt = "Stop, and say this"
    return {
        "ask": lambda c: c.ask(prompt, double_texting=policy),
        "stream": lambda c: list(c.stream(prompt, double_texting=policy)),
        "ask_later": None,  # from this thread: see double_text_later
    }


CALLS = calls("interrupt")


def double_text_later(chat, policy: str, sent: list) -> tuple[list, Second]:
    """A live run, then ``ask_later`` of the new prompt from this thread; the live run read
    to its end, then the new prompt's task run (here, as a worker would)."""
    events = live(chat)
    message = chat.ask_later("Stop, and say this", double_texting=policy)
    queued = chat.last_run
    assert queued.status == Run.QUEUED and message.pk == queued.prompt_id
    rest = list(events)
    assert queued.pk in sent  # sent when the prompt committed, and by the stopped run
    complete_chat.apply(args=(chat.pk,), kwargs={"run_id": queued.pk})
    done = Second(chat.pk, None)
    done.result = message
    return rest, done


def second_prompt(chat, policy, how, sent):
    if how == "ask_later":
        return double_text_later(chat, policy, sent)
    return double_text(chat, calls(policy)[how])


@pytest.mark.parametrize("how", list(CALLS))
def test_interrupt_stops_the_live_run_keeping_its_partial_reply(chat, fake_llm, sent, how):
    fake_llm.script(slow(), "Second answer")
    rest, second = second_prompt(chat, "interrupt", how, sent)
    assert second.error is None, second.error
    stopped = first_run(chat)
    assert (stopped.status, stopped.interrupt_reason) == (Run.CANCELLED, "double_texting")
    assert any(isinstance(e, Interrupt) and e.reason == "double_texting" for e in rest)
    partial = chat.messages.filter(role="assistant").order_by("position", "id").first()
    assert partial.run_id == stopped.pk and partial.finish_reason == "cancelled"
    assert partial.content and LONG.startswith(partial.content) and partial.content != LONG
    assert path(chat) == [
        ("user", "Talk a lot"),
        ("assistant", partial.content),
        ("user", "Stop, and say this"),
        ("assistant", "Second answer"),
    ]
    assert chat.runs.order_by("-id").first().status == Run.SUCCEEDED
    assert_one_path(chat.pk)
    assert Chat.objects.get(pk=chat.pk).status == "idle"


# -- rollback -------------------------------------------------------------------------------
@pytest.mark.parametrize("how", list(CALLS))
def test_rollback_stops_the_live_run_and_deletes_its_reply(chat, fake_llm, sent, how):
    fake_llm.script(slow(), "Second answer")
    rest, second = second_prompt(chat, "rollback", how, sent)
    assert second.error is None, second.error
    stopped = first_run(chat)
    assert (stopped.status, stopped.interrupt_reason) == (Run.CANCELLED, "rollback")
    assert not Message.objects.filter(run=stopped).exclude(role="user").exists()
    assert path(chat) == [
        ("user", "Talk a lot"),
        ("user", "Stop, and say this"),
        ("assistant", "Second answer"),
    ]
    # the stopped attempt stays in the ledger, without its message
    billed = Usage.objects.get(run=stopped)
    assert billed.status == Usage.CANCELLED and billed.message_id is None
    assert billed.output_tokens > 0
    assert_one_path(chat.pk)


def test_rollback_deletes_the_steps_and_leaves_no_call_without_its_result(chat, fake_llm, sent):
    chat.with_tools(dt_lookup)
    fake_llm.script(
        Reply(tool_calls=[ScriptedCall("dt_lookup", {"city": "Oslo"})]), slow(), "Fresh"
    )
    rest, second = double_text_later(chat, "rollback", sent)
    stopped = first_run(chat)
    assert stopped.status == Run.CANCELLED and stopped.steps >= 1
    assert not ToolCall.objects.filter(chat=chat).exists()
    assert path(chat) == [
        ("user", "Talk a lot"),
        ("user", "Stop, and say this"),
        ("assistant", "Fresh"),
    ]
    assert Usage.objects.filter(run=stopped).count() == 2  # both attempts billed
    assert_one_path(chat.pk)


def test_interrupt_keeps_the_stopped_runs_steps_each_call_with_its_result(chat, fake_llm, sent):
    """Stopped mid-run after a tool step: its call keeps its result, the path is valid."""
    chat.with_tools(dt_lookup)
    fake_llm.script(
        Reply(tool_calls=[ScriptedCall("dt_lookup", {"city": "Oslo"})]), slow(), "Fresh"
    )
    double_text_later(chat, "interrupt", sent)
    (call,) = ToolCall.objects.filter(chat=chat)
    assert Message.objects.filter(parent_tool_call=call).count() == 1
    assert [m.role for m in chat.messages.all()] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert_one_path(chat.pk)


# -- the admin ------------------------------------------------------------------------------
def test_admin_edits_the_chats_policy_and_refuses_one_that_is_none(
    chat, fake_llm, client, django_user_model, settings, sent
):
    from django.urls import reverse

    from django_llmchat.runs.policy import resolve

    client.force_login(django_user_model.objects.create_superuser("dt-admin", password="pw"))
    change = reverse("admin:django_llmchat_chat_change", args=[chat.pk])
    page = client.get(change).content.decode()
    select = page[page.index('<select name="double_texting"') :].split("</select>")[0]
    assert '<option value="" selected>LLMCHAT[&quot;DOUBLE_TEXTING&quot;] (enqueue)' in select
    for policy in runs.POLICIES:
        assert f'<option value="{policy}">{policy}</option>' in select
    form = {
        "title": "",
        "user": chat.user_id,
        "provider": chat.provider,
        "model_id": chat.model_id,
        "params": "{}",
        "schema": "null",
        "tools": "[]",
        "context": "{}",
        "history": "null",
    }

    response = client.post(change, {**form, "double_texting": "reject"})
    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Chat.objects.get(pk=chat.pk)
    assert stored.double_texting == "reject" and resolve(stored) == "reject"
    # the policy saved there is the one the gate applies
    fake_llm.script(slow())
    events = live(stored)
    with pytest.raises(DoubleTextingRejected):
        Chat.objects.get(pk=chat.pk).ask_later("Me too")
    list(events)

    # a value that is no policy: the form again, with the error a prompt would raise
    for bad in ("sometimes", "REJECT"):
        response = client.post(change, {**form, "double_texting": bad})
        assert response.status_code == 200
        assert response.context["adminform"].form.errors["double_texting"] == [
            f"Must be one of enqueue, reject, interrupt, rollback; got {bad!r}."
        ]
        assert Chat.objects.get(pk=chat.pk).double_texting == "reject"

    # empty: the setting's
    response = client.post(change, {**form, "double_texting": ""})
    assert response.status_code == 302
    assert Chat.objects.get(pk=chat.pk).double_texting == ""
    settings.LLMCHAT = {**settings.LLMCHAT, "DOUBLE_TEXTING": "interrupt"}
    assert "(interrupt)</option>" in client.get(change).content.decode()


def test_admin_shows_a_stored_value_that_is_no_policy_and_refuses_to_keep_it(
    chat, client, django_user_model
):
    from django.urls import reverse

    Chat.objects.filter(pk=chat.pk).update(double_texting="queue")  # written around the checks
    client.force_login(django_user_model.objects.create_superuser("dt-admin", password="pw"))
    change = reverse("admin:django_llmchat_chat_change", args=[chat.pk])
    assert '<option value="queue" selected>queue</option>' in client.get(change).content.decode()
    form = {"user": chat.user_id, "provider": chat.provider, "model_id": chat.model_id}
    form |= {"params": "{}", "schema": "null", "tools": "[]", "context": "{}", "history": "null"}
    response = client.post(change, {**form, "double_texting": "queue"})
    assert "got &#x27;queue&#x27;" in response.content.decode()
    assert client.post(change, {**form, "double_texting": "enqueue"}).status_code == 302
    assert Chat.objects.get(pk=chat.pk).double_texting == "enqueue"
