"""Imports (django_llmchat.chats.imports, ``manage.py llmchat_import``): ChatGPT's data export
into the same tree the page shows, this project's own export round-tripping, and the
errors of a file that is neither."""

from __future__ import annotations

import copy
import datetime as dt
import io
import json
import re
import zipfile
from io import StringIO
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command
from django.db import connection

from django_llmchat.chats import lifecycle
from django_llmchat.chats.imports import (
    NO_RESULT,
    ImportFormatError,
    import_data,
    import_file,
    read_chatgpt,
)
from django_llmchat.models import Chat, Feedback, Message, ToolCall
from django_llmchat.models.branches import siblings
from django_llmchat.models.protected import MARKER
from django_llmchat.testing import Reply
from django_llmchat.testing.invariants import assert_one_path
from tests.lifecycle_helpers import make_chat

pytestmark = pytest.mark.django_db(transaction=True)

CHATGPT = Path(__file__).parent / "fixtures" / "chatgpt" / "conversations.json"
T = 1733220000.0


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob")


def path_of(chat) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in chat.transcript()]


# -- ChatGPT's export ---------------------------------------------------------------------
def test_a_chatgpt_export_becomes_the_same_tree_with_its_branches(fake_llm, alice):
    fake_llm.configure("openai", "gpt-4.1-mini")
    imported = import_file(CHATGPT, user=alice)

    sums, lighthouse = imported.chats
    assert (sums.title, lighthouse.title) == ("Sums", "Lighthouse")
    assert sums.user == alice and sums.status == "idle"
    assert sums.created_at == dt.datetime.fromtimestamp(T, tz=dt.UTC)
    # the active path: current_node's line (the edited prompt), hidden system root left out
    assert path_of(sums) == [
        ("user", "What is 3+3? Compute it."),
        ("assistant", ""),
        ("tool", "6\n"),
        ("assistant", "It is 6."),
        ("user", "[image]\nAnd what is in this picture?"),
        ("assistant", "A cat."),
    ]
    assert_one_path(sums)
    by = {m.content: m for m in sums.messages.all() if m.content}
    # the first prompt and its edit are alternatives; so are the reply and its regeneration
    alts = siblings(sums.messages.all())
    assert alts[by["What is 3+3? Compute it."].pk] == [
        by["What is 2+2?"].pk,
        by["What is 3+3? Compute it."].pk,
    ]
    assert alts[by["4"].pk] == [by["4"].pk, by["Four."].pk]
    assert not by["4"].on_path and not by["What is 2+2?"].on_path
    # the code sent to Python is a tool call, its output the call's result
    (call,) = ToolCall.objects.filter(chat=sums)
    assert (call.name, call.arguments) == ("python", {"code": "print(3+3)", "language": "python"})
    assert call.message.thinking_text == "I should run Python."
    assert call.message.model_id == "o3"
    assert by["6\n"].parent_tool_call == call and by["6\n"].parent == call.message
    assert by["It is 6."].finish_reason == "stop"
    assert by["What is 2+2?"].created_at == dt.datetime.fromtimestamp(T + 1, tz=dt.UTC)
    assert not imported.notes[:0]


def test_a_call_without_a_result_gets_one_and_the_chat_goes_on(fake_llm, alice):
    fake_llm.configure("openai", "gpt-4.1-mini")
    imported = import_file(CHATGPT, user=alice)
    lighthouse = imported.chats[1]

    assert path_of(lighthouse) == [
        ("user", "Draw a lighthouse"),
        ("assistant", ""),
        ("tool", NO_RESULT),
        ("user", "Never mind."),
    ]
    assert_one_path(lighthouse)
    (call,) = ToolCall.objects.filter(chat=lighthouse)
    assert call.name == "dalle.text2im"
    assert call.arguments == {"prompt": "a lighthouse at dusk", "size": "1024x1024"}
    assert any("dalle.text2im" in note and "no result" in note for note in imported.notes)

    # the imported chat is valid: the next ask sends its path, the call with its result
    fake_llm.script(Reply("Sure."))
    lighthouse.ask("Then a boat?")
    sent = json.dumps(fake_llm.server.last_request.body)
    assert "Draw a lighthouse" in sent and NO_RESULT in sent and "dalle.text2im" in sent
    assert path_of(lighthouse)[-2:] == [("user", "Then a boat?"), ("assistant", "Sure.")]
    assert_one_path(lighthouse)


