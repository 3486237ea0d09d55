"""``GET ui/chat/{id}/messages``: a stored chat as the AI SDK's ``UIMessage[]`` (the SDK's
own schema checks them in ``tests/js/ui-chat.test.mjs``), and ``GET ui/chat/{id}/stream``
replaying a run that waits for a decision."""

import base64

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_llmchat.models import Message, Run, ToolCall
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as ScriptedCall
from django_llmchat.tools import tool

from .conftest import url
from .test_ui_chat import chunks, post, user
from .test_views_runs import api_lookup, api_transfer

pytestmark = pytest.mark.django_db


@tool
def api_broken(city: str) -> str:
    """Always fails."""
    raise RuntimeError("the service is down")


def messages(api, chat_id) -> list:
    response = api.get(url("ui-chat-messages", id=str(chat_id)))
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    return response.json()


def test_a_plain_reply(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("Bonjour !", usage={"input_tokens": 5, "output_tokens": 3}))
    streamed = chunks(post(api, chat.pk, user("Say hello", id="client-u1")))
    run = chat.runs.get()
    reply = chat.messages.get(role="assistant")
    got = messages(api, chat.pk)
    assert got == [
        {"id": "client-u1", "role": "user", "parts": [{"type": "text", "text": "Say hello"}]},
        {
            "id": f"run-{run.pk}",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {"type": "text", "text": "Bonjour !", "state": "done"},
            ],
            "metadata": {
                "chatId": chat.pk,
                "runId": str(run.pk),
                "storedMessageId": reply.pk,
                "modelId": "gpt-4.1-mini",  # the model that answered
                "provider": "openai",
                "status": "succeeded",
                # the totals the stream's finish chunk carried
                "tokens": streamed[-1]["messageMetadata"]["tokens"],
                "cost": streamed[-1]["messageMetadata"]["cost"],
            },
        },
    ]
    assert got[1]["id"] == streamed[0]["messageId"]  # the id the stream gave it
    assert got[1]["metadata"]["tokens"]["input_tokens"] == 5
    # the client's user id was kept; the same answer every time
    assert chat.messages.get(role="user").raw == {"ui_message_id": "client-u1"}
    assert messages(api, chat.pk) == got
    # by the client's own chat id too
    chat.client_id = "spa-1"
    chat.save()
    assert messages(api, "spa-1") == got


def test_a_user_message_without_a_client_id_has_a_stable_server_id(api, chat):
    prompt = chat.add_message("user", "typed in the admin")
    chat.add_message("system", "be brief")
    assert messages(api, chat.pk) == [
        {
            "id": f"msg-{prompt.pk}",
            "role": "user",
            "parts": [{"type": "text", "text": "typed in the admin"}],
        }
    ]


def test_a_multi_step_tool_run_is_one_assistant_message(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_lookup)
    fake_llm.script(
        Reply("Let me look.", tool_calls=[ScriptedCall("api_lookup", {"city": "Paris"}, "c_p")]),
        Reply("Big."),
    )
    streamed = chunks(post(api, chat.pk, user("How big is Paris?")))
    tool_call_id = next(c for c in streamed if c["type"] == "tool-input-start")["toolCallId"]
    _, reply = messages(api, chat.pk)
    assert reply["parts"] == [
        {"type": "step-start"},
        {"type": "text", "text": "Let me look.", "state": "done"},
        {
            "type": "tool-api_lookup",
            "toolCallId": tool_call_id,
            "state": "output-available",
            "input": {"city": "Paris"},
            "output": {"city": "Paris", "population": 2100000},
        },
        {"type": "step-start"},
        {"type": "text", "text": "Big.", "state": "done"},
    ]
    last = chat.messages.filter(role="assistant").last()
    assert reply["metadata"]["storedMessageId"] == last.pk
    assert reply["metadata"]["status"] == "succeeded"


