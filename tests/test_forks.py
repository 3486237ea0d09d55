"""``chat.fork(message)`` (django_llmchat.chats.forks): the path copied into a new chat of the
same user, tool calls with their results, reasoning, shared attachment files, no usage;
cut before unanswered tool calls; encrypted copies; SQLite and PostgreSQL alike."""

from __future__ import annotations

from decimal import Decimal

import pytest
from cryptography.fernet import Fernet
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_llmchat.chats.lifecycle import purge_chats
from django_llmchat.errors import ArgumentError
from django_llmchat.models import Attachment, Chat, Message, ToolCall, Usage

pytestmark = pytest.mark.django_db

K1 = Fernet.generate_key().decode()


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("forker", password="pw")


@pytest.fixture
def chat(user):
    chat = Chat.objects.create(
        user=user,
        title="Weather",
        model_id="gpt-4.1-mini",
        provider="openai",
        params={"temperature": 0.3},
        tools=["weather"],
        context={"city": "Oslo"},
        retention_days=30,
    )
    chat.with_instructions("Be brief.")
    build_transcript(chat, 2)
    return chat


def build_transcript(chat: Chat, turns: int) -> None:
    """``turns`` rounds of prompt (with a file) -> tool call -> result -> answer, each
    reply with a usage row and reasoning."""
    for i in range(turns):
        chat.add_message("user", f"question {i}", attachments=[("doc.txt", b"abc")])
        step = chat.add_message(
            "assistant",
            "",
            finish_reason="tool_calls",
            model_id=chat.model_id,
            thinking_text="Let me look.",
            thinking_signature="sig",
        )
        call = ToolCall.objects.create(
            message=step, call_id=f"call_{i}", name="weather", arguments={"i": i}
        )
        chat.add_message("tool", f"sunny {i}", parent_tool_call=call)
        answer = chat.add_message(
            "assistant",
            f"It is sunny ({i}).",
            finish_reason="stop",
            model_id=chat.model_id,
            thinking_text="Sunny.",
            input_tokens=7,
        )
        for message in (step, answer):
            Usage.objects.create(
                chat=chat,
                message=message,
                provider=chat.provider,
                model_id=chat.model_id,
                status="succeeded",
                input_tokens=100,
                output_tokens=20,
                total_cost=Decimal("0.0001"),
            )


def shape(chat: Chat) -> list[tuple]:
    return [
        (m.role, m.content, m.thinking_text, [(c.call_id, c.arguments) for c in m.tool_calls.all()])
        for m in chat.transcript()
    ]


def valid(chat: Chat) -> bool:
    """Every tool call of the chat has its result, in the chat."""
    calls = ToolCall.objects.filter(chat=chat)
    return all(Message.objects.filter(parent_tool_call=c, chat=chat).exists() for c in calls)


def test_a_fork_at_the_last_message_copies_the_whole_path(chat, user):
    leaf = chat.active_leaf
    fork = chat.fork(leaf)
    assert fork.pk != chat.pk and fork.user == user
    assert (fork.forked_from, fork.forked_from_message) == (chat, leaf)
    assert shape(fork) == shape(chat)
    assert [m.role for m in fork.transcript()][:2] == ["system", "user"]
    assert fork.transcript().first().content == "Be brief."
    for name in ("title", "model_id", "provider", "params", "tools", "context", "retention_days"):
        assert getattr(fork, name) == getattr(chat, name)
    # the tree is its own: parents, results and calls point inside the fork
    copied = list(fork.messages.all())
    assert {m.parent.chat_id for m in copied if m.parent_id} == {fork.pk}
    assert all(m.parent_tool_call.chat_id == fork.pk for m in copied if m.parent_tool_call_id)
    assert all(m.on_path for m in copied)
    assert valid(fork)
    assert fork.active_leaf.content == leaf.content
    # the same stored files, new rows
    source_files = sorted(Attachment.objects.filter(message__chat=chat).values_list("file"))
    fork_files = sorted(Attachment.objects.filter(message__chat=fork).values_list("file"))
    assert fork_files == source_files and len(fork_files) == 2
    assert not Attachment.objects.filter(
        message__chat=fork, pk__in=Attachment.objects.filter(message__chat=chat)
    ).exists()
    # nothing paid is copied
    assert not Usage.objects.filter(chat=fork).exists()
    assert fork.tokens.input_tokens is None and fork.tokens.output_tokens is None
    assert fork.cost().total is None
    assert Chat.objects.with_totals().get(pk=fork.pk).total_cost is None
    assert chat.cost().total == Decimal("0.0004")  # the source keeps its costs
    assert Message.objects.filter(chat=chat).count() == 9  # the source is untouched


def test_a_fork_in_the_middle_ends_at_that_message(chat):
    second_prompt = chat.transcript().filter(role="user")[1]
    fork = chat.fork(second_prompt.pk)  # an id works as well
    assert [m.content for m in fork.transcript()] == [
        "Be brief.",
        "question 0",
        "",
        "sunny 0",
        "It is sunny (0).",
        "question 1",
    ]
    assert fork.forked_from_message == second_prompt
    assert valid(fork)