def test_the_imported_path_is_what_the_next_request_sends(fake_llm, alice):
    fake_llm.configure("openai", "gpt-4.1-mini")
    sums = import_file(CHATGPT, user=alice).chats[0]
    fake_llm.script(Reply("Still a cat."))
    sums.ask("Sure?")
    sent = json.dumps(fake_llm.server.last_request.body)
    assert "What is 3+3?" in sent and "A cat." in sent
    assert "What is 2+2?" not in sent and "Four." not in sent  # the other branches stay out


def test_the_command_reads_the_file_or_the_zip(fake_llm, alice, tmp_path):
    fake_llm.configure("openai", "gpt-4.1-mini")
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("chat.html", "<html></html>")
        zf.writestr("conversations.json", CHATGPT.read_bytes())
    out, err = StringIO(), StringIO()
    call_command("llmchat_import", str(archive), "--user", "alice", stdout=out, stderr=err)
    assert "Imported 2 chats" in out.getvalue() and "for alice" in out.getvalue()
    assert "note:" in err.getvalue() and "dalle.text2im" in err.getvalue()
    call_command("llmchat_import", str(CHATGPT), "--user", str(alice.pk), "--pk", stdout=out)
    assert Chat.objects.filter(user=alice, title="Sums").count() == 2  # pasted twice: twice

    with pytest.raises(CommandError, match="No user with username 'nobody'"):
        call_command("llmchat_import", str(CHATGPT), "--user", "nobody")
    with pytest.raises(CommandError, match="No such file"):
        call_command("llmchat_import", str(tmp_path / "missing.json"), "--user", "alice")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CommandError, match="not JSON"):
        call_command("llmchat_import", str(bad), "--user", "alice")
    empty_zip = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty_zip, "w") as zf:
        zf.writestr("user.json", "{}")
    with pytest.raises(CommandError, match="no conversations.json"):
        call_command("llmchat_import", str(empty_zip), "--user", "alice")
    cut = tmp_path / "cut.zip"
    cut.write_bytes(archive.read_bytes()[:200])  # a download cut short
    with pytest.raises(CommandError, match="the archive cannot be read"):
        call_command("llmchat_import", str(cut), "--user", "alice")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    with pytest.raises(CommandError, match="nested too deeply"):
        call_command("llmchat_import", str(deep), "--user", "alice")


def test_files_that_are_neither_format_are_refused_by_name(alice):
    with pytest.raises(ImportFormatError, match="not a known export"):
        import_data({"chats": []}, user=alice)
    with pytest.raises(ImportFormatError, match='format must be "auto"'):
        import_data([], user=alice, format="csv")
    with pytest.raises(ImportFormatError, match="version 2 of the export"):
        import_data({"format": "django-llmchat-export", "version": 2}, user=alice)
    conv = json.loads(CHATGPT.read_text())[0]
    broken = copy.deepcopy(conv)
    broken["mapping"]["u1"]["message"]["create_time"] = "yesterday"
    with pytest.raises(ImportFormatError, match="message u1: 'yesterday' is not a time"):
        read_chatgpt([broken])
    assert Chat.objects.count() == 0


def test_an_encrypted_store_holds_imported_text_as_ciphertext(fake_llm, alice):
    fake_llm.configure("openai", "gpt-4.1-mini", ENCRYPTION_KEYS=[Fernet.generate_key().decode()])
    sums = import_file(CHATGPT, user=alice).chats[0]
    with connection.cursor() as cursor:
        cursor.execute("SELECT content FROM llmchat_message WHERE content <> ''")
        stored = [row[0] for row in cursor.fetchall()]
        cursor.execute("SELECT arguments FROM llmchat_tool_call")
        (arguments,) = cursor.fetchone()
    assert stored and all(MARKER in value for value in stored)
    assert "print(3+3)" not in str(arguments)
    assert path_of(sums)[-1] == ("assistant", "A cat.")
    fake_llm.script(Reply("Yes."))
    sums.ask("Sure?")
    assert "A cat." in json.dumps(fake_llm.server.last_request.body)  # words, not ciphertext


