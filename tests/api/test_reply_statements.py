"""The statements of one request that starts a run, on each path, as the database sees
them: ``POST chats/{id}/messages/`` answering ``202`` (the run queued for a worker, the
request measured alone) and ``POST ui/chat`` (the reply streamed in the response, so its
run is part of the request). Each list is exact, per database (PostgreSQL admits a run in
one call of ``llmchat_run_enqueue_v5`` and stores the reply in one call of
``llmchat_run_store_last_step_v3``; SQLite takes the statements); so are its ``BEGIN``
and ``COMMIT`` (on PostgreSQL, also counted on the wire, from libpq's trace: a statement
outside a transaction commits alone and sends none). A process that served a request
before is measured (its per-process lookups done: the functions found, the model's
registry row read); ``docs/benchmarks.md`` has the lists before and after."""

from __future__ import annotations

import re
import uuid
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat.models import Chat, IdempotencyKey, Message, Run
from django_llmchat.tasks import complete_chat
from django_llmchat.testing import Reply
from tests.celery_app import make_app
from tests.wire import Wire

from .conftest import url
from .test_ui_chat import chunks, post, user

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "gpt-4.1-mini"
PG = connection.vendor == "postgresql"


def statements(ctx) -> list[str]:
    """Each statement named as tests/runs/test_pg.py names them (the verb and its table,
    or the function a ``SELECT`` calls); ``BEGIN``, ``COMMIT``, ``SAVEPOINT`` and
    ``RELEASE SAVEPOINT`` as they are."""
    found = []
    for q in ctx.captured_queries:
        sql = q["sql"].strip()
        head = sql.split()[0].upper()
        if head in ("BEGIN", "COMMIT", "ROLLBACK"):
            found.append(head)
        elif head in ("SAVEPOINT", "RELEASE"):
            found.append("RELEASE SAVEPOINT" if head == "RELEASE" else "SAVEPOINT")
        else:
            name = re.findall(r"(?:INTO|UPDATE|FROM)\s+\"?(\w+)\"?", sql)
            found.append(head + " " + (name[-1] if head == "SELECT" else name[0]))
    return found


class Measured:
    """The statements (and, on PostgreSQL, the wire) of the block."""

    def __enter__(self):
        self.ctx = CaptureQueriesContext(connection).__enter__()
        self.wire = Wire().__enter__()
        return self

    def __exit__(self, *exc):
        self.wire.__exit__(*exc)
        self.ctx.__exit__(*exc)
        self.list = statements(self.ctx)

    def commits(self) -> int:
        """The transactions committed: as captured, and on PostgreSQL as sent."""
        captured = self.list.count("COMMIT")
        assert self.list.count("BEGIN") == captured
        if PG:
            assert self.wire.count("COMMIT") == captured, self.wire.sent
            assert self.wire.count("BEGIN") == captured, self.wire.sent
        return captured


def expect(pg: list[str], sqlite: list[str]) -> list[str]:
    return pg if PG else sqlite


def rest(api, chat, content="And Italy?", **headers):
    return api.post(
        url("chat-messages", pk=chat.pk), {"content": content}, format="json", **headers
    )


def ui(api, chat_id, *messages, **headers):
    """``POST ui/chat`` as the AI SDK's transport sends it (``headers``: HTTP ones)."""
    body = {"id": str(chat_id), "messages": list(messages), "trigger": "submit-message"}
    return api.post(url("ui-chat"), body, format="json", **headers)


def answered(got: list) -> dict:
    """The streamed reply as the client sends it back."""
    text = "".join(c["delta"] for c in got if c["type"] == "text-delta")
    return {
        "id": got[0]["messageId"],
        "role": "assistant",
        "parts": [{"type": "text", "text": text}],
    }


@contextmanager
def current_app(app):
    """Make ``app`` the current Celery app, so ``complete_chat.delay`` sends through it
    (as tests/integration/conftest.py does)."""
    from celery import _state

    previous = _state.get_current_app()
    app.set_current()
    try:
        yield app
    finally:
        previous.set_current()


def worker(response) -> Run:
    """What a worker does with the task a ``202`` sent: the run answered (here, after
    the request)."""
    body = response.json()
    complete_chat.apply(args=(body["run"]["chat"],), kwargs={"run_id": body["run"]["id"]})
    return Run.objects.get(pk=body["run"]["id"])