def test_a_fork_at_unanswered_tool_calls_ends_before_the_message_that_made_them(chat):
    call_message = chat.transcript().filter(role="assistant", tool_calls__isnull=False)[1]
    fork = chat.fork(call_message)
    assert [m.content for m in fork.transcript()][-1] == "question 1"
    assert fork.forked_from_message.content == "question 1"
    assert not ToolCall.objects.filter(chat=fork, call_id="call_1").exists()
    assert valid(fork)


def test_a_fork_between_two_results_of_one_step_is_cut_before_the_step(user):
    chat = Chat.objects.create(user=user, model_id="gpt-4.1-mini", provider="openai")
    chat.add_message("user", "Weather in Oslo and Rome?")
    step = chat.add_message("assistant", "", finish_reason="tool_calls")
    a = ToolCall.objects.create(message=step, call_id="a", name="weather", arguments={"c": "O"})
    b = ToolCall.objects.create(message=step, call_id="b", name="weather", arguments={"c": "R"})
    first = chat.add_message("tool", "cold", parent_tool_call=a)
    chat.add_message("tool", "warm", parent_tool_call=b)
    fork = chat.fork(first)
    assert [m.content for m in fork.transcript()] == ["Weather in Oslo and Rome?"]
    assert valid(fork) and not ToolCall.objects.filter(chat=fork).exists()
    # at the second result, the step is whole
    whole = chat.fork(chat.active_leaf)
    assert [m.content for m in whole.transcript()][-2:] == ["cold", "warm"] and valid(whole)


def test_a_chat_starting_with_unanswered_calls_has_nothing_to_fork(user):
    chat = Chat.objects.create(user=user, model_id="gpt-4.1-mini", provider="openai")
    step = chat.add_message("assistant", "", finish_reason="tool_calls")
    ToolCall.objects.create(message=step, call_id="a", name="weather", arguments={})
    with pytest.raises(ArgumentError, match="nothing to fork"):
        chat.fork(step)
    assert Chat.objects.count() == 1


def test_a_fork_of_another_branch_holds_that_branch_as_its_path(chat):
    first_answer = chat.transcript().filter(role="assistant", finish_reason="stop")[0]
    other = Message.objects.create(
        chat=chat, role="user", content="And tomorrow?", parent=first_answer, on_path=False
    )
    reply = Message.objects.create(
        chat=chat, role="assistant", content="Rain.", parent=other, on_path=False
    )
    fork = chat.fork(reply)
    assert [m.content for m in fork.transcript()][-3:] == [
        "It is sunny (0).",
        "And tomorrow?",
        "Rain.",
    ]
    assert fork.messages.filter(on_path=False).count() == 0
    assert fork.messages.count() == 7  # instructions + 4 + 2: the other branch's tail stays


@pytest.mark.parametrize("which", ["other chat", "system", "unknown", "queued", "summary"])
def test_a_message_of_no_branch_of_the_chat_is_refused(chat, user, which):
    from django_llmchat.models.message import QUEUED_POSITION

    if which == "other chat":
        other = Chat.objects.create(user=user)
        message = other.add_message("user", "hi")
    elif which == "system":
        message = chat.messages.get(role="system")
    elif which == "unknown":
        message = 10**9
    elif which == "queued":
        message = Message.objects.create(
            chat=chat, role="user", content="later", position=QUEUED_POSITION + 1
        )
    else:
        message = Message.objects.create(
            chat=chat, role="system", content="summary", summary_until=chat.active_leaf
        )
    with pytest.raises(ArgumentError, match="no message of a branch"):
        chat.fork(message)
    assert Chat.objects.filter(forked_from=chat).count() == 0


def test_a_fork_takes_the_summaries_of_its_messages(chat):
    covered = chat.transcript().filter(role="assistant", finish_reason="stop")[0]
    Message.objects.create(chat=chat, role="system", content="Sunny so far.", summary_until=covered)
    fork = chat.fork(chat.active_leaf)
    summary = fork.messages.get(summary_until__isnull=False)
    assert summary.content == "Sunny so far." and summary.summary_until.chat_id == fork.pk
    assert summary.summary_until.content == "It is sunny (0)."


def test_the_source_going_leaves_the_fork_and_its_files(chat, django_capture_on_commit_callbacks):
    stored = default_storage.save("llmchat/ab/doc.txt", ContentFile(b"abc"))
    Attachment.objects.filter(message__chat=chat).update(file=stored)
    fork = chat.fork(chat.active_leaf)
    with django_capture_on_commit_callbacks(execute=True):
        purge_chats(Chat.objects.filter(pk=chat.pk))
    fork.refresh_from_db()
    assert fork.forked_from is None and fork.forked_from_message is None
    assert default_storage.exists(stored)  # the fork's rows still name it
    assert (
        Attachment.objects.get(message__chat=fork, message__content="question 0").read() == b"abc"
    )
    with django_capture_on_commit_callbacks(execute=True):
        purge_chats(Chat.objects.filter(pk=fork.pk))
    assert not default_storage.exists(stored)  # the last row gone: the file goes


