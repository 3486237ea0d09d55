"""The run package with the package's models routed to another database: a project's
``DATABASE_ROUTERS`` sending ``django_llmchat`` to its own alias. A run asked, streamed
and answered through the Python API writes its rows there and nothing on ``default``;
a run read back is a row of that database (its relations read there too)."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_llmchat.db.prepared import database_of
from django_llmchat.models import Chat, Message, Run, Usage
from django_llmchat.runs import base
from django_llmchat.testing import Reply

pytestmark = pytest.mark.django_db(databases=["default", "routed"], transaction=True)

ROUTED = "routed"


class PackageRouter:
    """``django_llmchat`` on the ``routed`` database; a model-less question (``None``)
    left to Django's default rules, as a project's router does."""

    def _route(self, model, **hints):
        if model is not None and model._meta.app_label == "django_llmchat":
            return ROUTED
        return None

    db_for_read = _route
    db_for_write = _route

    def allow_relation(self, obj1, obj2, **hints):
        return True

    def allow_migrate(self, db, app_label, **hints):
        return True


@pytest.fixture
def routed(fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    with override_settings(DATABASE_ROUTERS=[f"{__name__}.PackageRouter"]):
        yield fake_llm


def _nothing_on_default():
    for model in (Chat, Message, Run, Usage):
        assert not model.objects.using("default").exists(), model


def test_a_run_writes_its_rows_on_the_routed_database(routed):
    routed.script(Reply("Hello."), Reply("Again."))
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    assert database_of(chat) == ROUTED
    reply = chat.ask("Hi")
    assert reply.content == "Hello."
    list(chat.stream("Once more"))
    runs = list(Run.objects.using(ROUTED).filter(chat_id=chat.pk).order_by("id"))
    assert [r.status for r in runs] == [Run.SUCCEEDED, Run.SUCCEEDED]
    assert all(r.attempt == 1 and r.worker for r in runs)
    assert Usage.objects.using(ROUTED).filter(run__in=runs).count() == 2
    assert [m.content for m in Message.objects.using(ROUTED).filter(chat_id=chat.pk)] == [
        "Hi",
        "Hello.",
        "Once more",
        "Again.",
    ]
    _nothing_on_default()


def test_a_head_read_back_is_a_row_of_the_routed_database(routed):
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    run = Run.objects.create(chat=chat)
    head = base._head(chat.pk)
    assert head.pk == run.pk and database_of(head) == ROUTED
    assert head.chat == chat and list(head.usages.all()) == []
    _nothing_on_default()
