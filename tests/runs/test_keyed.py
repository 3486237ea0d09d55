"""A request's idempotency key admitted with its run (``runs.keyed(row)``), on every
database: on PostgreSQL in the admission's call (``llmchat_run_enqueue_v5``), elsewhere in
its transaction. The key's row names the run and its chat, commits with them or not at
all; a key stored already fails the admission (its unique constraint) and nothing of it
is stored."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from django_llmchat import runs
from django_llmchat.models import Chat, IdempotencyKey, Message, Run
from tests.factories import prompt_of

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("bystanders")]


@pytest.fixture
def owner():
    return get_user_model().objects.create_user("keyholder")


def _key(owner, chat, key="k-1", **fields) -> IdempotencyKey:
    return IdempotencyKey(
        user=owner, chat=chat, scope="messages", key=key, request_hash="h", **fields
    )


def test_the_key_is_stored_with_the_run_it_admits(chat, owner):
    """The key's row: the run admitted, the chat, the answer given beforehand (a stream's),
    stored once (``row.pk`` set), with the prompt and the run."""
    row = _key(owner, chat, response_status=200, response_body={"stream": "ui"})
    with runs.keyed(row):
        run, _ = runs.enqueue(chat, prompt_of(chat, "hello"))
    assert row.pk is not None and not row._state.adding
    stored = IdempotencyKey.objects.get(pk=row.pk)
    assert (stored.run_id, stored.chat_id, stored.user_id) == (run.pk, chat.pk, owner.pk)
    assert (stored.scope, stored.key, stored.request_hash) == ("messages", "k-1", "h")
    assert stored.response_status == 200 and stored.response_body == {"stream": "ui"}
    assert Run.objects.get(pk=run.pk).prompt.content == "hello"


def test_a_key_stored_already_fails_the_admission_and_stores_nothing(chat, owner):
    """The same key, stored by a request before: ``IntegrityError``, and neither the prompt
    nor the run nor a second key row is stored."""
    with runs.keyed(_key(owner, chat)):
        runs.enqueue(chat, prompt_of(chat, "first"))
    before = (Message.objects.count(), Run.objects.count())
    with pytest.raises(IntegrityError), runs.keyed(_key(owner, chat)):
        runs.enqueue(chat, prompt_of(chat, "again"))
    assert (Message.objects.count(), Run.objects.count()) == before
    assert IdempotencyKey.objects.filter(chat=chat).count() == 1


def test_inside_a_transaction_a_failed_key_leaves_it_usable(chat, owner):
    """In the caller's transaction, the admission that fails on its key rolls back its own
    savepoint: the caller's transaction goes on (reads the key stored before)."""
    with runs.keyed(_key(owner, chat)):
        runs.enqueue(chat, prompt_of(chat, "first"))
    with transaction.atomic():
        with pytest.raises(IntegrityError), runs.keyed(_key(owner, chat)):
            runs.enqueue(chat, prompt_of(chat, "again"))
        assert IdempotencyKey.objects.filter(chat=chat).count() == 1


def test_a_new_chats_key_names_the_chat_made_with_it(owner):
    """An unsaved chat's first prompt: the key names the chat the admission made."""
    chat = Chat(user=owner, provider="openai", model_id="gpt-4.1-mini")
    row = _key(owner, None)
    with runs.keyed(row):
        run, _ = runs.enqueue(chat, prompt_of(chat, "hello"))
    assert chat.pk is not None
    assert IdempotencyKey.objects.filter(pk=row.pk, chat=chat, run=run).exists()


def test_without_a_key_nothing_is_stored_beside_the_run(chat):
    runs.enqueue(chat, prompt_of(chat, "hello"))
    assert not IdempotencyKey.objects.exists()
