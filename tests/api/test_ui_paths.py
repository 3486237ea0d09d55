"""Branches in the AI SDK protocol: the messages a ``ui/chat`` client sends are the path
it continues (a shorter prefix branches, a lone message on a chat starts it anew, a
message the chat does not have before the last is a 400); regenerate keeps the old reply;
``GET ui/chat/{id}/messages`` is the active path with each message's alternatives and the
requesting user's feedback (the real SDK: ``tests/js/branches.test.mjs``)."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat.api.ui.paths import placement_of
from django_llmchat.models import Feedback, Message, Run
from django_llmchat.testing import Fault, Reply

from .conftest import url
from .test_ui_chat import chunks, post, user
from .test_ui_messages import messages as ui_messages

pytestmark = pytest.mark.django_db


def text_of(chunks_: list) -> str:
    return "".join(c["delta"] for c in chunks_ if c["type"] == "text-delta")


def reply_of(chunks_: list) -> dict:
    """The assistant UI message a stream built: its id and text."""
    return {"id": chunks_[0]["messageId"], "role": "assistant", "text": text_of(chunks_)}


def said(request) -> list[tuple[str, str]]:
    """``(role, text)`` of each message the provider was sent (the Responses API)."""
    out = []
    for m in request.body["input"]:
        if "role" not in m:
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        out.append((m["role"], content or ""))
    return out


def sent_as(message: dict) -> dict:
    """A streamed reply as the client sends it back in ``messages``."""
    return {
        "id": message["id"],
        "role": "assistant",
        "parts": [{"type": "text", "text": message["text"]}],
    }


@pytest.fixture
def two_turns(api, chat, fake_llm):
    """A chat of two questions and their replies, sent as the SDK sends them."""
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script("Apples are red.", "Pears are green.")
    u1 = user("Tell me about apples")
    a1 = reply_of(chunks(post(api, chat.pk, u1)))
    u2 = user("Tell me about pears")
    a2 = reply_of(chunks(post(api, chat.pk, u1, sent_as(a1), u2)))
    return [u1, sent_as(a1), u2, sent_as(a2)]


def test_the_whole_path_before_the_new_message_appends(api, chat, two_turns):
    path = list(chat.transcript())
    assert [m.content for m in path] == [
        "Tell me about apples",
        "Apples are red.",
        "Tell me about pears",
        "Pears are green.",
    ]
    assert [m.parent_id for m in path] == [None, path[0].pk, path[1].pk, path[2].pk]
    assert [m["id"] for m in ui_messages(api, chat.pk)] == [m["id"] for m in two_turns]


def test_a_shorter_prefix_branches_after_its_last_message(api, chat, fake_llm, two_turns):
    u1, a1, u2, a2 = two_turns
    fake_llm.script("Plums are purple.")
    u3 = user("Tell me about plums")
    got = chunks(post(api, chat.pk, u1, a1, u3))
    assert text_of(got) == "Plums are purple."
    # the provider was sent the edited path alone
    assert said(fake_llm.requests[-1]) == [
        ("user", "Tell me about apples"),
        ("assistant", "Apples are red."),
        ("user", "Tell me about plums"),
    ]
    path = list(chat.transcript())
    assert [m.content for m in path] == [
        "Tell me about apples",
        "Apples are red.",
        "Tell me about plums",
        "Plums are purple.",
    ]
    old = Message.objects.get(chat=chat, content="Tell me about pears")
    assert old.parent_id == path[1].pk == path[2].parent_id
    assert not old.on_path
    assert chat.messages.count() == 6  # nothing lost
    reloaded = ui_messages(api, chat.pk)
    assert [m["id"] for m in reloaded] == [u1["id"], a1["id"], u3["id"], reloaded[3]["id"]]
    assert reloaded[2]["metadata"] == {
        "branch": {
            "index": 1,
            "count": 2,
            "siblings": [u2["id"], u3["id"]],
            "storedMessageIds": [old.pk, path[2].pk],
        }
    }
    assert "branch" not in reloaded[3]["metadata"]
    assert "metadata" not in reloaded[0]
    # the reply's stream ended with its prompt's alternatives: the client's own copy of
    # the edited prompt shows "< 2/2 >" without a reload
    end = got[-1]["messageMetadata"]
    assert end["promptBranch"] == reloaded[2]["metadata"]["branch"]
    assert "branch" not in end
    # a reply to a prompt without alternatives says none
    fake_llm.script("Figs are sweet.")
    more = chunks(post(api, chat.pk, *reloaded, user("And figs?")))
    assert "promptBranch" not in more[-1]["messageMetadata"]


def test_the_old_branch_comes_back_by_switching(api, chat, fake_llm, two_turns):
    u1, a1, u2, a2 = two_turns
    fake_llm.script("Plums are purple.", "More on pears.")
    chunks(post(api, chat.pk, u1, a1, user("Tell me about plums")))
    reloaded = ui_messages(api, chat.pk)
    old = reloaded[2]["metadata"]["branch"]["storedMessageIds"][0]
    chat.switch_to(old)
    assert [m["id"] for m in ui_messages(api, chat.pk)] == [m["id"] for m in two_turns]
    # and the client on that branch goes on from it
    chunks(post(api, chat.pk, *two_turns, user("And more?")))
    assert said(fake_llm.requests[-1])[-3:] == [
        ("user", "Tell me about pears"),
        ("assistant", "Pears are green."),
        ("user", "And more?"),
    ]


def test_a_lone_new_message_on_a_chat_starts_it_anew(api, chat, fake_llm, two_turns):
    fake_llm.script("Grapes grow on vines.")
    first = user("Tell me about grapes")
    chunks(post(api, chat.pk, first))
    assert said(fake_llm.requests[-1]) == [("user", "Tell me about grapes")]
    assert [m.content for m in chat.transcript()] == [
        "Tell me about grapes",
        "Grapes grow on vines.",
    ]
    reloaded = ui_messages(api, chat.pk)
    assert reloaded[0]["metadata"]["branch"]["siblings"] == [two_turns[0]["id"], first["id"]]


def test_message_alone_follows_the_active_path(api, chat, fake_llm, two_turns):
    fake_llm.script("Cherries are small.")
    body = {"id": str(chat.pk), "message": user("Tell me about cherries")}
    chunks(api.post(url("ui-chat"), body, format="json"))
    assert len(chat.transcript()) == 6
    assert said(fake_llm.requests[-1])[0] == ("user", "Tell me about apples")


def test_the_sdk_edit_keeping_the_message_id(api, chat, fake_llm, two_turns):
    """``sendMessage({ text, messageId })``: the edited message keeps its id."""
    u1, a1, u2, a2 = two_turns
    fake_llm.script("Quinces are hard.")
    edited = {**u2, "parts": [{"type": "text", "text": "Tell me about quinces"}]}
    got = chunks(post(api, chat.pk, u1, a1, edited, messageId=u2["id"]))
    assert text_of(got) == "Quinces are hard."
    assert [m.content for m in chat.transcript()][2:] == [
        "Tell me about quinces",
        "Quinces are hard.",
    ]
    reloaded = ui_messages(api, chat.pk)
    assert reloaded[2]["id"] == u2["id"]
    assert reloaded[2]["metadata"]["branch"]["index"] == 1
    # the client goes on with the ids it has: the path through the edited message
    fake_llm.script("Quince jam.")
    chunks(post(api, chat.pk, u1, a1, edited, sent_as(reply_of(got)), user("Jam?")))
    assert [m.content for m in chat.transcript()][2:5] == [
        "Tell me about quinces",
        "Quinces are hard.",
        "Jam?",
    ]


def test_an_unknown_message_before_the_last_is_a_400(api, chat, fake_llm, two_turns):
    u1, a1, u2, a2 = two_turns
    made_up = user("never sent")
    refused = post(api, chat.pk, u1, made_up, user("Next"))
    assert refused.status_code == 400
    assert refused.content.decode() == (
        f"messages: message 1 ('{made_up['id']}') is not a message of the chat: only the "
        "last message may be new"
    )
    assert chat.messages.count() == 4
    assert len(fake_llm.requests) == 2


def test_a_prefix_out_of_the_chat_s_order_is_a_400(api, chat, fake_llm, two_turns):
    u1, a1, u2, a2 = two_turns
    refused = post(api, chat.pk, u1, u2, user("Next"))
    assert refused.status_code == 400
    assert refused.content.decode().startswith(
        "messages: the messages before the last are not a path of the chat"
    )
    assert chat.messages.count() == 4


def test_a_failed_run_the_client_kept_stands_for_nothing(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Fault(status=401, body={"error": {"message": "bad key"}}), "Fine now.")
    u1 = user("First try")
    failed = chunks(post(api, chat.pk, u1))
    assert any(c["type"] == "error" for c in failed)
    empty = {"id": failed[0]["messageId"], "role": "assistant", "parts": []}
    got = chunks(post(api, chat.pk, u1, empty, user("Second try")))
    assert text_of(got) == "Fine now."
    assert [m.content for m in chat.transcript()] == ["First try", "Second try", "Fine now."]


def test_regenerate_keeps_the_old_reply_as_an_alternative(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script("First answer.", "Second answer.", "Yes.")
    u1 = user("Question")
    first = reply_of(chunks(post(api, chat.pk, u1)))
    got = chunks(post(api, chat.pk, u1, trigger="regenerate-message", messageId=first["id"]))
    second = reply_of(got)
    assert second["text"] == "Second answer."
    old_id = Message.objects.get(chat=chat, content="First answer.").pk
    new_id = Message.objects.get(chat=chat, content="Second answer.").pk
    # the stream's end already says the alternatives (no reload needed to draw "< 2/2 >")
    assert got[-1]["messageMetadata"]["branch"] == {
        "index": 1,
        "count": 2,
        "siblings": [first["id"], second["id"]],
        "storedMessageIds": [old_id, new_id],
    }
    assert "promptBranch" not in got[-1]["messageMetadata"]  # one question
    assert (
        "branch"
        not in chunks(post(api, chat.pk, u1, sent_as(second), user("More?")))[-1]["messageMetadata"]
    )
    assert "First answer." not in json.dumps(fake_llm.requests[1].body)
    old = Message.objects.get(chat=chat, content="First answer.")
    new = Message.objects.get(chat=chat, content="Second answer.")
    assert (old.on_path, new.on_path) == (False, True)
    assert old.parent_id == new.parent_id
    reloaded = ui_messages(api, chat.pk)
    assert [m["id"] for m in reloaded][:2] == [u1["id"], second["id"]]
    assert reloaded[1]["metadata"]["branch"] == {
        "index": 1,
        "count": 2,
        "siblings": [first["id"], second["id"]],
        "storedMessageIds": [old.pk, new.pk],
    }
    chat.switch_to(old)
    reloaded = ui_messages(api, chat.pk)
    assert [m["id"] for m in reloaded] == [u1["id"], first["id"]]
    assert reloaded[1]["metadata"]["branch"]["index"] == 0


def test_continuing_a_reply_another_tab_left_takes_its_branch_back(api, chat, fake_llm, two_turns):
    """A second tab edited the second question; this tab still shows the pears: its next
    message continues the pears' reply, which the path takes back whole."""
    from django_llmchat.testing.invariants import assert_one_path

    u1, a1, u2, a2 = two_turns
    fake_llm.script("Plums are purple.", "Pears grow on trees.")
    chunks(post(api, chat.pk, u1, a1, user("Tell me about plums")))  # the other tab
    got = chunks(post(api, chat.pk, u1, a1, u2, a2, user("Where do they grow?")))
    assert text_of(got) == "Pears grow on trees."
    expected = [
        ("user", "Tell me about apples"),
        ("assistant", "Apples are red."),
        ("user", "Tell me about pears"),
        ("assistant", "Pears are green."),
        ("user", "Where do they grow?"),
    ]
    assert said(fake_llm.requests[-1]) == expected
    path = list(chat.transcript())
    assert [(m.role, m.content) for m in path] == [*expected, ("assistant", text_of(got))]
    assert [m["id"] for m in ui_messages(api, chat.pk)][:4] == [m["id"] for m in two_turns]
    assert_one_path(chat)