def test_reasoning_is_a_reasoning_part(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("42.", thinking="Let me think about it."))
    chunks(post(api, chat.pk, user("The answer?")))
    _, reply = messages(api, chat.pk)
    assert reply["parts"] == [
        {"type": "step-start"},
        {"type": "reasoning", "text": "Let me think about it.", "state": "done"},
        {"type": "text", "text": "42.", "state": "done"},
    ]


def test_attachments_are_file_parts(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script("A note.")
    data = base64.b64encode(b"hello file").decode()
    sent = {
        "id": "u-file",
        "role": "user",
        "parts": [
            {
                "type": "file",
                "mediaType": "text/plain",
                "filename": "note.txt",
                "url": f"data:text/plain;base64,{data}",
            },
            {"type": "text", "text": "What is this?"},
        ],
    }
    chunks(post(api, chat.pk, sent))
    attachment = chat.messages.get(role="user").attachments.get()
    prompt, _ = messages(api, chat.pk)
    assert prompt["id"] == "u-file"
    assert prompt["parts"] == [
        {"type": "text", "text": "What is this?"},
        {
            "type": "file",
            "mediaType": "text/plain",
            "url": f"http://testserver{attachment.file.url}",
            "filename": "note.txt",
        },
    ]


def test_a_pending_approval_can_be_answered_from_the_reloaded_message(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_transfer)
    fake_llm.script(Reply(tool_calls=[ScriptedCall("api_transfer", {"amount": 5}, "call_t")]))
    streamed = chunks(post(api, chat.pk, user("Pay 5")))
    _, reply = messages(api, chat.pk)
    run = chat.runs.get()
    assert reply["id"] == f"run-{run.pk}"
    assert reply["metadata"]["status"] == "awaiting_approval"
    part = reply["parts"][-1]
    tool_call_id = next(c for c in streamed if c["type"] == "tool-input-start")["toolCallId"]
    assert part == {
        "type": "tool-api_transfer",
        "toolCallId": tool_call_id,
        "state": "approval-requested",
        "input": {"amount": 5},
        "approval": {"id": "call_t"},
    }
    # what the SDK sends once the user approves: the reloaded message, answered
    part.update(state="approval-responded", approval={"id": "call_t", "approved": True})
    fake_llm.script(Reply("Paid."))
    resumed = chunks(post(api, chat.pk, reply))
    assert resumed[0]["messageId"] == reply["id"]
    assert ToolCall.objects.get(call_id="call_t").approval == "approved"
    _, reply = messages(api, chat.pk)
    assert [p["type"] for p in reply["parts"]] == [
        "step-start",
        "tool-api_transfer",
        "step-start",
        "text",
    ]
    assert reply["parts"][1] == {
        "type": "tool-api_transfer",
        "toolCallId": tool_call_id,
        "state": "output-available",
        "input": {"amount": 5},
        "output": "moved 5",
        "approval": {"id": "call_t", "approved": True},
    }
    assert reply["metadata"]["status"] == "succeeded"


def test_calls_sharing_a_vendor_id_reload_as_the_stream_named_them(api, chat, fake_llm):
    """A vendor repeated a call id: the reload gives each call the stream's own
    ``toolCallId`` and approval id (``<id>#2``), and answering both from the reloaded
    message decides each call."""
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_transfer)
    fake_llm.script(
        Reply(
            tool_calls=[
                ScriptedCall("api_transfer", {"amount": 5}, "call_same"),
                ScriptedCall("api_transfer", {"amount": 7}, "call_same"),
            ]
        )
    )
    streamed = chunks(post(api, chat.pk, user("Pay 5 and 7")))
    requested = [c for c in streamed if c["type"] == "tool-approval-request"]
    _, reply = messages(api, chat.pk)
    parts = [p for p in reply["parts"] if p["type"] == "tool-api_transfer"]
    assert len({p["toolCallId"] for p in parts}) == 2
    assert [p["toolCallId"] for p in parts] == [c["toolCallId"] for c in requested]
    assert [p["approval"]["id"] for p in parts] == [c["approvalId"] for c in requested]
    assert [p["approval"]["id"] for p in parts] == ["call_same", "call_same#2"]
    parts[0].update(state="approval-responded", approval={"id": "call_same", "approved": True})
    parts[1].update(state="approval-responded", approval={"id": "call_same#2", "approved": False})
    fake_llm.script(Reply("Paid 5."))
    chunks(post(api, chat.pk, reply))
    decided = list(ToolCall.objects.order_by("id").values_list("arguments", "approval"))
    assert decided == [({"amount": 5}, "approved"), ({"amount": 7}, "denied")]


