"""Chat titles (django_llmchat.chats.titles, LLMCHAT["TITLES"]): an untitled chat is titled after
its first reply, from the first prompt or by a title model billed on the ledger
(``operation="title"``); a title of the user's (Python, REST, admin) is never replaced,
also when it is set while the title model is answering."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from django_llmchat.chats.titles import model_title, prompt_title, title_options
from django_llmchat.checks import check_settings
from django_llmchat.errors import BudgetExceededError
from django_llmchat.events import RunFinished
from django_llmchat.models import Chat, Usage
from django_llmchat.testing import Fault, Reply

pytestmark = pytest.mark.django_db(transaction=True)

MODEL, TITLER = "gpt-4.1-mini", "gpt-4.1-nano"
LONG = (
    "  Plan   a three-day walking trip through the Scottish Highlands with hostels and "
    "trains\nsecond line is ignored"
)


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create_user("titles-owner", password="pw")


@pytest.fixture
def chat(fake_llm, user):
    fake_llm.configure("openai", MODEL)
    return Chat.objects.create(user=user, provider="openai", model_id=MODEL)


def titled(fake_llm, **extra):
    return fake_llm.configure("openai", MODEL, TITLES={"model": TITLER}, **extra)


def title_requests(fake_llm) -> list:
    return [r for r in fake_llm.requests if r.body.get("model") == TITLER]


# -- the title of a prompt -----------------------------------------------------------------
@pytest.mark.django_db(transaction=False)
def test_prompt_title_is_the_first_line_cut_at_a_word():
    title = prompt_title(LONG)
    assert title == "Plan a three-day walking trip through the Scottish…"
    assert len(title) <= 60
    assert prompt_title("\n\n  Short   one \n more") == "Short one"
    assert prompt_title("   \n ") == ""
    assert prompt_title("x" * 80) == "x" * 59 + "…"
    exact = "word " * 11 + "abcd"  # 59 characters: no cut
    assert prompt_title(exact) == exact.strip()


@pytest.mark.django_db(transaction=False)
def test_model_title_drops_labels_quotes_and_the_final_period():
    assert model_title('Title: "Highland walking trip."\nextra') == "Highland walking trip"
    assert model_title("**Trains and hostels**") == "Trains and hostels"
    assert model_title("  \n") == ""


# -- Python --------------------------------------------------------------------------------
def test_an_untitled_chat_is_titled_from_its_first_prompt_by_default(chat, fake_llm):
    fake_llm.script(Reply("Day one: Fort William."), Reply("Sure."))
    chat.ask(LONG)
    assert chat.title == "Plan a three-day walking trip through the Scottish…"
    assert chat.title_source == "prompt"
    stored = Chat.objects.get(pk=chat.pk)
    assert (stored.title, stored.title_source) == (chat.title, "prompt")
    assert len(fake_llm.requests) == 1  # no provider call for it
    assert not Usage.objects.filter(operation="title").exists()
    chat.ask("Now something else entirely")  # the second reply keeps the first title
    assert Chat.objects.get(pk=chat.pk).title == stored.title


def test_a_title_model_writes_the_title_on_its_own_usage_row(chat, fake_llm):
    titled(fake_llm)
    fake_llm.script(
        Reply("Day one: Fort William.", usage={"input_tokens": 20, "output_tokens": 6}),
        Reply('"Highland Walking Trip"', usage={"input_tokens": 55, "output_tokens": 4}),
    )
    reply = chat.ask(LONG)
    assert reply.content == "Day one: Fort William."
    assert (chat.title, chat.title_source) == ("Highland Walking Trip", "model")
    stored = Chat.objects.get(pk=chat.pk)
    assert (stored.title, stored.title_source) == ("Highland Walking Trip", "model")
    [request] = title_requests(fake_llm)
    body = json.dumps(request.body)
    assert "Plan" in body and "Day one: Fort William." in body and "title" in body.lower()
    usage = Usage.objects.get(chat=chat, operation="title")
    assert usage.status == "succeeded" and usage.model_id == TITLER
    assert (usage.input_tokens, usage.output_tokens, usage.estimated) == (55, 4, False)
    assert usage.total_cost is not None and usage.total_cost > 0
    assert usage.user_id == chat.user_id and usage.run_id == chat.last_run.pk
    assert usage.message_id is None
    # the reply's own attempt is apart
    assert Usage.objects.get(chat=chat, operation="chat").message_id == reply.pk
    assert Usage.objects.filter(chat=chat).count() == 2


def test_the_title_comes_after_the_terminal_event_of_a_stream(chat, fake_llm):
    titled(fake_llm)
    fake_llm.script(Reply("Answer."), Reply("Streamed Title"))
    events = chat.stream("What is a stream?")
    for event in events:
        if isinstance(event, RunFinished):
            # the reply is complete and told; the title is not written yet
            assert event.status == "succeeded"
            assert Chat.objects.get(pk=chat.pk).title == ""
            assert not title_requests(fake_llm)
    assert Chat.objects.get(pk=chat.pk).title == "Streamed Title"


def test_a_failing_title_model_leaves_a_failed_attempt_and_the_prompt_title(chat, fake_llm):
    titled(fake_llm, MAX_RETRIES=0)
    fake_llm.script(
        Reply("Day one."), Fault(status=500, body={"error": {"message": "title model down"}})
    )
    reply = chat.ask(LONG)
    assert reply.content == "Day one." and chat.last_run.status == "succeeded"
    stored = Chat.objects.get(pk=chat.pk)
    assert stored.title == prompt_title(LONG) and stored.title_source == "prompt"
    usage = Usage.objects.get(chat=chat, operation="title")
    assert usage.status == "failed" and "title model down" in usage.error
    assert usage.model_id == TITLER and usage.run_id == chat.last_run.pk
    assert not Usage.objects.filter(chat=chat, status="pending").exists()


def test_an_empty_title_answer_falls_back_on_the_prompt(chat, fake_llm):
    titled(fake_llm)
    fake_llm.script(Reply("Day one."), Reply("  "))
    chat.ask("Trains in Scotland")
    assert (chat.title, chat.title_source) == ("Trains in Scotland", "prompt")
    assert Usage.objects.get(chat=chat, operation="title").status == "succeeded"


def test_the_title_call_counts_toward_the_limits(chat, fake_llm):
    """50 tokens of reply leave room under 100; the title's 55 do not: the next prompt
    is refused, which it would not be without the title on the ledger."""
    titled(fake_llm, LIMITS={"default": {"tokens_per_day": 100}})
    fake_llm.script(
        Reply("First.", usage={"input_tokens": 40, "output_tokens": 10}),
        Reply("Limited Title", usage={"input_tokens": 30, "output_tokens": 25}),
    )
    chat.ask("A first question")
    assert chat.title == "Limited Title"
    other = Chat.objects.create(user=chat.user, provider="openai", model_id=MODEL)
    with pytest.raises(BudgetExceededError):
        other.ask("Over the limit now")


def test_over_a_limit_the_title_comes_from_the_prompt_without_a_call(chat, fake_llm):
    titled(fake_llm, LIMITS={"default": {"tokens_per_day": 100}})
    fake_llm.script(Reply("A long answer.", usage={"input_tokens": 90, "output_tokens": 30}))
    chat.ask("Whisky distilleries on Islay")
    assert (chat.title, chat.title_source) == ("Whisky distilleries on Islay", "prompt")
    assert not title_requests(fake_llm)
    assert not Usage.objects.filter(operation="title").exists()


def test_titles_off_leave_the_chat_untitled(chat, fake_llm):
    fake_llm.configure("openai", MODEL, TITLES=False)
    fake_llm.script(Reply("Hello."))
    chat.ask("Hi there")
    stored = Chat.objects.get(pk=chat.pk)
    assert (stored.title, stored.title_source) == ("", "")
    assert title_options() is None
    fake_llm.configure("openai", MODEL, TITLES=None)
    assert title_options() is None


def test_a_titled_chat_is_never_retitled(chat, fake_llm):
    titled(fake_llm)
    chat.title = "My Highlands plan"
    chat.save()
    assert chat.title_source == "user"
    fake_llm.script(Reply("Sure."))
    chat.ask(LONG)
    assert not title_requests(fake_llm)
    stored = Chat.objects.get(pk=chat.pk)
    assert (stored.title, stored.title_source) == ("My Highlands plan", "user")


def test_a_title_set_in_python_is_the_users(user, fake_llm):
    fake_llm.configure("openai", MODEL)
    made = Chat.objects.create(user=user, title="Given")
    assert made.title_source == "user"
    assert Chat.objects.create(user=user).title_source == ""
    chosen = Chat.objects.create(user=user, title="Imported", title_source="model")
    assert chosen.title_source == "model"
    loaded = Chat.objects.get(pk=chosen.pk)
    loaded.save()  # unchanged: still the model's
    assert Chat.objects.get(pk=chosen.pk).title_source == "model"
    loaded.title = "Renamed"
    loaded.save(update_fields=["title"])
    assert Chat.objects.get(pk=chosen.pk).title_source == "user"
    loaded.title = ""  # cleared: untitled again, the next reply titles it
    loaded.save()
    assert Chat.objects.filter(pk=chosen.pk).values_list("title", "title_source")[0] == ("", "")


def test_a_rename_while_the_title_model_answers_is_kept(chat, fake_llm):
    """The race: the user renames the chat while the title request is on the wire; the
    title's conditional UPDATE finds a title of the user's and writes nothing."""
    titled(fake_llm)

    def rename_then_answer(request):
        mine = Chat.objects.get(pk=chat.pk)
        mine.title = "Renamed meanwhile"
        mine.save()
        return Reply("Model Title")

    fake_llm.script(Reply("Day one."), rename_then_answer)
    chat.ask(LONG)
    assert title_requests(fake_llm)
    stored = Chat.objects.get(pk=chat.pk)
    assert (stored.title, stored.title_source) == ("Renamed meanwhile", "user")
    assert chat.title == ""  # the instance was not told a title that was not written
    assert Usage.objects.get(chat=chat, operation="title").status == "succeeded"


def test_a_stale_instance_saved_after_the_title_keeps_it(chat, fake_llm):
    stale = Chat.objects.get(pk=chat.pk)
    fake_llm.script(Reply("Hello."))
    chat.ask("Hostels near Glencoe")
    stale.params = {"temperature": 0.2}
    stale.save()
    stored = Chat.objects.get(pk=chat.pk)
    assert (stored.title, stored.title_source) == ("Hostels near Glencoe", "prompt")
    assert stored.params == {"temperature": 0.2}


def test_a_refreshed_instance_is_not_taken_for_a_rename(chat, fake_llm):
    other = Chat.objects.get(pk=chat.pk)
    fake_llm.script(Reply("Hello."))
    chat.ask("Ferries to Skye")
    other.refresh_from_db()
    other.save()
    assert Chat.objects.get(pk=chat.pk).title_source == "prompt"


# -- REST -----------------------------------------------------------------------------------
@pytest.fixture
def api(user):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def test_rest_shows_the_title_and_its_source_and_a_patch_is_the_users(api, chat, fake_llm):
    titled(fake_llm)
    fake_llm.script(Reply("Day one."), Reply("Highland Trip"))
    detail = reverse("llmchat-api:chat-detail", kwargs={"pk": chat.pk})
    response = api.post(
        reverse("llmchat-api:chat-messages", kwargs={"pk": chat.pk}),
        {"content": LONG},
        format="json",
        HTTP_ACCEPT="text/event-stream",
    )
    body = b"".join(response.streaming_content).decode()
    assert "run_finished" in body
    data = api.get(detail).json()
    assert (data["title"], data["title_source"]) == ("Highland Trip", "model")
    listed = api.get(reverse("llmchat-api:chat-list")).json()["results"][0]
    assert (listed["title"], listed["title_source"]) == ("Highland Trip", "model")
    # the source is read-only: a PATCH of it changes nothing of it
    patched = api.patch(detail, {"title": "Mine now"}, format="json")
    assert patched.status_code == 200, patched.content
    assert (patched.json()["title"], patched.json()["title_source"]) == ("Mine now", "user")
    assert Chat.objects.get(pk=chat.pk).title_source == "user"
    refused = api.patch(detail, {"title_source": "model"}, format="json")
    assert refused.status_code in (200, 400)
    assert Chat.objects.get(pk=chat.pk).title_source == "user"
    # a new reply keeps the user's title
    fake_llm.script(Reply("Day two."))
    api.post(
        reverse("llmchat-api:chat-messages", kwargs={"pk": chat.pk}),
        {"content": "And day two?"},
        format="json",
        HTTP_ACCEPT="text/event-stream",
    ).getvalue()
    assert Chat.objects.get(pk=chat.pk).title == "Mine now"
    assert len(title_requests(fake_llm)) == 1


def test_rest_creates_a_titled_chat_as_the_users(api, fake_llm):
    fake_llm.configure("openai", MODEL)
    response = api.post(reverse("llmchat-api:chat-list"), {"title": "Given"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["title_source"] == "user"
    untitled = api.post(reverse("llmchat-api:chat-list"), {}, format="json").json()
    assert (untitled["title"], untitled["title_source"]) == ("", "")


# -- admin ----------------------------------------------------------------------------------
def test_admin_shows_the_source_and_a_title_saved_there_is_the_users(
    client, chat, fake_llm, django_user_model
):
    fake_llm.script(Reply("Hello."))
    chat.ask("Castles of Aberdeenshire")
    admin = django_user_model.objects.create_superuser("titles-admin", password="pw")
    client.force_login(admin)
    listing = client.get(reverse("admin:django_llmchat_chat_changelist"))
    assert listing.status_code == 200
    page = listing.content.decode()
    assert "Castles of Aberdeenshire" in page and ">prompt<" in page
    change = reverse("admin:django_llmchat_chat_change", args=[chat.pk])
    form = client.get(change)
    assert form.status_code == 200 and "prompt" in form.content.decode()
    data = {
        "title": "Castles (mine)",
        "user": chat.user_id,
        "provider": chat.provider,
        "model_id": chat.model_id,
        "agent": "",
        "retention_days": "",
        "params": "{}",
        "schema": "null",
        "tools": "[]",
        "context": "{}",
        "history": "null",
        "client_id": "",
    }
    response = client.post(change, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    stored = Chat.objects.get(pk=chat.pk)
    assert (stored.title, stored.title_source) == ("Castles (mine)", "user")


# -- the system check -----------------------------------------------------------------------
@pytest.mark.django_db(transaction=False)
@pytest.mark.parametrize(
    ("value", "ids"),
    [
        (True, []),
        (False, []),
        (None, []),
        ("gpt-4.1-nano", []),
        ({"model": "gpt-4.1-nano", "provider": "openai", "prompt": "Name it."}, []),
        ("", ["llmchat.E064"]),
        (3, ["llmchat.E064"]),
        ({"provider": "openai"}, ["llmchat.E064"]),
        ({"model": "m", "colour": "red"}, ["llmchat.E064"]),
        ({"model": "m", "prompt": ""}, ["llmchat.E064"]),
        ({"model": "m", "provider": "nowhere"}, ["llmchat.E065"]),
    ],
)
def test_the_check_names_a_bad_titles_setting(settings, value, ids):
    settings.LLMCHAT = {"TITLES": value}
    found = [e for e in check_settings() if e.id in ("llmchat.E064", "llmchat.E065")]
    assert [e.id for e in found] == ids
    for error in found:
        assert 'LLMCHAT["TITLES"]' in error.msg and "TITLES" in error.hint


@pytest.mark.django_db(transaction=False)
def test_a_configured_provider_passes_the_check(settings):
    settings.LLMCHAT = {
        "PROVIDERS": {"local": {"api": "chat_completions", "base_url": "http://127.0.0.1:1/v1"}},
        "TITLES": {"model": "small", "provider": "local"},
    }
    assert not [e for e in check_settings() if e.id in ("llmchat.E064", "llmchat.E065")]
    call_command("check", databases=[])  # the project's own settings pass
