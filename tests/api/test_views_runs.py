"""Tool-call approvals, cancellation and usage totals."""

from decimal import Decimal

import pytest

from django_llmchat.models import Chat, Message, ToolCall, Usage
from django_llmchat.testing import Reply
from django_llmchat.testing import ToolCall as ScriptedCall
from django_llmchat.tools import tool
from tests.factories import build_transcript

from .conftest import sse_frames, url

pytestmark = pytest.mark.django_db


@tool(requires_approval=True)
def api_transfer(amount: int) -> str:
    """Moves money"""
    return f"moved {amount}"


@pytest.fixture
def paused(chat, fake_llm):
    """A chat whose run waits for approval of two calls."""
    fake_llm.configure("openai", "gpt-4.1-mini", TASKS_EAGER_WITHOUT_BROKER="inline")
    chat.with_tools(api_transfer)
    fake_llm.script(
        Reply(
            tool_calls=[
                ScriptedCall("api_transfer", {"amount": 5}, call_id="call_a"),
                ScriptedCall("api_transfer", {"amount": 7}, call_id="call_b"),
            ]
        )
    )
    chat.ask("Pay both")
    chat.refresh_from_db()
    assert chat.status == "awaiting_approval"
    assert chat.last_run.status == "awaiting_approval"
    return chat


def test_approve_and_deny_then_the_run_resumes(
    api, paused, fake_llm, django_capture_on_commit_callbacks
):
    chat = paused
    first = api.post(url("tool-call-approve", pk=chat.pk, call_id="call_a"))
    assert first.status_code == 202, first.content
    assert first.json()["approval"] == "approved" and first.json()["resumed"] is False
    assert ToolCall.objects.get(call_id="call_a").approval == "approved"
    assert len(fake_llm.requests) == 1  # still waiting for call_b

    fake_llm.script(Reply("Paid 5, not 7."))
    with django_capture_on_commit_callbacks(execute=True):
        second = api.post(url("tool-call-deny", pk=chat.pk, call_id="call_b"))
    assert second.status_code == 202
    assert second.json()["resumed"] is True
    assert [m.content for m in chat.transcript()][-1] == "Paid 5, not 7."
    results = {m.tool_call_id: m.content for m in Message.objects.filter(chat=chat, role="tool")}
    assert results["call_a"] == "moved 5" and "denied" in results["call_b"]


def test_answered_calls_conflict_unknown_calls_404(api, paused):
    chat = paused
    assert api.post(url("tool-call-approve", pk=chat.pk, call_id="nope")).status_code == 404
    assert api.post(url("tool-call-approve", pk=chat.pk, call_id="call_a")).status_code == 202
    again = api.post(url("tool-call-deny", pk=chat.pk, call_id="call_a"))
    assert again.status_code == 409
    assert "already been answered" in again.json()["detail"]


def test_a_call_with_a_result_conflicts(api, chat):
    build_transcript(chat, 1, with_attachments=False)
    assert api.post(url("tool-call-approve", pk=chat.pk, call_id="call_0")).status_code == 409


def test_approval_can_stream_the_resumed_run(api, paused, fake_llm):
    chat = paused
    api.post(url("tool-call-deny", pk=chat.pk, call_id="call_a"))
    fake_llm.script(Reply("Nothing paid."))
    response = api.post(
        url("tool-call-deny", pk=chat.pk, call_id="call_b"), HTTP_ACCEPT="text/event-stream"
    )
    assert response.status_code == 200
    frames = sse_frames(b"".join(response.streaming_content).decode())
    assert frames[-1]["event"] == "run_finished"
    assert "Nothing paid." == "".join(
        f["data"]["content"] for f in frames if f["event"] == "text_delta"
    )


def test_approving_while_running_conflicts(api, paused):
    from django_llmchat.models import Run

    Run.objects.filter(chat=paused).update(status="running")
    response = api.post(url("tool-call-approve", pk=paused.pk, call_id="call_a"))
    assert response.status_code == 409
    assert ToolCall.objects.get(call_id="call_a").approval == ""  # nothing was recorded


