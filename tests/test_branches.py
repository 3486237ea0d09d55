"""The conversation as a tree: parents, the active path, regenerate, branch and switch,
against the loopback provider (the requests it received are the proof of what was sent)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat import runs
from django_llmchat.errors import ArgumentError, ChatBusyError
from django_llmchat.loop.transcript import forget_history, load_history
from django_llmchat.models import Chat, Message, branches
from django_llmchat.testing import Reply, ToolCall
from django_llmchat.testing.invariants import assert_one_path
from django_llmchat.tools import tool

pytestmark = pytest.mark.django_db(transaction=True)


@tool
def city_population(city: str) -> str:
    """Tells how many people live in a city"""
    return f"{city}: 3 million people"


@pytest.fixture
def chat(fake_llm):
    fake_llm.configure("anthropic", "claude-haiku-4-5")
    return Chat.objects.create(provider="anthropic", model_id="claude-haiku-4-5")


def sent(fake_llm) -> list[tuple[str, str]]:
    """``(role, text)`` of every message of the last request the provider received."""
    out = []
    for m in fake_llm.last_request.body["messages"]:
        content = m["content"]
        if isinstance(content, list):
            content = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
        out.append((m["role"], content))
    return out


def texts(chat) -> list[str]:
    return [m.content for m in chat.transcript()]


def valid_tree(chat) -> None:
    """Every on-path message of the tree follows the one before it on the path."""
    path = [m for m in chat.transcript() if m.role != "system"]
    assert [m.parent_id for m in path] == [None] + [m.pk for m in path[:-1]]


def test_messages_follow_one_another(chat, fake_llm):
    chat.with_instructions("Be brief.")
    fake_llm.script(Reply("Paris."), Reply("Berlin."))
    first = chat.ask("Capital of France?")
    second = chat.ask("And Germany?")
    system, q1, a1, q2, a2 = chat.transcript()
    assert system.parent_id is None and system.on_path
    assert (q1.parent_id, a1.parent_id, q2.parent_id, a2.parent_id) == (
        None,
        q1.pk,
        a1.pk,
        q2.pk,
    )
    assert (first.pk, second.pk) == (a1.pk, a2.pk)
    assert chat.active_leaf == a2
    assert list(a2.alternatives()) == [a2] and list(a2.siblings) == []


def test_tool_results_follow_their_call_one_after_another(chat, fake_llm):
    chat.with_tools(city_population)
    fake_llm.script(
        Reply(
            tool_calls=[
                ToolCall("city_population", {"city": "Paris"}),
                ToolCall("city_population", {"city": "Rome"}),
            ]
        ),
        Reply("Both big."),
    )
    chat.ask("How big are Paris and Rome?")
    valid_tree(chat)
    assert [m.role for m in chat.transcript()] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [m.content for m in chat.transcript().filter(role="tool")] == [
        "Paris: 3 million people",
        "Rome: 3 million people",
    ]


def test_a_prompt_cannot_follow_a_reply_that_made_tool_calls(chat, fake_llm):
    """Its results follow it: a prompt after it would leave them off the new path, and
    the next run would answer the calls again."""
    chat.with_tools(city_population)
    fake_llm.script(
        Reply(tool_calls=[ToolCall("city_population", {"city": "Paris"})]),
        Reply("Big."),
    )
    chat.ask("How big is Paris?")
    calling = chat.transcript().get(role="assistant", tool_calls__isnull=False)
    with pytest.raises(ArgumentError, match="made tool calls"):
        chat.branch_from(calling, "And Rome?")
    with pytest.raises(ArgumentError, match="made tool calls"):
        chat.ask("And Rome?", parent=calling)
    assert [m.role for m in chat.transcript()] == ["user", "assistant", "tool", "assistant"]
    assert chat.runs.count() == 1  # nothing admitted
    assert_one_path(chat)


def test_regenerate_keeps_the_old_reply_as_a_sibling(chat, fake_llm):
    fake_llm.script(Reply("Paris."), Reply("It is Paris."), Reply("Lyon is second."))
    old = chat.ask("Capital of France?")
    new = chat.regenerate()
    assert new.content == "It is Paris." and new.parent_id == old.parent_id
    assert list(new.alternatives()) == [old, new]
    assert list(new.siblings) == [old]
    old.refresh_from_db()
    assert old.on_path is False and Message.objects.filter(pk=old.pk).exists()
    assert old.usages.count() == 1  # what it cost stays
    assert texts(chat) == ["Capital of France?", "It is Paris."]
    chat.ask("And the second city?")
    assert sent(fake_llm) == [
        ("user", "Capital of France?"),
        ("assistant", "It is Paris."),
        ("user", "And the second city?"),
    ]
    valid_tree(chat)
    assert chat.cost().total is None or chat.path_cost().total <= chat.cost().total
    assert chat.tokens.total_tokens > chat.path_tokens().total_tokens


def test_branch_from_an_earlier_message_sends_only_the_edited_path(chat, fake_llm):
    fake_llm.script(Reply("Paris."), Reply("Berlin."), Reply("Rome."))
    a1 = chat.ask("Capital of France?")
    chat.ask("And Germany?")
    edited = chat.branch_from(a1, "And Italy?")
    assert edited.content == "Rome."
    assert sent(fake_llm) == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "And Italy?"),
    ]
    assert texts(chat) == ["Capital of France?", "Paris.", "And Italy?", "Rome."]
    prompt = edited.parent
    assert [m.content for m in prompt.alternatives()] == ["And Germany?", "And Italy?"]
    assert Message.objects.filter(chat=chat).count() == 6  # nothing lost
    valid_tree(chat)


def test_branch_from_the_root_edits_the_first_prompt(chat, fake_llm):
    chat.with_instructions("Be brief.")
    fake_llm.script(Reply("Paris."), Reply("Rome."))
    chat.ask("Capital of France?")
    reply = chat.ask("Capital of Italy?", parent=branches.ROOT)
    assert sent(fake_llm) == [("user", "Capital of Italy?")]
    assert texts(chat) == ["Be brief.", "Capital of Italy?", "Rome."]
    first = reply.parent
    assert first.parent_id is None
    assert [m.content for m in first.alternatives()] == ["Capital of France?", "Capital of Italy?"]


def test_switch_restores_the_other_branch_and_the_next_ask_continues_it(chat, fake_llm):
    fake_llm.script(Reply("Paris."), Reply("Berlin."), Reply("Rome."), Reply("Munich."))
    a1 = chat.ask("Capital of France?")
    germany = chat.ask("And Germany?")
    chat.branch_from(a1, "And Italy?")
    load_history(chat)  # this process keeps the built history of the Italian branch
    leaf = chat.switch_to(germany.parent)  # the German prompt: down to its reply
    assert leaf == germany
    assert texts(chat) == ["Capital of France?", "Paris.", "And Germany?", "Berlin."]
    chat.ask("Its second city?")
    assert sent(fake_llm) == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "And Germany?"),
        ("assistant", "Berlin."),
        ("user", "Its second city?"),
    ]
    valid_tree(chat)


def test_a_switch_is_seen_by_a_history_built_before_it_without_the_signal(chat, fake_llm):
    """Another process's cache: it never received this process's signal; the path's rows
    tell it the history it built is not the path any more."""
    from django_llmchat.models.message import transcript_changed

    fake_llm.script(Reply("Paris."), Reply("Berlin."), Reply("Rome."))
    a1 = chat.ask("Capital of France?")
    germany = chat.ask("And Germany?")
    italy = chat.branch_from(a1, "And Italy?")
    forget_history()
    assert [m.content for m in load_history(chat).messages][-1] == "Rome."
    receivers = transcript_changed.receivers
    transcript_changed.receivers = []
    try:
        chat.switch_to(germany)
    finally:
        transcript_changed.receivers = receivers
    assert [m.content for m in load_history(chat).messages] == [
        "Capital of France?",
        "Paris.",
        "And Germany?",
        "Berlin.",
    ]
    chat.switch_to(italy)
    assert [m.content for m in load_history(chat).messages][-1] == "Rome."


def test_switch_reads_once_and_writes_only_what_changes(chat, fake_llm):
    fake_llm.script(Reply("Paris."), Reply("Berlin."), Reply("Rome."))
    a1 = chat.ask("Capital of France?")
    germany = chat.ask("And Germany?")
    chat.branch_from(a1, "And Italy?")
    with CaptureQueriesContext(connection) as ctx:
        runs.switch_to(chat.pk, germany.pk)
    writes = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("UPDATE")]
    reads = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("SELECT")]
    assert len(writes) == 3  # the chat's lock, off, on
    assert len(reads) == 2  # the runs in progress, the chat's rows
    with CaptureQueriesContext(connection) as ctx:
        runs.switch_to(chat.pk, germany.pk)  # already the path: nothing to write
    assert [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("UPDATE")] == writes[:1]


def test_switch_to_a_message_in_the_middle_goes_down_the_newest_replies(chat, fake_llm):
    fake_llm.script(Reply("Paris."), Reply("Berlin."), Reply("It is Berlin."), Reply("Rome."))
    a1 = chat.ask("Capital of France?")
    chat.ask("And Germany?")
    newest = chat.regenerate()
    chat.branch_from(a1, "And Italy?")
    assert chat.switch_to(a1) == Message.objects.filter(content="Rome.").get()
    assert chat.switch_to(newest.parent) == newest  # the newest of the two replies


def test_refusals(chat, fake_llm, django_user_model):
    fake_llm.script(Reply("Paris."))
    reply = chat.ask("Capital of France?")
    other = Chat.objects.create(provider="anthropic", model_id="claude-haiku-4-5")
    stranger = other.add_message(role="user", content="hi")
    with pytest.raises(ArgumentError, match="not a message of chat"):
        chat.branch_from(stranger, "x")
    with pytest.raises(ArgumentError, match="not a message of chat"):
        chat.switch_to(stranger)
    system = chat.with_instructions("Be brief.").messages.get(role="system")
    with pytest.raises(ArgumentError, match="system message"):
        chat.branch_from(system, "x")
    assert texts(chat) == ["Capital of France?", "Paris.", "Be brief."]
    assert chat.runs.count() == 1  # nothing admitted
    assert chat.active_leaf == reply


def test_queued_prompts_get_their_parent_when_placed(fake_llm):
    from django.db import transaction

    fake_llm.configure(
        "anthropic", "claude-haiku-4-5", TASKS_EAGER_WITHOUT_BROKER="inline", MAX_RETRIES=0
    )
    fake_llm.script(Reply("One."), Reply("Two."), Reply("Three."))
    chat = Chat.objects.create(provider="anthropic", model_id="claude-haiku-4-5")
    with transaction.atomic():
        prompts = [chat.ask_later(text) for text in ("1?", "2?", "3?")]
        assert prompts[0].parent_id is None
        assert [p.parent_id for p in prompts[1:]] == [None, None]  # not placed yet
    assert texts(chat) == ["1?", "One.", "2?", "Two.", "3?", "Three."]
    valid_tree(chat)
    assert sent(fake_llm) == [
        ("user", "1?"),
        ("assistant", "One."),
        ("user", "2?"),
        ("assistant", "Two."),
        ("user", "3?"),
    ]


def test_branch_while_a_run_works_is_refused_and_the_tree_stays_valid(chat, fake_llm):
    release = threading.Event()
    first = chat.add_message(role="user", content="Hello")
    fake_llm.script(Reply("Hi."))
    chat.complete()
    started = threading.Event()
    fake_llm.script(lambda request: (started.set(), release.wait(5), Reply("Paris."))[-1])

    def ask():
        try:
            Chat.objects.get(pk=chat.pk).ask("France?")
        finally:
            connection.close()

    worker = threading.Thread(target=ask)
    worker.start()
    try:
        assert started.wait(5)
        with pytest.raises(ChatBusyError):
            chat.branch_from(first, "Edited")
        with pytest.raises(ChatBusyError):
            chat.switch_to(first)
        with pytest.raises(ChatBusyError):
            chat.regenerate()
    finally:
        release.set()
        worker.join(10)
    assert texts(chat) == ["Hello", "Hi.", "France?", "Paris."]
    valid_tree(chat)


def test_add_message_and_orm_rows_follow_the_active_leaf(chat):
    u = chat.add_message(role="user", content="a")
    a = Message.objects.create(chat=chat, role="assistant", content="b")
    s = chat.add_message(role="system", content="rules")
    assert (u.parent_id, a.parent_id, s.parent_id) == (None, u.pk, None)
    assert chat.active_leaf == a


def test_link_parents_mends_rows_written_in_bulk(chat):
    rows = [
        Message(chat=chat, role=role, content=text)
        for role, text in [("user", "a"), ("system", "rules"), ("assistant", "b")]
    ]
    Message.objects.bulk_create(rows)
    assert [m.parent_id for m in chat.transcript()] == [None, None, None]
    assert branches.link_parents(chat.pk) == 1
    a, rules, b = chat.transcript()
    assert (a.parent_id, rules.parent_id, b.parent_id) == (None, None, a.pk)
    assert branches.link_parents(chat.pk) == 0
    assert branches.siblings([b])[b.pk] == [b.pk]


def test_siblings_for_a_page_in_one_query(chat, fake_llm):
    fake_llm.script(Reply("Paris."), Reply("It is Paris."), Reply("Paris, France."))
    chat.ask("Capital of France?")
    chat.regenerate()
    chat.regenerate()
    page = list(chat.tree())
    with CaptureQueriesContext(connection) as ctx:
        found = branches.siblings(page)
    assert len(ctx) == 1
    replies = [m.pk for m in page if m.role == "assistant"]
    assert all(found[pk] == replies for pk in replies)
    assert found[page[0].pk] == [page[0].pk]


def test_the_export_follows_the_active_path(chat, fake_llm):
    import json

    from django_llmchat.chats.export import finetune_lines

    def contents():
        [line] = finetune_lines([chat])
        return [m["content"] for m in json.loads(line)["messages"]]

    fake_llm.script(Reply("Paris."), Reply("Berlin."), Reply("Rome."))
    a1 = chat.ask("Capital of France?")
    germany = chat.ask("And Germany?")
    chat.branch_from(a1, "And Italy?")
    assert contents() == ["Capital of France?", "Paris.", "And Italy?", "Rome."]
    chat.switch_to(germany)
    assert contents() == ["Capital of France?", "Paris.", "And Germany?", "Berlin."]


def test_racing_branches_one_wins_the_others_are_refused_and_the_tree_stays_valid(fake_llm):
    """Eight edits of one prompt at once (each a branch after the same reply): one is
    admitted, the others find its run in progress; after it, the path is valid and each
    branch made follows the reply."""
    from tests.runs.test_admission_gate import Provider, finish, needs_server_database, race

    needs_server_database()
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = Chat.objects.create(provider="openai", model_id="gpt-4.1-mini")
    fake_llm.script(Reply("Paris."), Reply("Berlin."))
    reply = chat.ask("Capital of France?")
    chat.ask("And Germany?")
    provider = Provider(fake_llm, hold=True)
    threads, outcomes = race(
        8, lambda i: Chat.objects.get(pk=chat.pk).branch_from(reply, f"Edit {i}?")
    )
    finish(
        threads,
        provider,
        settled=lambda: sum(isinstance(o, ChatBusyError) for o in outcomes) == 7,
    )
    assert sum(isinstance(o, ChatBusyError) for o in outcomes) == 7, outcomes
    (won,) = [o for o in outcomes if isinstance(o, Message)]
    valid_tree(chat)
    assert texts(chat)[-2:] == [won.parent.content, "answered"]
    edits = Message.objects.filter(chat=chat, content__startswith="Edit ")
    assert edits.count() == 1 and edits.get().parent_id == reply.pk
    assert [m.content for m in won.parent.alternatives()] == ["And Germany?", edits.get().content]


def test_aask_takes_a_parent_too(chat, fake_llm):
    import asyncio

    fake_llm.script(Reply("Paris."), Reply("Rome."))
    chat.ask("Capital of France?")
    reply = asyncio.run(chat.aask("Capital of Italy?", parent=branches.ROOT))
    assert reply.content == "Rome." and sent(fake_llm) == [("user", "Capital of Italy?")]
    assert texts(chat) == ["Capital of Italy?", "Rome."]


def test_prompts_with_files_take_the_parent_decided_under_the_lock(chat, fake_llm):
    """A prompt with attachments is saved with ``save()``: it keeps the parent its run's
    admission decided (none before the first message), not the active leaf."""
    fake_llm.script(Reply("Paris."), Reply("A note."))
    chat.ask("Capital of France?")
    reply = chat.ask("Read this", [("note.txt", b"hello")], parent=branches.ROOT)
    prompt = reply.parent
    assert prompt.parent_id is None and prompt.attachments.count() == 1
    assert texts(chat) == ["Read this", "A note."]


def test_a_branch_asked_for_without_a_prompt_is_not_one(chat):
    """Only a new prompt branches: a regenerate admitted inside ``branching()`` answers
    the path's last prompt again, as anywhere."""
    from django_llmchat.models import Run

    prompt = chat.add_message(role="user", content="Capital of France?")
    reply = chat.add_message(role="assistant", content="Paris.")
    Run.objects.create(chat=chat, status=Run.SUCCEEDED, prompt=prompt)
    with branches.branching(prompt):
        run, _ = runs.enqueue(chat, regenerate=True)
    assert run.prompt_id is None and texts(chat) == ["Capital of France?"]
    reply.refresh_from_db()
    assert not reply.on_path