# -- this project's own export -------------------------------------------------------------
def _normal(document: dict) -> list[dict]:
    """The export's chats with ids replaced by their place, and what an import renews
    (ids, owner, runs, row times of attachments and ratings) left out."""
    (entry,) = document["users"]
    chats = []
    for chat in entry["chats"]:
        place = {m["id"]: i for i, m in enumerate(chat["messages"])}
        messages = []
        for m in chat["messages"]:
            m = dict(m)
            m["id"] = place[m["id"]]
            for ref in ("parent", "summary_until"):
                if ref in m:
                    m[ref] = place[m[ref]]
            m.pop("parent_tool_call", None)  # the tool call's row id
            m["attachments"] = [
                {k: v for k, v in a.items() if k != "created_at"} for a in m.get("attachments", [])
            ]
            messages.append(m)
        ratings = sorted(
            (place[f["message"]], f["rating"], f.get("comment", ""))
            for f in entry["feedback"]
            if f["chat_id"] == chat["id"]
        )
        rest = {k: v for k, v in chat.items() if k not in ("id", "runs", "messages")}
        chats.append({**rest, "messages": messages, "ratings": ratings})
    return chats


def test_the_own_export_round_trips(fake_llm, alice, bob):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat = make_chat(fake_llm, alice, title="Paris", client_id="ui-123")
    fake_llm.script(Reply("Rainy, says another forecast", thinking="Check twice."))
    chat.regenerate()  # a branch: two replies to the last step
    first_reply = chat.messages.filter(role="assistant", content="Sunny in Paris").get()
    fake_llm.script(Reply("Lyon is sunny too"))
    chat.switch_to(first_reply)
    chat.ask("And Lyon?")
    first_reply.rate(1, "helpful", user=alice)
    Chat.objects.create(user=alice, title="Empty one")
    before = lifecycle.export_user(alice, files=True)

    imported = import_data(json.loads(json.dumps(before, default=str)), user=bob)

    assert [c.title for c in imported.chats] == ["Paris", "Empty one"]
    assert imported.notes == []
    for new in imported.chats:
        assert_one_path(new)
    after = lifecycle.export_user(bob, files=True)
    assert _normal(json.loads(json.dumps(after, default=str))) == _normal(
        json.loads(json.dumps(before, default=str))
    )
    copy_of = imported.chats[0]
    assert [m.content for m in copy_of.transcript()] == [m.content for m in chat.transcript()]
    assert Feedback.objects.get(message__chat=copy_of).user == bob
    assert copy_of.usages.count() == 0  # the ledger is this deployment's: not imported
    assert copy_of.tokens.input_tokens == sum(
        m.input_tokens or 0 for m in Message.objects.filter(chat=copy_of)
    )
    # the copy goes on like the original
    fake_llm.script(Reply("Marseille too"))
    copy_of.ask("And Marseille?")
    assert_one_path(copy_of)


def test_an_export_without_files_imports_with_a_note(fake_llm, alice, bob):
    fake_llm.configure("openai", "gpt-4.1-mini")
    make_chat(fake_llm, alice, title="Paris")
    imported = import_data(
        json.loads(json.dumps(lifecycle.export_user(alice), default=str)), user=bob
    )
    (note,) = imported.notes
    assert "notes.txt" in note and "--files" in note
    assert not imported.chats[0].messages.filter(attachments__isnull=False).exists()


def test_a_client_id_already_taken_is_dropped_with_a_note(fake_llm, alice):
    fake_llm.configure("openai", "gpt-4.1-mini")
    make_chat(fake_llm, alice, title="Paris", client_id="ui-1")
    document = json.loads(json.dumps(lifecycle.export_user(alice, files=True), default=str))
    again = import_data(document, user=alice)
    assert again.chats[0].client_id == ""
    assert any("ui-1" in note for note in again.notes)