def test_cancel(api, chat):
    from datetime import timedelta

    from django.utils import timezone

    from django_llmchat.models import Run

    response = api.post(url("chat-cancel", pk=chat.pk))
    assert response.status_code == 409
    run = Run.objects.create(
        chat=chat, status="running", attempt=1, lease_expires_at=timezone.now() + timedelta(60)
    )
    Chat.objects.filter(pk=chat.pk).update(status="running", active_run=run)
    response = api.post(url("chat-cancel", pk=chat.pk))
    assert response.status_code == 202
    assert response.json() == {"status": "running", "cancel_requested": True}
    assert Chat.objects.get(pk=chat.pk).cancel_requested
    again = api.post(url("chat-cancel", pk=chat.pk))  # the first request won
    assert again.status_code == 409


def test_cancel_of_a_run_waiting_for_approval_answers_its_calls(api, paused):
    response = api.post(url("chat-cancel", pk=paused.pk))
    assert response.status_code == 202 and response.json()["status"] == "idle"
    run = paused.runs.get()
    assert run.status == "cancelled"
    results = Message.objects.filter(chat=paused, role="tool").order_by("id")
    assert [m.tool_call_id for m in results] == ["call_a", "call_b"]
    assert all("cancelled" in m.content for m in results)  # no call is left without a result


@pytest.mark.django_db(transaction=True)
def test_concurrent_decisions_and_cancels_one_wins(owner, fake_llm, monkeypatch):
    import threading

    from django.db import connection
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from django_llmchat.api import messages as views

    if connection.vendor != "postgresql":
        pytest.skip("eight requests writing at once need a server database")
    fake_llm.configure("openai", "gpt-4.1-mini")
    resumed = []
    monkeypatch.setattr(views, "_resume_later", lambda chat, run: resumed.append(run.pk))
    token = Token.objects.create(user=owner).key
    chat = Chat.objects.create(user=owner, tools=["api_transfer"])
    fake_llm.script(Reply(tool_calls=[ScriptedCall("api_transfer", {"amount": 5}, call_id="c1")]))
    chat.ask("Pay")
    assert Chat.objects.get(pk=chat.pk).status == "awaiting_approval"

    def race(path_for, n=8):
        barrier = threading.Barrier(n)
        codes = []

        def one(i):
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
            try:
                barrier.wait()
                codes.append(client.post(path_for(i)).status_code)
            finally:
                connection.close()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        return sorted(codes)

    codes = race(
        lambda i: url("tool-call-approve" if i % 2 else "tool-call-deny", pk=chat.pk, call_id="c1")
    )
    assert codes == [202] + [409] * 7
    assert ToolCall.objects.get(chat=chat).approval in ("approved", "denied")
    assert chat.runs.get().status == "queued"  # resumed by the one decision
    assert resumed == [chat.runs.get().pk]
    assert race(lambda i: url("chat-cancel", pk=chat.pk)) == [202] + [409] * 7
    assert chat.runs.get().status == "cancelled"