# -- one rule for every way into the tree: a new prompt's path is root -> ... -> its parent
def four_branches(chat, fake_llm):
    """ask A, ask B; a branch C after A's reply; back to B's reply: the replies of A, B, C
    (the path is A a B b)."""
    fake_llm.script(Reply("a"), Reply("b"), Reply("c"))
    a = chat.ask("A")
    b = chat.ask("B")
    c = chat.branch_from(a, "C")
    assert chat.switch_to(b) == b
    assert [m.content for m in chat.transcript().exclude(role="system")] == ["A", "a", "B", "b"]
    return a, b, c


def test_a_branch_from_a_reply_off_the_path_takes_its_branch_back(chat, fake_llm):
    chat.with_instructions("Be brief.")
    a, b, c = four_branches(chat, fake_llm)
    fake_llm.script(Reply("d"))
    d = chat.branch_from(c, "D")
    assert texts(chat) == ["Be brief.", "A", "a", "C", "c", "D", "d"]
    assert sent(fake_llm) == [
        ("user", "A"),
        ("assistant", "a"),
        ("user", "C"),
        ("assistant", "c"),
        ("user", "D"),
    ]
    assert d.parent.parent_id == c.pk and chat.active_leaf == d
    assert_one_path(chat)
    b.refresh_from_db()
    assert not b.on_path and not b.parent.on_path  # kept, off the path