@pytest.mark.parametrize(
    "change, error",
    [
        (lambda m: m[1].update(parent=10**9), "its parent 1000000000 is not an earlier message"),
        (lambda m: m[0].update(role="robot"), "role 'robot' is not one of"),
        (lambda m: m[1].update(input_tokens=-3), "input_tokens must be a count"),
        (lambda m: m[2].update(tool_call_id="nope"), "a tool result answering no call"),
        (lambda m: m[3].update(cost={"total": "lots"}), "cost 'lots' is not a number"),
    ],
)
def test_a_broken_export_is_refused_naming_the_message(fake_llm, alice, bob, change, error):
    fake_llm.configure("openai", "gpt-4.1-mini")
    make_chat(fake_llm, alice, title="Paris")
    document = json.loads(json.dumps(lifecycle.export_user(alice, files=True), default=str))
    change(document["users"][0]["chats"][0]["messages"])
    with pytest.raises(ImportFormatError, match=error):
        import_data(document, user=bob)
    assert not Chat.objects.filter(user=bob).exists()  # nothing half-written


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda c: c["mapping"]["a2"]["message"].update(content="It is 6."), "conversation 0: "),
        (lambda c: c["mapping"]["u1"].update(children=True), "a value of an unexpected type"),
        (lambda c: c.update(current_node={"id": "a3"}), "(TypeError: unhashable type"),
    ],
)
def test_a_value_of_another_type_than_chatgpts_is_refused_naming_the_conversation(
    alice, change, error
):
    conversations = json.loads(CHATGPT.read_text())
    change(conversations[0])
    with pytest.raises(ImportFormatError, match=re.escape(error)):
        import_data(conversations, user=alice)
    assert not Chat.objects.exists()


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda d: d["users"][0].update(chats=[3]), '"chats" must be a list of objects'),
        (lambda d: d["users"][0].update(feedback=[3]), "user 0: a value of an unexpected type"),
        (lambda d: d["users"][0]["chats"][0].update(messages=[[]]), "a value of an unexpected"),
        (lambda d: d["users"][0]["chats"][0].update(retention_days=-1), "retention_days -1: "),
        (lambda d: d["users"][0]["chats"][0].update(retention_days=""), "retention_days '': "),
        (lambda d: d["users"][0]["chats"][0].update(model_id="m" * 300), "model_id 'mmm"),
        (lambda d: d["users"][0]["chats"][0]["messages"][1].update(input_tokens=2**64), "large"),
    ],
)
def test_a_value_the_database_cannot_store_is_refused_before_it(
    fake_llm, alice, bob, change, error
):
    fake_llm.configure("openai", "gpt-4.1-mini")
    make_chat(fake_llm, alice, title="Paris")
    document = json.loads(json.dumps(lifecycle.export_user(alice, files=True), default=str))
    change(document)
    with pytest.raises(ImportFormatError, match=re.escape(error)):
        import_data(document, user=bob)
    assert not Chat.objects.filter(user=bob).exists()


def test_what_the_database_refuses_is_an_import_error_and_the_chat_is_not_stored(alice):
    conversations = json.loads(CHATGPT.read_text())
    mapping = conversations[0]["mapping"]
    long = "c" * 300  # the call's id: longer than its column
    mapping[long] = {**mapping.pop("c1"), "id": long}
    mapping["th"]["children"] = [long]
    mapping["t1"]["parent"] = long
    if connection.vendor == "sqlite":  # SQLite keeps any length
        assert import_data(conversations, user=alice).chats[0].title == "Sums"
        return
    with pytest.raises(ImportFormatError, match="a value the database cannot store"):
        import_data(conversations, user=alice)
    assert not Chat.objects.exists()


def test_a_chat_of_a_failed_import_is_rolled_back(fake_llm, alice, bob):
    fake_llm.configure("openai", "gpt-4.1-mini")
    make_chat(fake_llm, alice, title="Paris")
    document = json.loads(json.dumps(lifecycle.export_user(alice, files=True), default=str))
    document["users"][0]["feedback"] = [
        {
            "message": document["users"][0]["chats"][0]["messages"][-1]["id"],
            "rating": 5,
            "chat_id": 0,
        }
    ]
    with pytest.raises(ImportFormatError, match="a rating must be one of"):
        import_data(document, user=bob)
    assert not Chat.objects.filter(user=bob).exists()
    assert not Message.objects.filter(chat__user=bob).exists()


def test_a_single_conversation_object_is_read_too(fake_llm, alice):
    fake_llm.configure("openai", "gpt-4.1-mini")
    conv = json.loads(CHATGPT.read_text())[0]
    (chat,) = import_file(io.BytesIO(json.dumps(conv).encode()), user=alice).chats
    assert chat.title == "Sums"