@pytest.fixture
def served(api, owner, fake_llm):
    """A process that served both routes before (another chat of the user): the fake
    provider answers; a ``202``'s task goes to a broker (Celery's in-memory transport,
    a queue of this test), for :func:`worker` to answer after the request."""
    fake_llm.configure("openai", MODEL, TASKS_EAGER_WITHOUT_BROKER=False)
    with current_app(make_app("memory://", f"statements-{uuid.uuid4().hex}")):
        fake_llm.script("warm", "warm")
        other = Chat.objects.create(user=owner, model_id=MODEL, provider="openai")
        chunks(post(api, other.pk, user("warm up")))
        accepted = rest(api, other, "warm up")
        assert accepted.status_code == 202 and worker(accepted).status == Run.SUCCEEDED
        yield fake_llm


# -- POST chats/{id}/messages/ (202) ---------------------------------------------------------
REST_202 = expect(
    pg=[
        "SELECT authtoken_token",
        "SELECT llmchat_chat",
        "SELECT llmchat_run_enqueue_v5",
        "SELECT llmchat_message",
    ],
    sqlite=[
        "SELECT authtoken_token",
        "SELECT llmchat_chat",
        "BEGIN",
        "UPDATE llmchat_chat",
        "SELECT llmchat_run",
        "SELECT llmchat_message",
        "INSERT llmchat_message",
        "INSERT llmchat_run",
        "UPDATE llmchat_chat",
        "COMMIT",
        "SELECT llmchat_message",
    ],
)


def test_a_202_on_a_chat_that_answered_before(api, chat, served):
    """The token (with its user), the chat (with the access check); the admission: on
    PostgreSQL one call (the prompt, its run, the chat queued, under the chat's lock), on
    SQLite its statements in one transaction (the chat's lock, the chat's head run, the
    active leaf, the prompt, the run, the chat's status); the prompt's siblings (the
    message's ``siblings``). The run is answered as admitted (its task went to a worker
    on commit): no read of it. PostgreSQL commits nothing itself (the call commits
    alone)."""
    served.script("Paris.", "Rome.")
    assert worker(rest(api, chat, "Capital of France?")).status == Run.SUCCEEDED
    with Measured() as measured:
        response = rest(api, chat)
    assert response.status_code == 202, response.content
    assert measured.list == REST_202
    assert measured.commits() == (0 if PG else 1)
    body = response.json()
    assert body["run"]["status"] == "queued" and body["run"]["attempt"] == 0
    assert body["run"]["tokens"] == {} and body["run"]["cost"] == {}
    assert body["message"]["siblings"] == [body["message"]["id"]]
    assert body["run"]["prompt"] == body["message"]["id"]
    assert worker(response).status == Run.SUCCEEDED
    assert [m.content for m in chat.transcript()][-2:] == ["And Italy?", "Rome."]


def test_a_202_on_a_chats_first_message(api, chat, served):
    """The same statements as on a chat that answered before: nothing of the chat is
    read twice."""
    served.script("Paris.")
    with Measured() as measured:
        response = rest(api, chat, "Capital of France?")
    assert response.status_code == 202, response.content
    assert measured.list == REST_202
    assert measured.commits() == (0 if PG else 1)
    assert response.json()["message"]["parent"] is None


def test_a_202_with_an_idempotency_key(api, chat, served):
    """The key's read (any age: one row at most), then the admission with the key's row
    (no savepoint, no DELETE: there is no expired row): on PostgreSQL in its one call,
    which commits alone, on SQLite in its transaction; the prompt's siblings; the answer
    stored with the key (an UPDATE: the body is made after the admission). A retry is
    answered from the key: its token, chat and key reads, and nothing written."""
    served.script("Paris.")
    key = {"HTTP_IDEMPOTENCY_KEY": uuid.uuid4().hex}
    with Measured() as measured:
        response = rest(api, chat, "Capital of France?", **key)
    assert response.status_code == 202, response.content
    assert measured.list == expect(
        pg=[
            "SELECT authtoken_token",
            "SELECT llmchat_chat",
            "SELECT llmchat_idempotency_key",
            "SELECT llmchat_run_enqueue_v5",  # the key's row in the call
            "SELECT llmchat_message",
            "UPDATE llmchat_idempotency_key",
        ],
        sqlite=[
            "SELECT authtoken_token",
            "SELECT llmchat_chat",
            "SELECT llmchat_idempotency_key",
            "BEGIN",
            "UPDATE llmchat_chat",
            "SELECT llmchat_run",
            "SELECT llmchat_message",
            "INSERT llmchat_message",
            "INSERT llmchat_run",
            "INSERT llmchat_idempotency_key",
            "UPDATE llmchat_chat",
            "COMMIT",
            "SELECT llmchat_message",
            "UPDATE llmchat_idempotency_key",
        ],
    )
    assert measured.commits() == (0 if PG else 1)
    assert worker(response).status == Run.SUCCEEDED
    with Measured() as again:
        retried = rest(api, chat, "Capital of France?", **key)
    assert retried.status_code == 202 and retried.json() == response.json()
    assert again.list == [
        "SELECT authtoken_token",
        "SELECT llmchat_chat",
        "SELECT llmchat_idempotency_key",
    ]
    assert chat.runs.count() == 1


