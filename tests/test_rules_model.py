"""The rules as one model-based test (DESIGN section 20, docs/testing.md "The model-based
test"): Hypothesis' ``RuleBasedStateMachine`` drives random sequences of operations over
the Python API, REST and ``ui/chat`` at once (ask, stream, stop, a new prompt while a run
works under each double-texting policy, regenerate, branch from any message, switch, edit,
approve/deny, a tool that fails or returns junk, a model that falls back, a run killed and
recovered, a budget change, encryption on, erasure) against the fake provider server on
loopback, and after every step checks the invariants:

* the active path is one chain from a root to the active leaf, and a new prompt's path is
  exactly root -> ... -> its parent;
* every provider request of the step is the active path as stored, up to the message it
  produced (the last one: the whole path when it produced none);
* one usage row per provider request, each with tokens and a cost, counted by the limits;
* each reply names the model that answered it (a fallback's, when the chat's model failed);
  no call admitted once the budget in force was spent (the documented bound: at most one
  paid call past the budget);
* every tool call on the path has exactly one result (a call waiting for a decision
  aside);
* no chat is left busy (no run queued or running once the step returned; each chat's
  status is idle, or its run's awaiting a decision, and no run that ended holds it);
* REST, Python and ``ui/chat`` show the same path;
* the provider never sees ciphertext;
* the search's index, as a search sees it, holds every message stored in plain text, as
  its content is now, and no ciphertext;
* on PostgreSQL, an admission commits without waiting for the disk only for a run its
  caller answers itself (whose end, which waits, comes in the same step).

``HYPOTHESIS_PROFILE`` picks the budget: ``ci`` (the default: a fixed number of
sequences, the same ones every run), ``long`` (more and longer sequences, a new seed
each run). A failure prints the one command that replays it.
"""

from __future__ import annotations

import gc
import io
import os
import random
import shlex
import time
from collections import deque
from decimal import Decimal
from unittest import mock

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.db.models import F
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, Phase, event, seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    get_state_machine_test,
    invariant,
    precondition,
    rule,
)
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_llmchat import catch_up_search_index, runs
from django_llmchat.chats import lifecycle
from django_llmchat.chats.titles import prompt_title
from django_llmchat.errors import LLMChatError
from django_llmchat.models import Chat, Limit, Message, Run, ToolCall, Usage
from django_llmchat.models.chat_builder import tool_name
from django_llmchat.models.protected import MARKER
from django_llmchat.runs import execution as runs_execution
from django_llmchat.runs import limits
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing import ToolCall as ScriptedCall
from django_llmchat.testing.invariants import assert_one_path
from django_llmchat.tools import tool

pytestmark = [
    pytest.mark.model,
    pytest.mark.django_db(transaction=True),
    # an exception swallowed where a stream is closed (a generator's finalizer) is a broken
    # rule too: a reply or an attempt the step meant to store and could not
    pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning"),
]

# -- the budgets ------------------------------------------------------------------------
PROFILES = {
    # a quick look while changing the machine
    "dev": {
        "max_examples": int(os.environ.get("LLMCHAT_MODEL_EXAMPLES", 20)),
        "stateful_step_count": 15,
        "derandomize": False,
        "phases": [Phase.explicit, Phase.reuse, Phase.generate],
    },
    # CI: the same sequences every run (derandomized), about two minutes a database
    "ci": {"max_examples": 40, "stateful_step_count": 15, "derandomize": True},
    # a longer hunt: a new seed each run (the failure prints it)
    "long": {"max_examples": 1000, "stateful_step_count": 30, "derandomize": False},
}
for _name, _values in PROFILES.items():
    settings.register_profile(
        f"llmchat-model-{_name}",
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
        **_values,
    )
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in PROFILES:
    PROFILE = "ci"

MODEL = ("openai", "gpt-4.1-mini")
# a "fallback" run's chat model: busy, LLMCHAT["FALLBACKS"] sends its call to MODEL's
FALLS_BACK = "gpt-4.1"
# every reply reports these tokens: about 0.00056 USD at gpt-4.1-mini's prices
USAGE = {"input_tokens": 1000, "output_tokens": 100}
CALL_COST = Decimal("0.00056")
KEY = Fernet.generate_key().decode()


# -- the tools --------------------------------------------------------------------------
@tool
def model_lookup(city: str) -> str:
    """Looks a city up."""
    return f"{city}: 2 million people"


@tool
def model_broken(city: str) -> str:
    """A tool whose service is down."""
    raise RuntimeError(f"the service for {city} is down")


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


JUNK = {
    "nul": "before\x00after",
    "huge": "x" * 300_000,
    "object": _Opaque(),
    "bytes": b"\xff\xfe not text",
    "nested": {"a": [1, {"b": float("nan")}]},
}


@tool
def model_junk(kind: str):
    """Returns something that is not a plain result."""
    return JUNK.get(kind, "")


@tool(requires_approval=True)
def model_pay(amount: int) -> str:
    """Moves money (asks first)."""
    return f"paid {amount}"


TOOLS = ("model_lookup", "model_broken", "model_junk", "model_pay")


# -- what a request and a path say, in one vocabulary -------------------------------------
def _text(content) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def said(request) -> list[tuple]:
    """The conversation a Responses API request carried: ``("user", text)``,
    ``("assistant", text)``, ``("call", call_id, name)``, ``("result", call_id, text)``."""
    out: list[tuple] = []
    for item in request.body.get("input") or []:
        kind = item.get("type")
        if kind == "function_call":
            out.append(("call", item["call_id"], item["name"]))
        elif kind == "function_call_output":
            out.append(("result", item["call_id"], _text(item.get("output"))))
        elif item.get("role") in ("user", "assistant"):
            text = _text(item.get("content"))
            if text or item["role"] == "user":
                out.append((item["role"], text))
    return out