# -- what the chat page reads --------------------------------------------------------------
def export_tree(conv: dict) -> list[tuple]:
    """The conversation of conversations.json as its reader shows it, read here apart from
    the importer: the messages shown (hidden ones and reasoning left out, their children
    kept), depth first, alternatives oldest first; each ``(role, text, depth,
    alternatives, on current_node's line)``, ``text`` ``None`` when it is not plain text
    (code sent to a tool, an image)."""
    mapping = conv["mapping"]

    def shown(key: str) -> bool:
        message = mapping[key].get("message") or {}
        kind = (message.get("content") or {}).get("content_type")
        return (
            (message.get("author") or {}).get("role") in ("user", "assistant", "tool")
            and not (message.get("metadata") or {}).get("is_visually_hidden_from_conversation")
            and kind not in ("thoughts", "reasoning_recap", "user_editable_context")
        )

    def shown_below(keys: list[str]) -> list[str]:
        out = []
        for key in sorted(
            keys, key=lambda k: (mapping[k]["message"] or {}).get("create_time") or 0
        ):
            out.extend([key] if shown(key) else shown_below(mapping[key]["children"]))
        return out

    line, key = set(), conv["current_node"]
    while key is not None:
        line.add(key)
        key = mapping[key]["parent"]
    rows: list[tuple] = []

    def visit(keys: list[str], depth: int) -> None:
        for key in keys:
            message = mapping[key]["message"]
            content = message["content"]
            parts = content.get("parts") or []
            plain = content["content_type"] == "text" and all(isinstance(p, str) for p in parts)
            tool_bound = (message.get("recipient") or "all") != "all"
            text = "\n".join(parts) if plain and not tool_bound else None
            rows.append((message["author"]["role"], text, depth, len(keys), key in line))
            visit(shown_below(mapping[key]["children"]), depth + 1)

    roots = [k for k, node in mapping.items() if node["parent"] is None]
    visit(shown_below(roots), 0)
    return rows


def page_tree(api, chat_id: int) -> list[tuple]:
    """The chat as the page reads it (``GET chats/{id}/messages/?path=all``, every page):
    ``(role, content, depth, len(siblings), on_path)`` depth first, siblings in the
    order the API gives them."""
    from tests.api.conftest import url

    listed, link = [], url("chat-messages", pk=chat_id) + "?path=all&page_size=2"
    while link:
        page = api.get(link)
        assert page.status_code == 200, page.content
        listed += page.json()["results"]
        link = page.json()["next"]
    by_id = {m["id"]: m for m in listed}
    children: dict = {}
    for m in listed:
        if m["role"] != "system":
            children.setdefault(m["parent"], m["siblings"])
    rows: list[tuple] = []

    def visit(ids: list, depth: int) -> None:
        for pk in ids:
            m = by_id[pk]
            rows.append((m["role"], m["content"], depth, len(m["siblings"]), m["on_path"]))
            visit(children.get(pk, []), depth + 1)

    visit(children.get(None, []), 0)
    assert len(rows) == len([m for m in listed if m["role"] != "system"])  # one tree
    return rows


def test_the_page_reads_the_export_tree_its_active_path_and_alternatives(fake_llm, alice):
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from tests.api.conftest import url

    fake_llm.configure("openai", "gpt-4.1-mini")
    conversations = json.loads(CHATGPT.read_text())
    sums = import_file(CHATGPT, user=alice).chats[0]
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=alice).key}")

    expected = export_tree(conversations[0])
    got = page_tree(api, sums.pk)
    assert [row[2:] for row in got] == [row[2:] for row in expected]  # shape, branches, path
    for (role, content, *_), (want_role, text, *_) in zip(got, expected, strict=True):
        assert role == want_role and (text is None or content == text)
    assert [row[3] for row in got if row[4]] == [2, 1, 1, 1, 1, 1]  # the edited prompt: 2

    # the chat page's list (the active path, ?page_size=200): the line to current_node,
    # each message with as many alternatives as in the export ("‹ 2/2 ›")
    path = api.get(url("chat-messages", pk=sums.pk) + "?page_size=200").json()["results"]
    on_line = [row for row in expected if row[4]]
    assert [(m["role"], len(m["siblings"])) for m in path] == [(r[0], r[3]) for r in on_line]
    pairs = zip(path, on_line, strict=True)
    assert all(text is None or m["content"] == text for m, (_, text, *_) in pairs)
    edited = path[0]
    assert edited["siblings"].index(edited["id"]) == 1  # the second version is shown
    # the AI SDK's reload of the chat (ui/chat/{id}/messages): the same path's words
    ui = api.get(url("ui-chat-messages", id=str(sums.pk))).json()
    said = [
        (m["role"], "".join(p.get("text", "") for p in m["parts"] if p["type"] == "text"))
        for m in ui
    ]
    assert said[0] == ("user", "What is 3+3? Compute it.")
    assert said[-2:] == [("user", "[image]\nAnd what is in this picture?"), ("assistant", "A cat.")]
    assert "What is 2+2?" not in str(ui) and "Four." not in str(ui)
