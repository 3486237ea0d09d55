"""``manage.py llmchat_recover``: sends the tasks of the runs nobody works on."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from django_llmchat.models import Chat
from tests.factories import taken_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def inline(fake_llm):
    """The fake provider, with tasks run in the committing thread and no retry waits."""
    fake_llm.configure(
        "openai",
        "gpt-4.1-mini",
        TASKS_EAGER_WITHOUT_BROKER="inline",
        MAX_RETRIES=0,
        TASK_RETRY_MAX_WAIT=0.0,
    )
    return fake_llm


def transcript(chat):
    return [(m.role, m.content) for m in chat.transcript()]


def _dead_run(chat, prompt=None, **fields):
    """A run a worker took and then died on: running, its lease run out."""
    return taken_run(chat, prompt, lease=-1, worker="gone:1", **fields)


def test_llmchat_recover_command(inline, capsys):
    inline.script("A")
    chat = Chat.objects.create()
    prompt = chat.add_message(role="user", content="Q")
    _dead_run(chat, prompt)
    call_command("llmchat_recover", "--inline")
    assert transcript(chat) == [("user", "Q"), ("assistant", "A")]
    assert "1 run" in capsys.readouterr().out
    call_command("llmchat_recover")
    assert "no run" in capsys.readouterr().out.lower()