def test_a_fork_costs_the_same_queries_whatever_the_path(user):
    def queries(turns: int) -> int:
        chat = Chat.objects.create(user=user, model_id="gpt-4.1-mini", provider="openai")
        build_transcript(chat, turns)
        leaf = chat.active_leaf
        with CaptureQueriesContext(connection) as ctx:
            chat.fork(leaf)
        return len(ctx)

    assert queries(2) == queries(8)  # 33 messages: one INSERT on SQLite too


def test_a_fork_of_an_encrypted_chat_is_encrypted(user):
    with override_settings(LLMCHAT={"ENCRYPTION_KEYS": [K1]}):
        chat = Chat.objects.create(user=user, model_id="gpt-4.1-mini", provider="openai")
        build_transcript(chat, 1)
        fork = chat.fork(chat.active_leaf)
        assert shape(fork) == shape(chat)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT content, thinking_text FROM llmchat_message WHERE chat_id = %s "
                "AND content <> ''",
                [fork.pk],
            )
            rows = cursor.fetchall()
            cursor.execute("SELECT arguments FROM llmchat_tool_call WHERE chat_id = %s", [fork.pk])
            arguments = [row[0] for row in cursor.fetchall()]
    assert rows and all(content.startswith("llmchat-fernet:") for content, _ in rows)
    assert all(t.startswith("llmchat-fernet:") for _, t in rows if t)
    assert arguments and all("llmchat-fernet:" in str(a) for a in arguments)
    assert "question 0" not in str(rows)


def test_the_fork_can_be_asked_on(chat, fake_llm):
    from django_llmchat.testing import Reply

    fake_llm.configure("openai_compatible", "gpt-4.1-mini", MAX_RETRIES=0)
    fork = chat.fork(chat.active_leaf)
    Chat.objects.filter(pk=fork.pk).update(provider="openai_compatible")
    fork.refresh_from_db()
    fake_llm.script(Reply("Still sunny."))
    assert fork.ask("And now?").content == "Still sunny."
    sent = fake_llm.last_request.body["messages"]
    assert [m["role"] for m in sent][:3] == ["system", "user", "assistant"]
    assert sent[-1] == {"role": "user", "content": "And now?"}
    assert chat.messages.count() == 9  # the source did not move


# -- the admin ------------------------------------------------------------------------------
@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser("fork-admin", password="pw"))
    return client


def change_url(chat) -> str:
    from django.urls import reverse

    return reverse("admin:django_llmchat_chat_change", args=[chat.pk])


def test_admin_shows_where_a_fork_came_from_read_only(chat, admin_client, settings):
    settings.LLMCHAT = {**settings.LLMCHAT, "PROVIDERS": {"openai": {"api_key": "k"}}}
    second_prompt = chat.transcript().filter(role="user")[1]
    fork = chat.fork(second_prompt)
    html = admin_client.get(change_url(fork)).content.decode()
    # a fieldset of its own, open, before the settings: the source chat and the message
    assert html.index(">Forked from</h2>") < html.index(">Settings</h2>")
    assert f'<a href="{change_url(chat)}">Weather</a>' in html
    at = f"?message={second_prompt.pk}#message-{second_prompt.pk}"
    assert f'<a href="{change_url(chat)}{at}">#{second_prompt.pk} user: question 1</a>' in html
    assert "another branch" not in html
    # read-only: shown as text, no input; a save does not change the links
    assert 'name="forked_from"' not in html and 'name="forked_from_message"' not in html
    form = {"title": "Weather, again", "user": fork.user_id, "provider": fork.provider}
    form |= {"model_id": fork.model_id, "params": "{}", "schema": "null", "tools": "[]"}
    form |= {"context": "{}", "history": "null", "forked_from": fork.pk}
    response = admin_client.post(change_url(fork), form)
    assert response.status_code == 302, response.context["adminform"].form.errors
    fork.refresh_from_db()
    assert fork.title == "Weather, again"
    assert (fork.forked_from, fork.forked_from_message) == (chat, second_prompt)
    # the link opens the source's transcript on the page of that message
    source = admin_client.get(f"{change_url(chat)}{at}").content.decode()
    assert f'id="message-{second_prompt.pk}"' in source

    # a chat that is no fork has no such fieldset
    assert "Forked from" not in admin_client.get(change_url(chat)).content.decode()


def test_admin_says_when_the_forked_message_is_off_the_active_path_or_gone(chat, admin_client):
    first_answer = chat.transcript().filter(role="assistant", finish_reason="stop")[0]
    other = Message.objects.create(
        chat=chat, role="user", content="And tomorrow?", parent=first_answer, on_path=False
    )
    fork = chat.fork(other)
    html = admin_client.get(change_url(fork)).content.decode()
    assert f"#{other.pk} user: And tomorrow?</a> (in another branch than the active one)" in html

    purge_chats(Chat.objects.filter(pk=chat.pk))  # the source deleted: the fork stays
    fork.refresh_from_db()
    assert (fork.forked_from_id, fork.forked_from_message_id) == (None, None)
    page = admin_client.get(change_url(fork))
    assert page.status_code == 200 and "Forked from" not in page.content.decode()