def test_an_expired_key_is_deleted_with_the_new_one_stored(api, chat, served, settings):
    """A key past its window: its read finds the old row, the admission deletes it before
    storing the key again (in the same transaction)."""
    served.script("Paris.", "Rome.")
    key = {"HTTP_IDEMPOTENCY_KEY": uuid.uuid4().hex}
    assert worker(rest(api, chat, "Capital of France?", **key)).status == Run.SUCCEEDED
    old = IdempotencyKey.objects.get(chat=chat)
    IdempotencyKey.objects.filter(pk=old.pk).update(created_at=old.created_at - timedelta(days=2))
    with Measured() as measured:
        response = rest(api, chat, "Capital of France?", **key)
    assert response.status_code == 202, response.content
    admission = measured.list[measured.list.index("BEGIN") + 1 : measured.list.index("COMMIT")]
    assert admission.count("DELETE llmchat_idempotency_key") == 1
    assert admission.index("DELETE llmchat_idempotency_key") < admission.index(
        "INSERT llmchat_idempotency_key"
    )
    assert IdempotencyKey.objects.get(chat=chat).pk != old.pk and chat.runs.count() == 2


# -- POST ui/chat ----------------------------------------------------------------------------
UI_REPLY = expect(
    pg=["SELECT llmchat_run_store_last_step_v3", "SELECT llmchat_run", "SELECT llmchat_message"],
    sqlite=[
        "BEGIN",
        "INSERT llmchat_message",
        "UPDATE llmchat_usage",
        "UPDATE llmchat_run",
        "UPDATE llmchat_chat",
        "COMMIT",
        "SELECT llmchat_run",
        "SELECT llmchat_message",
    ],
)
"""The reply's part of a ``ui/chat`` request: on PostgreSQL the reply stored with the
run's end in one call, on SQLite the reply's transaction (its first write, the reply, locks
the database: no lock statement before it; the chat's status, active run, updated_at
and, on its first reply, its title in one UPDATE, which reads back the status: the run
queued next is read only when there is one); then the run's totals and last
message (``RunFinished``, the ``finish`` chunk's metadata) and the chat's UI tree (the
reply's alternatives, one query)."""

UI_ADMISSION = expect(
    pg=["SELECT llmchat_run_enqueue_v5"],
    sqlite=[
        "BEGIN",
        "UPDATE llmchat_chat",
        "SELECT llmchat_run",
        "SELECT llmchat_message",
        "INSERT llmchat_message",
        "INSERT llmchat_run",
        "INSERT llmchat_idempotency_key",
        "UPDATE llmchat_chat",
        "SELECT llmchat_message",  # the path the request was built on, still the chat's
        "INSERT llmchat_usage",  # the first attempt, pending
        "COMMIT",
    ],
)
"""The admission of a ``ui/chat`` prompt with its key (the client's message id, or the
header): the prompt (the client's message id in its ``raw``) and its run, the key's row
with the stream's outcome, and the first attempt's pending row, committed together: on
PostgreSQL in one call (which commits alone), on SQLite its statements."""


def test_ui_chat_continuing_a_chat(api, chat, served):
    """The token, the chat, the key's read (the new message's id is the key), the chat's
    UI tree (one query: the messages sent before the new one are a path of the chat);
    the admission (:data:`UI_ADMISSION`); the reply (:data:`UI_REPLY`). Two commits: on
    SQLite the admission's and the reply's transactions, on PostgreSQL their two calls
    (each commits alone: no ``BEGIN``)."""
    served.script("Paris.", "Rome.")
    first = user("Capital of France?")
    got = chunks(ui(api, chat.pk, first))
    second = user("And Italy?")
    with Measured() as measured:
        got = chunks(ui(api, chat.pk, first, answered(got), second))
    reads = ["SELECT authtoken_token", "SELECT llmchat_chat", "SELECT llmchat_idempotency_key"]
    assert measured.list == [*reads, "SELECT llmchat_message", *UI_ADMISSION, *UI_REPLY]
    assert measured.commits() == (0 if PG else 2)
    assert "".join(c["delta"] for c in got if c["type"] == "text-delta") == "Rome."
    prompt = Message.objects.get(chat=chat, content="And Italy?")
    assert prompt.raw == {"ui_message_id": second["id"]}
    assert IdempotencyKey.objects.filter(chat=chat, key=second["id"]).count() == 1