def test_ask_with_a_parent_off_the_path(chat, fake_llm):
    a, b, c = four_branches(chat, fake_llm)
    fake_llm.script(Reply("d"), Reply("e"))
    chat.ask("D", parent=a)  # an edit of C, from the B branch
    assert texts(chat) == ["A", "a", "D", "d"]
    assert sent(fake_llm) == [("user", "A"), ("assistant", "a"), ("user", "D")]
    assert_one_path(chat)
    chat.ask("E", parent=c)
    assert texts(chat) == ["A", "a", "C", "c", "E", "e"]
    assert sent(fake_llm)[-2:] == [("assistant", "c"), ("user", "E")]
    assert_one_path(chat)


def test_ask_later_with_a_parent_off_the_path(fake_llm):
    fake_llm.configure("anthropic", "claude-haiku-4-5", TASKS_EAGER_WITHOUT_BROKER="inline")
    chat = Chat.objects.create(provider="anthropic", model_id="claude-haiku-4-5")
    a, b, c = four_branches(chat, fake_llm)
    fake_llm.script(Reply("d"))
    prompt = chat.ask_later("D", parent=c)
    assert prompt.parent_id == c.pk
    assert texts(chat) == ["A", "a", "C", "c", "D", "d"]
    assert sent(fake_llm)[-3:] == [("user", "C"), ("assistant", "c"), ("user", "D")]
    assert_one_path(chat)