def test_a_denied_call_is_output_denied(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_transfer)
    fake_llm.script(Reply(tool_calls=[ScriptedCall("api_transfer", {"amount": 7}, "call_d")]))
    streamed = chunks(post(api, chat.pk, user("Pay 7")))
    tool_call_id = next(c for c in streamed if c["type"] == "tool-input-start")["toolCallId"]
    part = {
        "type": "tool-api_transfer",
        "toolCallId": "call_d",
        "state": "approval-responded",
        "approval": {"id": "call_d", "approved": False},
    }
    fake_llm.script(Reply("Not paid."))
    chunks(post(api, chat.pk, {"id": "m", "role": "assistant", "parts": [part]}))
    _, reply = messages(api, chat.pk)
    assert reply["parts"][1] == {
        "type": "tool-api_transfer",
        "toolCallId": tool_call_id,
        "state": "output-denied",
        "input": {"amount": 7},
        "approval": {"id": "call_d", "approved": False},
    }
    assert reply["parts"][-1] == {"type": "text", "text": "Not paid.", "state": "done"}


def test_a_failed_tool_is_output_error(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_broken)
    fake_llm.script(
        Reply(tool_calls=[ScriptedCall("api_broken", {"city": "Oslo"}, "call_b")]),
        Reply("It failed."),
    )
    streamed = chunks(post(api, chat.pk, user("Try it")))
    error = next(c for c in streamed if c["type"] == "tool-output-error")
    _, reply = messages(api, chat.pk)
    assert reply["parts"][1] == {
        "type": "tool-api_broken",
        "toolCallId": error["toolCallId"],
        "state": "output-error",
        "input": {"city": "Oslo"},
        "errorText": error["errorText"],
    }


def test_a_run_in_progress_shows_its_stored_steps(api, chat):
    prompt = chat.add_message("user", "Look it up")
    run = Run.objects.create(chat=chat, prompt=prompt, status=Run.RUNNING, attempt=1, steps=1)
    step = chat.add_message("assistant", "Looking.", run=run, finish_reason="tool_calls")
    ToolCall.objects.create(message=step, call_id="c1", name="api_lookup", arguments={"city": "X"})
    _, reply = messages(api, chat.pk)
    assert reply["id"] == f"run-{run.pk}"
    assert reply["metadata"]["status"] == "running"
    assert reply["parts"] == [
        {"type": "step-start"},
        {"type": "text", "text": "Looking.", "state": "done"},
        {
            "type": "tool-api_lookup",
            "toolCallId": "c1",
            "state": "input-available",
            "input": {"city": "X"},
        },
    ]


def test_summaries_and_system_messages_are_left_out(api, chat):
    first = chat.add_message("user", "one")
    chat.add_message("system", "rules")
    Message.objects.create(chat=chat, role="assistant", content="summary", summary_until=first)
    assert [m["id"] for m in messages(api, chat.pk)] == [f"msg-{first.pk}"]


def test_other_users_chats_and_unknown_chats_are_404s(api, chat, clients):
    for client, chat_id in ((clients.other, chat.pk), (api, "never-made"), (api, 10**9)):
        response = client.get(url("ui-chat-messages", id=str(chat_id)))
        assert response.status_code == 404
        assert response["Content-Type"] == "application/json"
        assert "detail" in response.json()
    assert clients.anon.get(url("ui-chat-messages", id=str(chat.pk))).status_code in (401, 403)