def test_continuing_a_regenerated_reply_the_branch_picker_chose(api, chat, fake_llm):
    """assistant-ui's BranchPicker switched back to the first answer in the page alone:
    the next message follows it, and the path reads user, assistant, user, assistant."""
    from django_llmchat.testing.invariants import assert_one_path

    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script("First answer.", "Second answer.", "Yes.")
    u1 = user("Question")
    first = reply_of(chunks(post(api, chat.pk, u1)))
    chunks(post(api, chat.pk, u1, trigger="regenerate-message", messageId=first["id"]))
    chunks(post(api, chat.pk, u1, sent_as(first), user("Sure?")))
    assert said(fake_llm.requests[-1]) == [
        ("user", "Question"),
        ("assistant", "First answer."),
        ("user", "Sure?"),
    ]
    path = list(chat.transcript())
    assert [m.role for m in path] == ["user", "assistant", "user", "assistant"]
    assert [m.content for m in path] == ["Question", "First answer.", "Sure?", "Yes."]
    assert_one_path(chat)


def test_regenerating_a_reply_off_the_path_s_end_is_a_400(api, chat, fake_llm, two_turns):
    u1, a1, u2, a2 = two_turns
    refused = post(api, chat.pk, u1, trigger="regenerate-message", messageId=a1["id"])
    assert refused.status_code == 400
    assert refused.content.decode().startswith(
        "messages: only the reply at the end of the chat's active path can be regenerated"
    )
    assert chat.runs.count() == 2