def test_ui_chat_starting_a_new_chat(api, owner, served):
    """The token, the chat looked up by the client's id (none), then one transaction:
    the chat made (in a savepoint: a concurrent first request's chat is read instead),
    the key's read, the admission in its own savepoint (:data:`UI_ADMISSION`'s statements
    there), committed with the chat; no tree read and no transcript read (a chat just
    made has none). The reply: :data:`UI_REPLY`, the chat's title from the prompt with
    it (PostgreSQL: in the reply's call; SQLite: in its transaction)."""
    served.script("Paris.")
    with Measured() as measured:
        got = chunks(ui(api, "fresh-chat", user("Capital of France?")))
    admitted = [s for s in UI_ADMISSION if s not in ("BEGIN", "COMMIT")]
    reply = list(UI_REPLY)  # the chat's title from the prompt with the reply
    assert measured.list == [
        "SELECT authtoken_token",
        "SELECT llmchat_chat",
        "BEGIN",
        "SAVEPOINT",
        "INSERT llmchat_chat",
        "RELEASE SAVEPOINT",
        "SELECT llmchat_idempotency_key",
        "SAVEPOINT",
        *admitted,
        "RELEASE SAVEPOINT",
        "COMMIT",
        *reply,
    ]
    assert measured.commits() == (1 if PG else 2)
    made = Chat.objects.get(client_id="fresh-chat")
    assert made.user == owner and got[-1]["type"] == "finish"
    assert [m.content for m in made.transcript()] == ["Capital of France?", "Paris."]


def test_ui_chat_with_an_idempotency_key(api, chat, served):
    """The header's key instead of the message's id: the same statements as a chat
    continued (its tree read: an empty prefix still asks whether the chat's path is
    empty); on PostgreSQL, the run's first transcript read before its admission (the chat
    is new to the process: the call checks the path it read). A retry with the key
    replays: nothing admitted."""
    served.script("Paris.")
    key = {"HTTP_IDEMPOTENCY_KEY": uuid.uuid4().hex}
    message = user("Capital of France?")
    with Measured() as measured:
        chunks(ui(api, chat.pk, message, **key))
    reads = ["SELECT authtoken_token", "SELECT llmchat_chat", "SELECT llmchat_idempotency_key"]
    cold = ["SELECT llmchat_message"]  # the chat is new to the process: its transcript
    assert measured.list == [*reads, "SELECT llmchat_message", *cold, *UI_ADMISSION, *UI_REPLY]
    assert measured.commits() == (0 if PG else 2)
    assert IdempotencyKey.objects.get(chat=chat).key == key["HTTP_IDEMPOTENCY_KEY"]
    assert Message.objects.get(chat=chat, role="user").raw == {"ui_message_id": message["id"]}
    retried = ui(api, chat.pk, message, **key)
    assert retried.status_code == 200 and chat.runs.count() == 1


def test_a_202_answered_in_the_request_shows_the_run_as_it_ended(api, chat, fake_llm):
    """With tasks run inline (no broker), the run is answered when the admission commits,
    inside the request: the ``202``'s run is read once more, its totals in the same
    statement (the request's last read of the run)."""
    fake_llm.configure("openai", MODEL, TASKS_EAGER_WITHOUT_BROKER="inline")
    fake_llm.script(Reply("Paris.", usage={"input_tokens": 7, "output_tokens": 2}))
    with Measured() as measured:
        response = rest(api, chat, "Capital of France?")
    assert response.status_code == 202, response.content
    run = response.json()["run"]
    assert run["status"] == "succeeded" and run["attempt"] == 1
    assert run["tokens"]["input_tokens"] == 7 and run["tokens"]["output_tokens"] == 2
    assert measured.list[-2:] == ["SELECT llmchat_run", "SELECT llmchat_message"]
    totals = measured.ctx.captured_queries[-2]["sql"]
    assert "SUM" in totals.upper() and "llmchat_usage" in totals