def stored(messages) -> list[tuple]:
    """The same vocabulary for stored messages (system messages aside)."""
    out: list[tuple] = []
    for m in messages:
        if m.role == "user":
            out.append(("user", m.content))
        elif m.role == "assistant":
            if m.content:
                out.append(("assistant", m.content))
            out += [("call", c.call_id, c.name) for c in m.tool_calls.all()]
        elif m.role == "tool":
            out.append(("result", m.tool_call_id, m.content))
    return out


# -- the machine ------------------------------------------------------------------------
texts = st.sampled_from(["Hi", "Tell me more", "Why?", "Pay it", "Weather in Paris?", "Ok"])
replies = st.sampled_from(
    [
        "text",
        "text",
        "lookup",
        "broken",
        "junk",
        "pay",
        "pay_twice",
        "fault",
        "broken_stream",
        "fallback",
    ]
)
junk_kinds = st.sampled_from(sorted(JUNK))
picks = st.integers(min_value=0, max_value=10_000)


class Env:
    """What the machine gets from the test: the fake provider and the settings."""

    def __init__(self, fake_llm, base_settings):
        self.fake_llm = fake_llm
        self.base = base_settings


class RulesMachine(RuleBasedStateMachine):
    env: Env
    # what a run covered (the figures on docs/testing.md)
    sequences = 0
    steps = 0

    def __init__(self):
        super().__init__()
        RulesMachine.sequences += 1
        self.server = self.env.fake_llm.server
        _wipe()
        self.server.reset()
        self.plan: deque = deque()
        self.server.responder = self._answer
        limits.forget()
        self.override = None
        self.encrypted = False
        self.budget: Decimal | None = None
        self.requests_seen = 0
        self.usage_seen = 0
        self.step_notes: list[str] = []
        User = get_user_model()
        self.owner = User.objects.create_user("owner", password="pw")
        self.other = User.objects.create_user("other", password="pw")
        self.api = _client(self.owner)
        self.other_api = _client(self.other)
        # PostgreSQL: each admission's call, (p_start, p_synchronous)
        self.admissions: list[tuple[bool, bool]] = []
        if connection.vendor == "postgresql":
            connection.execute_wrappers.append(self._watch_admissions)
        self.new_chat()

    # -- helpers ----------------------------------------------------------------------
    def _watch_admissions(self, execute, sql, params, many, context):
        if "llmchat_run_enqueue_v" in sql:
            self.admissions.append((params[4], params[-1]))
        return execute(sql, params, many, context)

    def new_chat(self, saved: bool = True) -> None:
        """The chat the rules act on from now: a new one (``saved=False``: not saved yet,
        its first prompt saves it)."""
        self.chat = Chat(user=self.owner, provider=MODEL[0], model_id=MODEL[1])
        self.chat.tools = [tool_name(t) for t in TOOLS]
        if saved:
            self.chat.save()
        self.waiting = False  # a run of the chat waits for a tool-call decision
        self.users_title: str | None = None  # the title the user gave the chat, if any
        self.new_prompt_parent = None  # (parent id or None) of the latest branch asked

    def _answer(self, request):
        # the server's thread: the scripted plan, else a plain reply
        try:
            item = self.plan.popleft()
        except IndexError:
            return Reply("ok", usage=USAGE)
        if item == "broken_stream":
            if request.stream:
                return Fault(cut_after=3, reply=Reply("a reply cut short", usage=USAGE))
            return Fault(drop=True)
        return item

    def script(self, kind: str, junk: str = "nul") -> None:
        """Queue the provider's answers for one run of kind ``kind``."""
        self.plan.clear()
        if not self.waiting:  # a "fallback" run asks a model that falls back to MODEL's
            wanted = FALLS_BACK if kind == "fallback" else MODEL[1]
            if self.chat.model_id != wanted:
                self.chat.with_model(wanted, provider=MODEL[0])
        done = Reply("All done.", usage=USAGE)
        if kind == "text":
            self.plan.append(Reply("A plain answer.", usage=USAGE))
        elif kind == "lookup":
            call = ScriptedCall("model_lookup", {"city": "Paris"})
            self.plan += [Reply(tool_calls=[call], usage=USAGE), done]
        elif kind == "broken":
            call = ScriptedCall("model_broken", {"city": "Rome"})
            self.plan += [Reply(tool_calls=[call], usage=USAGE), done]
        elif kind == "junk":
            call = ScriptedCall("model_junk", {"kind": junk})
            self.plan += [Reply(tool_calls=[call], usage=USAGE), done]
        elif kind == "pay":
            call = ScriptedCall("model_pay", {"amount": 5})
            self.plan += [Reply(tool_calls=[call], usage=USAGE)]
        elif kind == "pay_twice":
            calls = [
                ScriptedCall("model_pay", {"amount": 5}),
                ScriptedCall("model_pay", {"amount": 7}),
            ]
            self.plan += [Reply(tool_calls=calls, usage=USAGE)]
        elif kind == "fault":
            self.plan += [Fault(status=500)] * 3
        elif kind == "broken_stream":
            self.plan += ["broken_stream"] * 3
        elif kind == "fallback":
            # the chat's model busy on its call and its retry: its fallback answers
            self.plan += [Fault(status=503)] * 2 + [Reply("A fallback's answer.", usage=USAGE)]

    def waiting_calls(self) -> list[ToolCall]:
        run = self.chat.runs.filter(status=Run.AWAITING_APPROVAL).first()
        if run is None:
            return []
        return [
            c
            for c in ToolCall.objects.filter(message__run=run, approval="").order_by("id")
            if not Message.objects.filter(parent_tool_call=c).exists()
        ]

    def pick(self, n: int, queryset):
        ids = list(queryset.order_by("id").values_list("pk", flat=True))
        return ids[n % len(ids)] if ids else None

    def ui_path(self, user=None) -> list[dict]:
        response = (self.api if user is None else user).get(
            reverse("llmchat-api:ui-chat-messages", kwargs={"id": str(self.chat.pk)})
        )
        assert response.status_code == 200, response.content
        return response.json()

    def ui_post(self, messages, api=None, chat_id=None, **extra):
        body = {
            "id": str(self.chat.pk if chat_id is None else chat_id),
            "messages": messages,
            "trigger": "submit-message",
            **extra,
        }
        response = (api or self.api).post(reverse("llmchat-api:ui-chat"), body, format="json")
        if response.status_code == 200 and response.streaming:  # a replay may be JSON
            b"".join(response.streaming_content)
        return response

    def rest(self, method: str, name: str, body=None, api=None, **kwargs):
        client = api or self.api
        return getattr(client, method)(
            reverse(f"llmchat-api:{name}", kwargs=kwargs), body, format="json"
        )

    def refused(self, status: int, allowed=(400, 409, 429)) -> None:
        assert status in allowed, f"answered {status}"
        event(f"refused {status}")

    def python(self, fn, *args, **kwargs):
        """Call the Python API: an LLMChatError (a refusal, a failed run) is an outcome,
        anything else a failure."""
        try:
            return fn(*args, **kwargs)
        except LLMChatError as exc:
            event(f"python {type(exc).__name__}")
            return None

    def expect_branch(self, parent_id) -> None:
        """The next check: the newest prompt's path is root -> ... -> ``parent_id``."""
        self.new_prompt_parent = ("branch", parent_id, _ancestors(parent_id))

    # -- asking -----------------------------------------------------------------------
    @precondition(lambda self: not self.waiting)
    @rule(text=texts, kind=replies, junk=junk_kinds)
    def ask_python(self, text, kind, junk):
        self.script(kind, junk)
        self.python(self.chat.ask, text)

    @precondition(lambda self: not self.waiting)
    @rule(text=texts, kind=replies, junk=junk_kinds)
    def ask_a_chat_not_saved_yet(self, text, kind, junk):
        """``Chat(...).ask()``: the chat's row commits with its first prompt and run, or,
        refused, not at all (the chat unsaved again; then the user saves it)."""
        chats = Chat.objects.count()
        self.new_chat(saved=False)
        self.script(kind, junk)
        self.python(self.chat.ask, text)
        if self.chat.pk is None:
            event("an unsaved chat refused")
            assert Chat.objects.count() == chats, "a refused chat's row was stored"
            self.plan.clear()
            self.chat.save()
        else:
            assert Chat.objects.count() == chats + 1
            assert self.chat.messages.filter(role="user").count() == 1

    @precondition(lambda self: not self.waiting)
    @rule(text=texts, kind=replies, junk=junk_kinds)
    def stream_python(self, text, kind, junk):
        self.script(kind, junk)
        events = self.chat.stream(text)
        try:
            self.python(lambda: list(events))
        finally:
            events.close()

    @precondition(lambda self: not self.waiting)
    @rule(text=texts, kind=replies, junk=junk_kinds)
    def ask_rest(self, text, kind, junk):
        self.script(kind, junk)
        response = self.rest("post", "chat-messages", {"content": text}, pk=self.chat.pk)
        if response.status_code != 202:
            self.refused(response.status_code)

    @precondition(lambda self: not self.waiting)
    @rule(text=texts, kind=replies, junk=junk_kinds)
    def ask_ui(self, text, kind, junk):
        self.script(kind, junk)
        response = self.ui_post([*self.ui_path(), _ui_user(text)])
        if response.status_code != 200:
            self.refused(response.status_code)

    @precondition(lambda self: not self.waiting)
    @rule(text=texts, kind=replies, path=st.sampled_from(["rest", "ui"]))
    def retry_with_the_same_key(self, text, kind, path):
        """A request that starts a run, sent again with its key (REST: the
        ``Idempotency-Key`` header; ``ui/chat``: the user message's own id, as the AI SDK
        retries ``sendMessage``): the key went in with the run's admission, so the retry
        answers the first request's outcome and stores nothing (no prompt, no run)."""
        self.script(kind)
        if path == "rest":
            url = reverse("llmchat-api:chat-messages", kwargs={"pk": self.chat.pk})
            key = {"HTTP_IDEMPOTENCY_KEY": f"k-{next(_ui_ids)}"}
            send = lambda: self.api.post(url, {"content": text}, format="json", **key)  # noqa: E731
            ok = 202
        else:
            message = _ui_user(text)
            before = self.ui_path()
            send = lambda: self.ui_post([*before, message])  # noqa: E731
            ok = 200
        first = send()
        if first.status_code != ok:
            self.refused(first.status_code)
            return
        stored = (self.chat.runs.count(), self.chat.messages.filter(role="user").count())
        again = send()
        assert again.status_code == ok, again.content
        assert again["Idempotent-Replayed"] == "true"
        if path == "rest":
            assert again.json() == first.json()
        assert (self.chat.runs.count(), self.chat.messages.filter(role="user").count()) == stored
        event(f"retried with its key ({path})")

    # -- stopping ---------------------------------------------------------------------
    @precondition(lambda self: not self.waiting)
    @rule(text=texts, after=st.integers(min_value=1, max_value=6))
    def stop_python_stream(self, text, after):
        """Read a few events of a slow reply, then close the stream (a stop)."""
        self.plan.clear()
        self.plan.append(
            Fault(chunk_delay=0.002, reply=Reply("y" * 120, chunk_size=4, usage=USAGE))
        )
        events = self.chat.stream(text)
        try:
            for i, _ in enumerate(events):
                if i >= after:
                    break
        except LLMChatError as exc:
            event(f"python {type(exc).__name__}")
        finally:
            events.close()

    @precondition(lambda self: not self.waiting)
    @rule(text=texts)
    def stop_ui(self, text):
        """``POST ui/chat`` with a slow reply, ``POST ui/chat/{id}/stop`` mid-stream."""
        self.plan.clear()
        self.plan.append(
            Fault(chunk_delay=0.002, reply=Reply("z" * 120, chunk_size=4, usage=USAGE))
        )
        body = {
            "id": str(self.chat.pk),
            "messages": [*self.ui_path(), _ui_user(text)],
            "trigger": "submit-message",
        }
        response = self.api.post(reverse("llmchat-api:ui-chat"), body, format="json")
        if response.status_code != 200:
            self.refused(response.status_code)
            return
        stream = iter(response.streaming_content)
        seen = b""
        for chunk in stream:
            seen += chunk
            if b'"text-delta"' in seen:
                break
        stop = self.api.post(reverse("llmchat-api:ui-chat-stop", kwargs={"id": str(self.chat.pk)}))
        assert stop.status_code in (200, 409), stop.content
        b"".join(stream)

    @precondition(lambda self: not self.waiting)
    @rule(
        text=texts,
        after=st.integers(min_value=1, max_value=6),
        policy=st.sampled_from(["enqueue", "reject", "interrupt", "rollback"]),
        path=st.sampled_from(["python", "rest"]),
    )
    def double_text(self, text, after, policy, path):
        """A new prompt while a slow Python stream works, under a double-texting policy
        (``interrupt``/``rollback`` stop the stream's run; ``reject`` refuses the prompt):
        the stream read to its end, then the new prompt's run is answered in this thread
        (its task sent when the stopped run ends)."""
        self.plan.clear()
        self.plan.append(
            Fault(chunk_delay=0.002, reply=Reply("w" * 120, chunk_size=4, usage=USAGE))
        )
        self.plan.append(Reply("A second answer.", usage=USAGE))
        events = self.chat.stream(text)
        try:
            try:
                for i, _ in enumerate(events):
                    if i >= after:
                        break
            except LLMChatError as exc:  # refused (a budget spent): nothing works
                event(f"python {type(exc).__name__}")
                return
            # the prompt's task is left to the run ahead of it (inline, it would wait here)
            with mock.patch.object(runs, "send", lambda *args, **kwargs: None):
                if path == "python":
                    self.python(self.chat.ask_later, text + "!", double_texting=policy)
                else:
                    body = {"content": text + "!", "double_texting": policy}
                    response = self.rest("post", "chat-messages", body, pk=self.chat.pk)
                    if response.status_code == 409:
                        assert policy == "reject", response.json()
                        assert response.json()["code"] == "double_texting_rejected"
                        event("double texting rejected")
                    elif response.status_code != 202:  # a spending limit reached
                        self.refused(response.status_code, allowed=(429,))
            self.python(lambda: list(events))
        finally:
            events.close()
        event(f"double texting {policy}")

    @precondition(lambda self: self.waiting)
    @rule()
    def cancel_rest(self):
        response = self.rest("post", "chat-cancel", pk=self.chat.pk)
        assert response.status_code in (200, 202, 409), response.content

    # -- branches ---------------------------------------------------------------------
    @precondition(lambda self: not self.waiting)
    @rule(n=picks, text=texts, kind=replies, path=st.sampled_from(["python", "rest"]))
    def branch_from_any_message(self, n, text, kind, path):
        parent = self.pick(n, self.chat.messages.all())
        if parent is None:
            return
        self.script(kind)
        self.expect_branch(parent)
        if path == "python":
            self.python(self.chat.branch_from, parent, text)
        else:
            response = self.rest(
                "post", "chat-messages", {"content": text, "parent": parent}, pk=self.chat.pk
            )
            if response.status_code != 202:
                self.refused(response.status_code)
                self.new_prompt_parent = None

    @precondition(lambda self: not self.waiting)
    @rule(n=picks, text=texts, kind=replies)
    def branch_ui_from_a_prefix(self, n, text, kind):
        """The client sends a prefix of the path it shows, then a new message."""
        shown = self.ui_path()
        if not shown:
            return
        cut = n % (len(shown) + 1)
        self.script(kind)
        prefix = shown[:cut]
        parent = _stored_id(prefix[-1], self.chat.pk) if prefix else None
        self.expect_branch(parent)
        response = self.ui_post([*prefix, _ui_user(text)])
        if response.status_code != 200:
            self.refused(response.status_code)
            self.new_prompt_parent = None

    @precondition(lambda self: not self.waiting)
    @rule(n=picks, text=texts, kind=replies)
    def edit_ui(self, n, text, kind):
        """The SDK's edit: a user message sent again with new text, keeping its id."""
        shown = self.ui_path()
        users = [i for i, m in enumerate(shown) if m["role"] == "user"]
        if not users:
            return
        at = users[n % len(users)]
        edited = {**shown[at], "parts": [{"type": "text", "text": f"{text} (edited)"}]}
        edited.pop("metadata", None)
        self.script(kind)
        parent = _stored_id(shown[at - 1], self.chat.pk) if at else None
        self.expect_branch(parent)
        response = self.ui_post([*shown[:at], edited], messageId=shown[at]["id"])
        if response.status_code != 200:
            self.refused(response.status_code)
            self.new_prompt_parent = None

    @rule(n=picks, path=st.sampled_from(["python", "rest"]))
    def switch(self, n, path):
        target = self.pick(n, self.chat.messages.all())
        if target is None:
            return
        if path == "python":
            self.python(self.chat.switch_to, target)
        else:
            response = self.rest("post", "chat-switch", {"message": target}, pk=self.chat.pk)
            if response.status_code != 200:  # 404: a message off the tree (system, queued)
                self.refused(response.status_code, allowed=(404, 409, 429))

    @precondition(lambda self: not self.waiting)
    @rule(kind=replies, path=st.sampled_from(["python", "ui"]))
    def regenerate(self, kind, path):
        self.script(kind)
        if path == "python":
            self.python(self.chat.regenerate)
            return
        shown = self.ui_path()
        last = next((m for m in reversed(shown) if m["role"] == "assistant"), None)
        extra = {"messageId": last["id"]} if last else {}
        response = self.ui_post(shown, trigger="regenerate-message", **extra)
        if response.status_code != 200:
            self.refused(response.status_code)

    # -- decisions --------------------------------------------------------------------
    @precondition(lambda self: self.waiting)
    @rule(
        approve=st.booleans(),
        path=st.sampled_from(["python", "rest", "ui"]),
        kind=st.sampled_from(["text", "lookup", "pay"]),
    )
    def decide(self, approve, path, kind):
        calls = self.waiting_calls()
        if not calls:
            return
        call = calls[0]
        self.script(kind)
        if path == "python":
            decide = self.chat.approve if approve else self.chat.deny
            self.python(decide, call.call_id)
        elif path == "rest":
            name = "tool-call-approve" if approve else "tool-call-deny"
            response = self.rest("post", name, pk=self.chat.pk, call_id=call.call_id)
            if response.status_code != 202:
                self.refused(response.status_code)
        else:
            shown = self.ui_path()
            answered = False
            for part in shown[-1]["parts"] if shown else []:
                if part.get("state") == "approval-requested" and not answered:
                    part["state"] = "approval-responded"
                    part["approval"] = {"id": part["approval"]["id"], "approved": approve}
                    answered = True
            response = self.ui_post(shown)
            if response.status_code != 200:
                self.refused(response.status_code)

    # -- a process that died ----------------------------------------------------------
    @precondition(lambda self: not self.waiting)
    @rule(text=texts)
    def kill_and_recover(self, text):
        """A run dies mid-reply (its process gone: the stream is never closed, its lease
        runs out); ``llmchat_recover`` resumes it; the dead process then wakes and may store
        nothing."""
        self.plan.clear()
        self.plan += [
            Fault(chunk_delay=0.002, reply=Reply("w" * 80, chunk_size=4, usage=USAGE)),
            Reply("Recovered answer.", usage=USAGE),
        ]
        events = self.chat.stream(text)
        try:
            for _ in zip(range(3), events, strict=False):
                pass
        except LLMChatError as exc:
            event(f"python {type(exc).__name__}")
            events.close()
            return
        run = self.chat.runs.order_by("-id").first()
        if run is None or run.status != Run.RUNNING:
            events.close()
            return
        Run.objects.filter(pk=run.pk).update(
            lease_expires_at=timezone.now() - timezone.timedelta(seconds=1)
        )
        try:
            call_command("llmchat_recover", "--inline", stdout=io.StringIO())
            before = _rows(self.chat)
        finally:
            try:
                events.close()  # the dead process wakes up
            except LLMChatError:
                pass
        assert _rows(self.chat) == before, "the process that lost its run stored something"

    # -- spending ---------------------------------------------------------------------
    @rule(calls=st.sampled_from([None, 0, 0.5, 1, 2.5, 10]))
    def change_budget(self, calls):
        if calls is None:
            Limit.objects.filter(user=self.owner).delete()
            self.budget = None
        else:
            spent = limits.spend(self.owner.pk, runs=False)["usd_per_day"]
            self.budget = (spent + CALL_COST * Decimal(str(calls))).quantize(Decimal("1e-10"))
            Limit.objects.update_or_create(user=self.owner, defaults={"usd_per_day": self.budget})

    # -- data at rest -----------------------------------------------------------------
    @precondition(lambda self: not self.encrypted)
    @rule(
        title=st.sampled_from(["Mine", "Trip plans", ""]),
        path=st.sampled_from(["python", "rest"]),
    )
    def rename(self, title, path):
        """The user renames the chat (any time, a run in progress or not); an empty title
        makes it untitled again."""
        if path == "rest":
            response = self.rest("patch", "chat-detail", {"title": title}, pk=self.chat.pk)
            assert response.status_code == 200, response.content
        else:
            mine = Chat.objects.get(pk=self.chat.pk)
            mine.title = title
            mine.save()
        self.users_title = title or None

    @rule()
    def encryption_on(self):
        if self.override is not None:  # on already: one override, which teardown disables
            return
        self.override = override_settings(LLMCHAT={**self.env.base, "ENCRYPTION_KEYS": [KEY]})
        self.override.enable()
        self.encrypted = True

    @rule()
    def erase(self):
        try:
            lifecycle.erase_user(self.owner)
        except lifecycle.ErasureRefused:
            assert self.waiting, "erasure refused with no run in progress"
            event("erasure refused")
            return
        assert not Chat.objects.filter(user=self.owner).exists()
        self.new_chat()

    @rule(text=texts)
    def other_user_tries_my_chat(self, text):
        """Another user names this chat's number in ``ui/chat``: a 404, as everywhere else
        in the API; the chat stays as it was and no chat is made."""
        before = _rows(self.chat)
        chats = Chat.objects.count()
        self.plan.clear()
        response = self.ui_post([_ui_user(text)], api=self.other_api)
        assert response.status_code == 404, (
            f"another user's chat number answered {response.status_code}"
        )
        shown = self.other_api.get(
            reverse("llmchat-api:ui-chat-messages", kwargs={"id": str(self.chat.pk)})
        )
        assert shown.status_code == 404, f"another user's chat was shown ({shown.status_code})"
        assert _rows(self.chat) == before and Chat.objects.count() == chats

    # -- the invariants ---------------------------------------------------------------
    @invariant()
    def the_rules_hold(self):
        """Every rule, checked after every step (one invariant: the step's rows are read
        once)."""
        RulesMachine.steps += 1
        self.path = [m for m in self.chat.transcript() if m.role != "system"]
        self.check_one_path()
        self.check_requests_are_the_path()
        self.check_one_usage_row_per_request()
        self.check_each_reply_names_the_model_that_answered()
        self.check_every_call_on_the_path_has_one_result()
        self.check_no_chat_left_busy()
        self.check_every_face_shows_the_same_path()
        self.check_a_users_title_stays()
        self.check_the_search_index_holds_every_plain_message()
        self.check_only_a_run_its_caller_answers_is_admitted_without_the_disk()
        self.waiting = Run.objects.filter(chat=self.chat, status=Run.AWAITING_APPROVAL).exists()

    def check_a_users_title_stays(self):
        """A title the user gave is never replaced; an automatic one is the first
        prompt's (LLMCHAT["TITLES"] is its default here), written after a reply."""
        title, source = Chat.objects.filter(pk=self.chat.pk).values_list("title", "title_source")[0]
        if self.users_title is not None:
            assert (title, source) == (self.users_title, "user")
        elif source == "prompt":
            first = Message.objects.filter(chat=self.chat, role="user").order_by("position", "id")
            assert title in {prompt_title(m.content) for m in first}
            # written with a reply (in its transaction), never before one is stored
            assert Message.objects.filter(chat=self.chat, role="assistant").exists()
        else:
            assert (title, source) == ("", "")

    def check_one_path(self):
        assert_one_path(self.chat)
        path = self.path
        on_path = set(
            Message.objects.filter(chat=self.chat, on_path=True)
            .exclude(role="system")
            .values_list("pk", flat=True)
        )
        assert {m.pk for m in path} == on_path
        previous = None
        for m in path:
            assert m.parent_id == previous, (
                f"message {m.pk} follows {m.parent_id}, not {previous} (path "
                f"{[x.pk for x in path]})"
            )
            previous = m.pk
        leaf = self.chat.active_leaf
        assert (leaf.pk if leaf else None) == (path[-1].pk if path else None)
        if self.new_prompt_parent is not None:
            _, parent, ancestors = self.new_prompt_parent
            self.new_prompt_parent = None
            newest = Message.objects.filter(chat=self.chat, role="user").order_by("-id").first()
            if newest is not None and newest.parent_id == parent and newest.on_path:
                ids = [m.pk for m in path]
                at = ids.index(newest.pk)
                assert ids[:at] == ancestors, (
                    f"the prompt after {parent} has the path {ids[:at]}, not {ancestors}"
                )

    def check_requests_are_the_path(self):
        requests = self.server.requests
        new = requests[self.requests_seen :]
        self.requests_seen = len(requests)
        for request in requests:
            assert MARKER not in request.raw_body.decode("utf-8", "replace"), (
                "the provider was sent ciphertext"
            )
        if not new:
            return
        usages = list(Usage.objects.order_by("id"))
        if len(usages) != len(requests):
            return  # one_usage_row_per_request says so
        path = self.path
        ids = [m.pk for m in path]
        for request, usage in zip(new, usages[-len(new) :], strict=True):
            if usage.chat_id != self.chat.pk:
                continue
            if usage.message_id in ids:
                expected = stored(path[: ids.index(usage.message_id)])
            elif request is new[-1] and usage.message_id is None:
                expected = stored(path)
            else:
                continue  # a reply since replaced (regenerated, branched away)
            assert said(request) == expected, "the provider was not sent the active path"

    def check_one_usage_row_per_request(self):
        requests = len(self.server.requests)
        rows = list(Usage.objects.order_by("id"))
        assert len(rows) == requests, f"{len(rows)} usage rows for {requests} provider requests"
        for row in rows:
            assert row.status != Usage.PENDING, f"usage {row.pk} left pending"
            if row.status == Usage.FAILED and row.input_tokens is row.output_tokens is None:
                continue  # refused before any answer came: the vendor charged nothing
            assert row.input_tokens is not None, f"usage {row.pk} ({row.status}) has no tokens"
            assert row.total_cost is not None, f"usage {row.pk} ({row.status}) has no cost"
        mine = [r for r in rows if r.user_id == self.owner.pk]
        day = limits.spend(self.owner.pk, runs=False)
        start = day["windows"]["day"][0]
        today = [r for r in mine if r.created_at >= start]
        total = sum((r.total_cost or Decimal(0) for r in today), Decimal(0))
        assert day["usd_per_day"] == total.quantize(Decimal("1e-10"))
        new = rows[self.usage_seen :]
        self.usage_seen = len(rows)
        if self.budget is None:
            return
        for row in new:
            if row.user_id != self.owner.pk:
                continue
            before = sum((r.total_cost or Decimal(0) for r in today if r.pk < row.pk), Decimal(0))
            assert before < self.budget, (
                f"a provider call was made with {before} USD spent of a {self.budget} budget"
            )

    def check_each_reply_names_the_model_that_answered(self):
        """A reply's provider and model are those of the attempt that produced it (a
        fallback's, when the chat's model failed)."""
        answered = Usage.objects.filter(
            operation="chat",
            status__in=[Usage.SUCCEEDED, Usage.CANCELLED],
            message__role="assistant",
        )
        wrong = answered.exclude(
            message__model_id=F("model_id"), message__provider=F("provider")
        ).values_list("message_id", "provider", "model_id")
        assert not wrong, f"replies not naming the model that answered them: {list(wrong)}"

    def check_every_call_on_the_path_has_one_result(self):
        path = self.path
        results: dict[int, int] = {}
        for m in path:
            if m.role == "tool":
                results[m.parent_tool_call_id] = results.get(m.parent_tool_call_id, 0) + 1
        waiting = {c.pk for c in self.waiting_calls()}
        approved_waiting = set()
        run = self.chat.runs.filter(status=Run.AWAITING_APPROVAL).first()
        if run is not None:
            approved_waiting = set(
                ToolCall.objects.filter(message__run=run).values_list("pk", flat=True)
            )
        for m in path:
            for call in m.tool_calls.all():
                if call.pk in waiting or call.pk in approved_waiting:
                    continue
                assert results.get(call.pk, 0) == 1, (
                    f"tool call {call.call_id} ({call.name}) on the path has "
                    f"{results.get(call.pk, 0)} results; the path: {_shape(path)}"
                )

    def check_the_search_index_holds_every_plain_message(self):
        """The search's index, as a search sees it (SQLite: the newest messages indexed
        first), holds every message stored in plain text, with its content as it is now
        (branches rolled back, erased, encrypted), and no ciphertext."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM llmchat_message WHERE content NOT LIKE %s", [MARKER + "%"]
            )
            plain = {row[0] for row in cursor.fetchall()}
            if connection.vendor == "postgresql":
                cursor.execute("SELECT id FROM llmchat_message WHERE search_vector IS NOT NULL")
                assert {row[0] for row in cursor.fetchall()} == plain
                return
            if connection.vendor != "sqlite":
                return
            catch_up_search_index()
            cursor.execute("SELECT id FROM llmchat_message_fts_docsize")
            assert {row[0] for row in cursor.fetchall()} == plain
            # FTS5's own check; with no ciphertext in the table, against every row's content
            cursor.execute("SELECT count(*) FROM llmchat_message")
            every = cursor.fetchone()[0] == len(plain)
            cursor.execute(
                "INSERT INTO llmchat_message_fts(llmchat_message_fts, rank) "
                "VALUES ('integrity-check', %s)",
                [1 if every else 0],
            )

    def check_no_chat_left_busy(self):
        busy = list(Run.objects.filter(status__in=(Run.QUEUED, Run.RUNNING)).values("pk", "status"))
        assert busy == [], f"runs left unfinished: {busy}"
        for chat in Chat.objects.all():
            waiting = chat.runs.filter(status=Run.AWAITING_APPROVAL).exists()
            assert chat.status == ("awaiting_approval" if waiting else "idle"), (
                f"chat {chat.pk} is {chat.status!r}"
            )
            # let go of by every run that ended (one awaiting a decision may hold it)
            assert (
                chat.active_run_id is None
                or chat.runs.filter(pk=chat.active_run_id, status=Run.AWAITING_APPROVAL).exists()
            ), f"chat {chat.pk} still held by run {chat.active_run_id}"

    def check_only_a_run_its_caller_answers_is_admitted_without_the_disk(self):
        """PostgreSQL: an admission's commit skips the wait for the disk only when its
        caller runs the run itself (``p_start``); that run's end, which waits, came in the
        same step (no run is left unfinished: :meth:`check_no_chat_left_busy`). A run
        handed to a worker (a ``202``, ``ask_later``) is admitted durably."""
        for start, synchronous in self.admissions:
            assert synchronous or start, "a run for somebody else admitted without the disk"
        self.admissions.clear()

    def check_every_face_shows_the_same_path(self):
        python = [m.pk for m in self.path]
        rest: list[int] = []
        page = reverse("llmchat-api:chat-messages", kwargs={"pk": self.chat.pk})
        while page:
            response = self.api.get(page)
            assert response.status_code == 200, response.content
            body = response.json()
            rest += [m["id"] for m in body["results"] if m["role"] != "system"]
            page = body.get("next")
        assert rest == python, "REST shows another path than Python"
        ui = [_stored_id(m, self.chat.pk) for m in self.ui_path()]
        wanted = [e if isinstance(e, int) else e[1] for e in _ui_groups(self.path)]
        assert ui == wanted, f"ui/chat shows {ui}, the path is {wanted}"

    def teardown(self):
        if self._watch_admissions in connection.execute_wrappers:
            connection.execute_wrappers.remove(self._watch_admissions)
        gc.collect()  # streams dropped without close() end now, while their rows exist
        if self.override is not None:
            self.override.disable()
        self.server.responder = None


# -- helpers ----------------------------------------------------------------------------
_ui_ids = iter(range(1, 10**9))


def _ui_user(text: str) -> dict:
    return {"id": f"u{next(_ui_ids)}", "role": "user", "parts": [{"type": "text", "text": text}]}


def _stored_id(ui_message: dict, chat_id: int) -> int | None:
    """The stored message a ``UIMessage`` stands for: an assistant's last stored message,
    a user message by its client id or ``msg-<pk>``."""
    metadata = ui_message.get("metadata") or {}
    if ui_message["role"] == "assistant":
        return metadata.get("storedMessageId")
    found = ui_message["id"]
    # an edited message keeps the id the client knew (its own, or ``msg-<pk>``)
    rows = Message.objects.filter(chat_id=chat_id, role="user", on_path=True).order_by("-id")
    for row in rows:
        if (row.raw or {}).get("ui_message_id") == found:
            return row.pk
    if found.startswith("msg-") and found[4:].isdigit():
        return int(found[4:])
    return None


def _ui_groups(path) -> list[int]:
    """The stored ids ``ui/chat`` shows for the path: each user message, then the replies
    after it as one assistant message (named by its last assistant message; tool results
    are its parts)."""
    out: list = []
    for m in path:
        if m.role == "user":
            out.append(m.pk)
        elif m.role == "assistant":
            if out and not isinstance(out[-1], int):
                out[-1] = ("run", m.pk)
            else:
                out.append(("run", m.pk))
    return out


def _shape(path) -> list[str]:
    """The path in short: ``pk:role<-parent`` (a reply's calls in brackets)."""
    out = []
    for m in path:
        calls = [c.name for c in m.tool_calls.all()] if m.role == "assistant" else []
        out.append(f"{m.pk}:{m.role}<-{m.parent_id}" + (f"{calls}" if calls else ""))
    return out


def _ancestors(parent_id) -> list[int]:
    out: list[int] = []
    while parent_id is not None:
        out.append(parent_id)
        parent_id = Message.objects.values_list("parent_id", flat=True).get(pk=parent_id)
    return out[::-1]


def _rows(chat) -> list:
    return list(
        Message.objects.filter(chat_id=chat.pk)
        .order_by("id")
        .values_list("pk", "parent_id", "on_path", "content")
    )


def _client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def _wipe() -> None:
    """Each sequence starts on empty tables."""
    from django.apps import apps

    for model in reversed(list(apps.get_app_config("django_llmchat").get_models())):
        if model._meta.db_table == "llmchat_llm_model":
            continue
        model._base_manager.all().delete()
    Token.objects.all().delete()
    get_user_model().objects.all().delete()


def replay_command() -> str:
    env = [f"HYPOTHESIS_PROFILE={PROFILE}"]
    if os.environ.get("DATABASE_URL"):
        env.append(f"DATABASE_URL={shlex.quote(os.environ['DATABASE_URL'])}")
    return " ".join(env) + " python -m pytest tests/test_rules_model.py -p no:cacheprovider"


def rule_names() -> list[str]:
    return sorted(
        name
        for name, value in vars(RulesMachine).items()
        if getattr(value, "hypothesis_stateful_rule", None) is not None
    )


def test_the_rules_hold_after_any_sequence(fake_llm, monkeypatch, record_property):
    base = fake_llm.configure(
        *MODEL,
        TASKS_EAGER_WITHOUT_BROKER="inline",
        MAX_RETRIES=1,
        TASK_RETRY_MAX_WAIT=0.0,
        # spending limits on, none by default: a budget is the user's Limit row
        LIMITS={"default": {}},
        FALLBACKS={FALLS_BACK: [MODEL[1]]},
    )
    # a run's lease is never renewed behind the test's back (a killed run's must run out)
    monkeypatch.setattr(runs_execution, "_private_database", lambda: True)
    RulesMachine.env = Env(fake_llm, base)
    profile = settings.get_profile(f"llmchat-model-{PROFILE}")
    test = get_state_machine_test(RulesMachine, settings=profile)
    command = replay_command()
    if not profile.derandomize:
        chosen = int(os.environ.get("LLMCHAT_MODEL_SEED") or random.randrange(2**32))
        test = seed(chosen)(test)
        command = f"LLMCHAT_MODEL_SEED={chosen} {command}"
    RulesMachine.sequences = RulesMachine.steps = 0
    started = time.monotonic()
    try:
        test()
    except BaseException as exc:
        exc.add_note(f"Replay this failure with: {command}")
        raise
    finally:
        figures = (
            f"{RulesMachine.sequences} sequences, {RulesMachine.steps} steps, "
            f"{len(rule_names())} rules, {time.monotonic() - started:.0f} s ({PROFILE})"
        )
        record_property("figures", figures)
        print(f"model-based test: {figures}")