def test_the_query_count_does_not_grow_with_the_messages(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_lookup)

    def round_trip():
        fake_llm.script(
            Reply(tool_calls=[ScriptedCall("api_lookup", {"city": "Rome"})]), Reply("Fine.")
        )
        # as the SDK sends it: the chat so far, then the new message
        chunks(post(api, chat.pk, *messages(api, chat.pk), user("Rome?")))

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            messages(api, chat.pk)
        return len(ctx.captured_queries)

    round_trip()
    once = count()
    for _ in range(3):
        round_trip()
    assert len(messages(api, chat.pk)) == 8
    assert count() == once


def test_a_reconnect_to_a_run_awaiting_approval_replays_it(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_transfer)
    fake_llm.script(
        Reply("Sure.", tool_calls=[ScriptedCall("api_transfer", {"amount": 3}, "call_r")])
    )
    streamed = chunks(post(api, chat.pk, user("Pay 3")))
    replay = chunks(api.get(url("ui-chat-stream", id=str(chat.pk))))
    assert replay[0] == streamed[0]  # the same message: the client replaces it
    tool_call_id = next(c for c in streamed if c["type"] == "tool-input-start")["toolCallId"]
    assert [c["type"] for c in replay] == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "tool-input-available",
        "tool-approval-request",
        "finish-step",
        "finish",
    ]
    assert replay[6] == {
        "type": "tool-approval-request",
        "approvalId": "call_r",
        "toolCallId": tool_call_id,
    }
    assert replay[-1]["finishReason"] == "tool-calls"
    assert replay[-1]["messageMetadata"]["status"] == "awaiting_approval"
    # once decided and finished, nothing to resume
    part = {
        "type": "tool-api_transfer",
        "toolCallId": tool_call_id,
        "state": "approval-responded",
        "approval": {"id": "call_r", "approved": True},
    }
    fake_llm.script(Reply("Paid."))
    chunks(post(api, chat.pk, {"id": replay[0]["messageId"], "role": "assistant", "parts": [part]}))
    assert api.get(url("ui-chat-stream", id=str(chat.pk))).status_code == 204


# -- vendor ids repeated across steps and runs ----------------------------------------------------
PROVIDERS_THAT_RESTART_IDS = [
    ("deepseek", "deepseek-chat"),  # Chat Completions: the call id streams the call
    ("anthropic", "claude-sonnet-4-5"),
    ("gemini", "gemini-2.5-flash"),
]


def tool_call_ids(streamed: list) -> list:
    return [c["toolCallId"] for c in streamed if c["type"] == "tool-input-available"]


def reloaded_ids(message: dict) -> list:
    return [p["toolCallId"] for p in message["parts"] if p["type"].startswith("tool-")]


@pytest.mark.parametrize("provider, model", PROVIDERS_THAT_RESTART_IDS)
def test_a_call_id_repeated_across_steps_and_runs_is_one_tool_call_id_live_and_reloaded(
    api, owner, fake_llm, provider, model
):
    """A vendor that numbers its calls from ``call_0`` in every step: each call has its own
    ``toolCallId`` in the chat, the same in the stream and in the reload."""
    from django_llmchat.models import Chat

    fake_llm.configure(provider, model)
    chat = Chat.objects.create(user=owner, provider=provider, model_id=model)
    chat.with_tools(api_lookup)
    fake_llm.script(
        Reply(tool_calls=[ScriptedCall("api_lookup", {"city": "Paris"}, "call_0")]),
        Reply(tool_calls=[ScriptedCall("api_lookup", {"city": "Rome"}, "call_0")]),
        Reply("Both big."),
        Reply(tool_calls=[ScriptedCall("api_lookup", {"city": "Oslo"}, "call_0")]),
        Reply("Small."),
    )
    first = chunks(post(api, chat.pk, user("Paris and Rome?")))
    _, reply = messages(api, chat.pk)
    assert reloaded_ids(reply) == tool_call_ids(first)  # the stream's ids, reloaded
    second = chunks(post(api, chat.pk, *messages(api, chat.pk), user("And Oslo?")))
    live = [tool_call_ids(first), tool_call_ids(second)]
    for streamed in (first, second):  # each call's chunks say one id
        starts = [c["toolCallId"] for c in streamed if c["type"] == "tool-input-start"]
        outputs = [c["toolCallId"] for c in streamed if c["type"] == "tool-output-available"]
        assert starts == outputs == tool_call_ids(streamed)
    assert len(live[0]) == 2 and len(live[1]) == 1
    assert len({*live[0], *live[1]}) == 3 == ToolCall.objects.filter(chat=chat).count()
    _, reply_one, _, reply_two = messages(api, chat.pk)
    assert [reloaded_ids(reply_one), reloaded_ids(reply_two)] == live