def test_regenerate_after_a_switch_answers_the_switched_prompt(chat, fake_llm):
    a, b, c = four_branches(chat, fake_llm)
    load_history(chat)  # this process keeps the built history of the B branch
    chat.switch_to(c)
    fake_llm.script(Reply("c2"), Reply("d"))
    again = chat.regenerate()
    assert again.parent_id == c.parent_id and texts(chat) == ["A", "a", "C", "c2"]
    assert sent(fake_llm) == [("user", "A"), ("assistant", "a"), ("user", "C")]
    assert_one_path(chat)
    chat.ask("D")
    assert sent(fake_llm)[-3:] == [("user", "C"), ("assistant", "c2"), ("user", "D")]
    assert_one_path(chat)


def test_a_branch_off_the_path_brings_back_the_summary_of_its_branch_only(chat, fake_llm):
    a, b, c = four_branches(chat, fake_llm)
    # a summary written on the C branch (covering up to c), one on the B branch (up to b)
    chat.switch_to(c)
    of_c = chat.add_message(role="system", content="C summary", summary_until=c)
    chat.switch_to(b)
    Message.objects.filter(pk=of_c.pk).update(on_path=False)  # as the switch keeps it
    of_b = chat.add_message(role="system", content="B summary", summary_until=b)
    assert_one_path(chat)
    fake_llm.script(Reply("d"))
    chat.branch_from(c, "D")
    of_c.refresh_from_db()
    of_b.refresh_from_db()
    assert of_c.on_path and not of_b.on_path
    assert_one_path(chat)
    fake_llm.script(Reply("e"))
    chat.branch_from(a, "E")  # before both covered messages: neither summary
    of_c.refresh_from_db()
    assert not of_c.on_path and texts(chat) == ["A", "a", "E", "e"]
    assert_one_path(chat)