def test_runs_list_and_detail_are_the_owners_alone(api, clients, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    fake_llm.script(Reply("One.", usage={"input_tokens": 4, "output_tokens": 2}))
    chat.ask("First?")
    run = chat.last_run
    listing = api.get(url("chat-runs", pk=chat.pk))
    assert listing.status_code == 200
    [row] = listing.json()["results"]
    assert row["id"] == run.pk and row["status"] == "succeeded" and row["steps"] == 1
    assert row["tokens"]["input_tokens"] == 4 and row["tokens"]["total_tokens"] == 6
    reply = api.get(url("chat-messages", pk=chat.pk)).json()["results"][-1]
    assert row["tokens"] == reply["tokens"] and row["cost"] == reply["cost"]
    assert row["prompt"] == run.prompt_id and row["error"] == ""
    detail = api.get(url("run-detail", pk=run.pk))
    assert detail.status_code == 200 and detail.json() == row
    assert api.get(url("chat-detail", pk=chat.pk)).json()["last_run"]["id"] == run.pk
    # another user sees neither
    assert clients.other.get(url("chat-runs", pk=chat.pk)).status_code == 404
    assert clients.other.get(url("run-detail", pk=run.pk)).status_code == 404


@tool
def api_lookup(city: str) -> dict:
    """Looks a city up"""
    if city == "Atlantis":
        raise ValueError("no such city")
    return {"city": city, "population": 2_100_000}


def test_the_stream_carries_tool_results_stored_ids_and_costs(api, chat, fake_llm):
    from django_llmchat.models import LLMModel

    LLMModel.objects.update_or_create(
        provider="openai",
        model_id="gpt-4.1-mini",
        defaults={"name": "mini", "pricing": {"input_mtok": "0.40", "output_mtok": "1.60"}},
    )
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_lookup)
    fake_llm.script(
        Reply(
            tool_calls=[
                ScriptedCall("api_lookup", {"city": "Paris"}, call_id="call_p"),
                ScriptedCall("api_lookup", {"city": "Atlantis"}, call_id="call_x"),
            ],
            usage={"input_tokens": 1000, "output_tokens": 100},
        ),
        Reply("Paris has 2.1 million people.", usage={"input_tokens": 2000, "output_tokens": 10}),
    )
    response = api.post(
        url("chat-messages", pk=chat.pk),
        {"content": "How big?"},
        format="json",
        HTTP_ACCEPT="text/event-stream",
    )
    frames = sse_frames(b"".join(response.streaming_content).decode())
    by_type: dict[str, list] = {}
    for f in frames:
        by_type.setdefault(f["event"], []).append(f["data"])
    calls = {c.call_id: c for c in ToolCall.objects.filter(chat=chat)}
    results = by_type["tool_result_done"]
    assert [r["call_id"] for r in results] == ["call_p", "call_x"]
    ok, failed = results
    assert ok["name"] == "api_lookup" and ok["error_type"] is None
    assert ok["message_id"] == calls["call_p"].get_result().pk
    assert '"population": 2100000' in ok["result"]
    assert failed["error_type"] and failed["message_id"] == calls["call_x"].get_result().pk
    # the results come after the step that asked for them, before the next step
    names = [f["event"] for f in frames]
    assert names.index("step_finished") < names.index("tool_result_done")
    steps = by_type["step_finished"]
    replies = list(chat.messages.filter(role="assistant").order_by("position", "id"))
    assert [s["message_id"] for s in steps] == [m.pk for m in replies]
    assert [s["step"] for s in steps] == [1, 2]
    assert steps[0]["finish_reason"] == "tool_calls" and steps[1]["finish_reason"] == "stop"
    assert Decimal(steps[0]["cost"]) == Decimal("0.00056")  # 1000 * 0.40/M + 100 * 1.60/M
    assert steps[0]["token_usage"]["input_tokens"] == 1000
    finished = frames[-1]["data"]
    assert finished["message_id"] == replies[-1].pk
    assert Decimal(finished["cost"]) == Decimal(steps[0]["cost"]) + Decimal(steps[1]["cost"])
    assert finished["token_usage"]["input_tokens"] == 3000
    assert Decimal(finished["cost"]) == Usage.objects.filter(chat=chat).cost().total


def test_a_paused_run_streams_its_approval_requests(api, chat, fake_llm):
    fake_llm.configure("openai", "gpt-4.1-mini")
    chat.with_tools(api_transfer)
    fake_llm.script(
        Reply(tool_calls=[ScriptedCall("api_transfer", {"amount": 5}, call_id="call_t")])
    )
    response = api.post(
        url("chat-messages", pk=chat.pk),
        {"content": "Pay"},
        format="json",
        HTTP_ACCEPT="text/event-stream",
    )
    frames = sse_frames(b"".join(response.streaming_content).decode())
    asked = [f["data"] for f in frames if f["event"] == "tool_approval_request"]
    assert asked == [
        {
            "role": "assistant",
            "call_id": "call_t",
            "name": "api_transfer",
            "arguments": '{"amount": 5}',
        }
    ]
    assert frames[-1]["data"]["status"] == "awaiting_approval"
    assert not [f for f in frames if f["event"] == "tool_result_done"]