def test_approvals_of_a_call_id_repeated_across_steps_keep_one_tool_call_id_each(
    api, owner, fake_llm
):
    """The run continues after an approval in the client's message: a later step's call
    with the same vendor id is a new part, never a second part with the first's id."""
    from django_llmchat.models import Chat

    fake_llm.configure("deepseek", "deepseek-chat")
    chat = Chat.objects.create(user=owner, provider="deepseek", model_id="deepseek-chat")
    chat.with_tools(api_transfer)
    fake_llm.script(Reply(tool_calls=[ScriptedCall("api_transfer", {"amount": 1}, "call_0")]))
    streamed = chunks(post(api, chat.pk, user("Pay 1, then 2")))
    (first_id,) = tool_call_ids(streamed)
    _, waiting = messages(api, chat.pk)
    assert reloaded_ids(waiting) == [first_id]
    part = next(p for p in waiting["parts"] if p["type"] == "tool-api_transfer")
    part.update(state="approval-responded", approval={**part["approval"], "approved": True})
    fake_llm.script(
        Reply(tool_calls=[ScriptedCall("api_transfer", {"amount": 2}, "call_0")]),
    )
    resumed = chunks(post(api, chat.pk, waiting))
    assert resumed[0]["messageId"] == waiting["id"]  # the same UI message goes on
    (second_id,) = tool_call_ids(resumed)
    assert second_id != first_id
    requested = next(c for c in resumed if c["type"] == "tool-approval-request")
    assert requested["toolCallId"] == second_id
    _, reply = messages(api, chat.pk)
    assert reloaded_ids(reply) == [first_id, second_id]
    # the second approval, answered from the reloaded message, decides the second call
    second = [p for p in reply["parts"] if p["type"] == "tool-api_transfer"][1]
    assert second["approval"]["id"] == requested["approvalId"]
    second.update(state="approval-responded", approval={**second["approval"], "approved": False})
    fake_llm.script(Reply("Paid 1."))
    chunks(post(api, chat.pk, reply))
    calls = ToolCall.objects.filter(chat=chat).order_by("id")
    assert list(calls.values_list("approval", flat=True)) == ["approved", "denied"]
    _, final = messages(api, chat.pk)
    assert reloaded_ids(final) == [first_id, second_id]


@tool
def api_not_a_number(city: str):
    """Returns a value JSON cannot carry."""
    return {"city": city, "ratio": float("nan"), "inf": [float("inf")]}


def test_a_result_json_cannot_carry_reloads_and_lists(api, chat, fake_llm):
    """A NaN or an infinity in a tool's return value is stored as text the model reads;
    the reload and the REST list answer 200 with it."""
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_not_a_number)
    fake_llm.script(
        Reply(tool_calls=[ScriptedCall("api_not_a_number", {"city": "Paris"}, "c_n")]),
        Reply("Odd."),
    )
    chunks(post(api, chat.pk, user("Ratio of Paris?")))
    _, reply = messages(api, chat.pk)
    part = next(p for p in reply["parts"] if p["type"] == "tool-api_not_a_number")
    assert part["state"] == "output-available"
    listed = api.get(url("chat-messages", pk=chat.pk))
    assert listed.status_code == 200, listed.content
    result = chat.messages.get(role="tool")
    assert "NaN" in result.content
    # the model was sent it as text too
    assert "NaN" in str(fake_llm.last_request.body)