def test_a_prompt_after_the_active_leaf_costs_what_it_did(chat, fake_llm):
    """The common case changes nothing of the path: a prompt after the active leaf,
    named (``parent=``) or not, costs the statements it cost before the path was
    rebuilt from the parent (a parent off the path pays for that alone)."""
    fake_llm.script(Reply("a"), Reply("b"), Reply("c"), Reply("d"))
    chat.ask("warm up")
    reply = chat.ask("A")
    with CaptureQueriesContext(connection) as plain:
        reply = chat.ask("B")
    with CaptureQueriesContext(connection) as named:
        chat.ask("C", parent=reply)
    counts = (len(plain), len(named))
    assert counts == EXPECTED_COUNTS[connection.vendor]
    assert_one_path(chat)


# (a plain ask, one naming the active leaf) as measured before: on SQLite the branch
# reads its parent and writes no row in its one UPDATE; on PostgreSQL a plain ask is two
# calls, a named parent takes the statements (no one-call admission for a branch)
EXPECTED_COUNTS = {"sqlite": (16, 17), "postgresql": (2, 12)}


class Recorder:
    """The provider's responder for a race: each reply's text names the request it
    answers, whose messages are kept (``asked[text]``)."""

    def __init__(self, fake_llm):
        self.lock = threading.Lock()
        self.asked: dict[str, list[tuple[str, str]]] = {}
        fake_llm.server.responder = self

    def __call__(self, request):
        said = []
        for m in request.body["messages"]:
            content = m["content"]
            if isinstance(content, list):
                content = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
            said.append((m["role"], content))
        with self.lock:
            text = f"reply {len(self.asked) + 1}"
            self.asked[text] = said
        return Reply(text)