def test_feedback_of_the_requesting_user_is_in_the_metadata(api, clients, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script("Answer.")
    chunks(post(api, chat.pk, user("Question")))
    reply = chat.messages.get(role="assistant")
    assert "feedback" not in ui_messages(api, chat.pk)[1]["metadata"]
    rated = api.post(
        url("message-feedback", pk=chat.pk, message_id=reply.pk),
        {"rating": -1, "comment": "Too short."},
        format="json",
    )
    assert rated.status_code == 201
    got = ui_messages(api, chat.pk)[1]["metadata"]
    assert got["feedback"] == {"rating": -1, "comment": "Too short."}
    assert got["storedMessageId"] == reply.pk
    # another user's rating of the same reply is not the owner's
    Feedback.objects.filter(message=reply).update(user=clients.other.user)
    assert "feedback" not in ui_messages(api, chat.pk)[1]["metadata"]


def test_a_reload_with_branches_takes_constant_queries(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            ui_messages(api, chat.pk)
        return len(queries)

    fake_llm.script(*[Reply(f"Answer {n}.") for n in range(8)])
    u1 = user("Question")
    first = reply_of(chunks(post(api, chat.pk, u1)))
    chunks(post(api, chat.pk, u1, trigger="regenerate-message", messageId=first["id"]))
    few = count()
    path = [u1, sent_as({"id": ui_messages(api, chat.pk)[1]["id"], "text": ""})]
    for n in range(3):
        u = user(f"More {n}")
        got = reply_of(chunks(post(api, chat.pk, *path, u)))
        path += [u, sent_as(got)]
        chunks(post(api, chat.pk, *path[:-1], trigger="regenerate-message", messageId=got["id"]))
        path[-1] = sent_as({"id": ui_messages(api, chat.pk)[-1]["id"], "text": ""})
    assert count() == few


def test_a_branch_while_a_run_is_in_progress_is_a_409(api, chat, fake_llm, two_turns):
    u1, a1, u2, a2 = two_turns
    running = Run.objects.create(chat=chat, status=Run.RUNNING)
    refused = post(api, chat.pk, u1, a1, user("Tell me about plums"))
    assert refused.status_code == 409
    assert refused.content.decode().startswith("The chat has a run in progress")
    assert chat.messages.count() == 4
    assert [m.content for m in chat.transcript()][2] == "Tell me about pears"
    running.delete()


def test_placing_a_message_takes_constant_queries(api, chat, fake_llm):
    """Where a sent message goes is read in the same queries however long the chat."""
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(*[Reply(f"Answer {n}.") for n in range(6)])
    path: list = []

    def turn(n: int) -> None:
        u = user(f"Question {n}")
        path.extend([u, sent_as(reply_of(chunks(post(api, chat.pk, *path, u))))])

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert placement_of(chat, path[:2]).parent is not None  # a branch: all read
            assert placement_of(chat, path).append
        return len(queries)

    turn(0)
    turn(1)
    few = count()
    for n in range(2, 6):
        turn(n)
    assert count() == few