def test_racing_switches_branches_regenerates_and_asks_keep_one_path(fake_llm):
    """Fifteen threads at once, round after round, each switching to, branching from,
    regenerating or asking after a message of the chat's tree: after each round the path
    is one chain from a root to the active leaf, every refusal is ``RunInProgress``, and
    every request the provider received was the path from a root to the prompt it
    answered, as stored."""
    import random

    from django_llmchat.errors import RunInProgress
    from tests.runs.test_admission_gate import finish, needs_server_database, race

    needs_server_database()
    fake_llm.configure("anthropic", "claude-haiku-4-5", MAX_RETRIES=0)
    chat = Chat.objects.create(provider="anthropic", model_id="claude-haiku-4-5")
    chat.with_instructions("Be brief.")
    recorder = Recorder(fake_llm)
    chat.ask("Start")
    chat.ask("Go on")
    rng = random.Random(20261203)

    def operation(kind, target, label):
        mine = Chat.objects.get(pk=chat.pk)
        if kind == "switch":
            return mine.switch_to(target)
        if kind == "branch":
            return mine.branch_from(target, label)
        if kind == "regenerate":
            return mine.regenerate()
        return mine.ask(label)

    for round_ in range(16):
        tree = list(
            Message.objects.filter(chat=chat, role__in=("user", "assistant"), position__lt=10**17)
        )
        plan = [
            (rng.choice(["switch", "branch", "regenerate", "ask"]), rng.choice(tree))
            for _ in range(15)
        ]
        threads, outcomes = race(
            15, lambda i, plan=plan, n=round_: operation(*plan[i], f"round {n} thread {i}")
        )
        finish(threads)
        wrong = [
            o for o in outcomes if isinstance(o, Exception) and not isinstance(o, RunInProgress)
        ]
        assert not wrong, (round_, wrong)
        assert_one_path(chat)
    by_pk = {m.pk: m for m in Message.objects.filter(chat=chat)}
    answered = [m for m in by_pk.values() if m.content in recorder.asked]
    assert len(answered) == len(recorder.asked) > 16
    for reply in answered:
        chain, node = [], by_pk.get(reply.parent_id)
        while node is not None:
            chain.append((node.role, node.content))
            node = by_pk.get(node.parent_id)
        merged: list[tuple[str, str]] = []  # the wire joins a prompt after a prompt
        for role, text in chain[::-1]:
            if merged and merged[-1][0] == role:
                merged[-1] = (role, f"{merged[-1][1]} {text}")
            else:
                merged.append((role, text))
        assert recorder.asked[reply.content] == merged, reply.content


def test_a_prompt_admitted_after_a_later_reply_reads_after_it(chat, fake_llm):
    """A reply stored by another process between the prompt's clock and its admission
    (its place read later than the prompt's): the prompt follows it and reads after it,
    and the provider receives them in that order."""
    import time

    from django_llmchat.models.message import clock_position

    fake_llm.script(Reply("a"), lambda request: (time.sleep(0.5), Reply("c"))[-1])
    a = chat.ask("A")
    later = clock_position() + 200_000  # 0.2 s ahead: the next prompt's clock is before
    b = Message.objects.create(chat=chat, role="user", content="B", position=later)
    elsewhere = Message.objects.create(chat=chat, role="assistant", content="b", position=later + 1)
    reply = chat.ask("C")
    assert reply.parent.parent_id == elsewhere.pk and b.parent_id == a.pk
    assert texts(chat) == ["A", "a", "B", "b", "C", "c"]
    assert sent(fake_llm) == [
        ("user", "A"),
        ("assistant", "a"),
        ("user", "B"),
        ("assistant", "b"),
        ("user", "C"),
    ]
    assert_one_path(chat)
