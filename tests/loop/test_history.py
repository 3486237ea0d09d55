"""History policies against the loopback server: every request fits the registered window
(checked on the recorded requests, counted by the fake vendor's own tokenizer), tool calls
travel with their results, system and pinned messages always go, summaries are stored and
reused, and a vendor's context-length 400 leads to one compaction and a reply."""

import json
import logging

import pytest

from django_llmchat.errors import ArgumentError, ContextLengthExceededError
from django_llmchat.events import ContextCompacted
from django_llmchat.models import Chat, LLMModel, Message, ToolCall, Usage
from django_llmchat.testing import Fault, Reply
from tests.loop.test_history_policy import (  # keep_last_four: named by its dotted path
    REGISTRIES,
    keep_last_four,  # noqa: F401
)

pytestmark = pytest.mark.django_db(transaction=True)

WINDOW, OUTPUT = 2000, 200
LIMIT = WINDOW - OUTPUT  # what the fake vendor accepts as input
PROVIDERS = [
    ("openai", "gpt-4.1-mini", {}),
    ("openai", "gpt-4.1-mini", {"api": "chat_completions"}),
    ("anthropic", "claude-haiku-4-5", {}),
    ("gemini", "gemini-2.5-flash", {}),
]
NOT_TEXT = {"role", "type", "id", "call_id", "tool_use_id", "tool_call_id", "model", "status"}
# OpenAI's answer to a request longer than the window
TOO_LONG = {
    "error": {
        "message": "This model's maximum context length is 1800 tokens. However, your "
        "messages resulted in 2210 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def _messages(body: dict) -> list:
    """The transcript part of a request body, whatever the wire format."""
    items = []
    for key in ("instructions", "input", "messages", "system", "systemInstruction", "contents"):
        value = body.get(key)
        if isinstance(value, list):
            items.extend(value)
        elif value:
            items.append(value)
    return items


def _text(value, key=None) -> int:
    if isinstance(value, str):
        return 0 if key in NOT_TEXT else len(value)
    if isinstance(value, dict):
        return sum(_text(v, k) for k, v in value.items())
    if isinstance(value, list):
        return sum(_text(v) for v in value)
    return 0


def vendor_tokens(body: dict, scale: float = 1.0) -> int:
    """The fake vendor's tokenizer: four characters of text a token, four a message."""
    items = _messages(body)
    return int(sum(_text(item) // 4 + 4 for item in items) * scale)


def pairs(body: dict) -> tuple[list, list]:
    """The call ids and the answered call ids of a request body, in order."""
    calls, results = [], []
    for item in _messages(body):
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            calls.append(item["call_id"])
        if item.get("type") == "function_call_output":
            results.append(item["call_id"])
        for tc in item.get("tool_calls") or []:
            calls.append(tc["id"])
        if item.get("role") == "tool":
            results.append(item["tool_call_id"])
        for block in item.get("content") if isinstance(item.get("content"), list) else []:
            if block.get("type") == "tool_use":
                calls.append(block["id"])
            if block.get("type") == "tool_result":
                results.append(block["tool_use_id"])
        for part in item.get("parts") or []:
            if "functionCall" in part:
                calls.append(part["functionCall"].get("id") or part["functionCall"]["name"])
            if "functionResponse" in part:
                results.append(
                    part["functionResponse"].get("id") or part["functionResponse"]["name"]
                )
    return calls, results


def vendor(scale: float = 1.0, text: str = "Noted."):
    """A responder that refuses what its window cannot hold and reports its count."""

    def respond(request):
        if "summary" in json.dumps(request.body).lower() and "compact a conversation" in str(
            request.body
        ):
            return Reply(
                "The user and the assistant talked about numbered topics.",
                usage={"input_tokens": vendor_tokens(request.body, scale), "output_tokens": 12},
            )
        tokens = vendor_tokens(request.body, scale)
        if tokens > LIMIT:
            return Fault(status=400, body=TOO_LONG)
        return Reply(text, usage={"input_tokens": tokens, "output_tokens": 3})

    return respond


@pytest.fixture(params=PROVIDERS, ids=lambda p: p[0] + ("-cc" if p[2] else ""))
def chat(request, fake_llm):
    provider, model, options = request.param
    providers = fake_llm.settings()
    providers[provider].update(options)
    fake_llm.configure(provider, model, PROVIDERS=providers)
    LLMModel.objects.create(
        provider=provider,
        model_id=model,
        name=model,
        context_window=WINDOW,
        max_output_tokens=OUTPUT,
    )
    return Chat.objects.create(provider=provider, model_id=model)


def fill(chat: Chat, count: int, *, every_tool: int = 10) -> dict:
    """``count`` stored messages: turns of a prompt and a reply, every ``every_tool``-th
    reply calling a tool whose result follows it. Returns the pinned message."""
    chat.with_instructions("You are terse.")
    pinned = chat.add_message(role="user", content="Reference document: " + "fact " * 60)
    pinned.cache_until_here()
    chat.add_message(role="assistant", content="Read it.")
    made = 3
    turn = 0
    while made < count:
        chat.add_message(role="user", content=f"Question {turn}: " + "tell me about it " * 4)
        reply = chat.add_message(role="assistant", content=f"Answer {turn}: " + "it is so " * 4)
        made += 2
        if turn % every_tool == 0:
            call = ToolCall.objects.create(
                chat=chat,
                message=reply,
                call_id=f"call_{turn}",
                name="lookup",
                arguments={"topic": turn},
            )
            chat.add_message(role="tool", content=f"result {turn}", parent_tool_call=call)
            made += 1
        turn += 1
    return pinned


def check_request(request, pinned_text: str) -> None:
    body = request.body
    assert vendor_tokens(body) <= LIMIT
    calls, results = pairs(body)
    assert sorted(calls) == sorted(results)  # no call without its result, nor the reverse
    text = json.dumps(body)
    assert "You are terse." in text  # the system message
    assert pinned_text in text  # the pinned (cache-marked) message


def test_window_keeps_every_request_inside_the_model(chat, fake_llm):
    pinned = fill(chat, 200)
    assert Message.objects.filter(chat=chat).count() >= 200
    fake_llm.server.responder = vendor()
    for i in range(3):
        assert chat.ask(f"Turn {i}: what now?").content == "Noted."
    requests = fake_llm.requests
    assert len(requests) == 3  # no refusal, no retry
    for request in requests:
        check_request(request, "Reference document")
        assert "what now?" in json.dumps(request.body)  # the prompt itself
    # the oldest turns were dropped, the latest kept
    text = json.dumps(requests[-1].body)
    latest = Message.objects.filter(chat=chat, content__startswith="Question").last()
    assert "Question 0:" not in text and latest.content in text
    assert pinned.cache_boundary  # and the full history stays stored
    assert Message.objects.filter(chat=chat).count() >= 206


def test_marking_every_turn_does_not_pin_the_whole_history(chat, fake_llm):
    fill(chat, 200)
    fake_llm.server.responder = vendor()
    for i in range(3):
        chat.cache_until_here()  # the latest message: cache the conversation so far
        assert chat.ask(f"Turn {i}: and now?").content == "Noted."
    requests = fake_llm.requests
    assert len(requests) == 3
    for request in requests:
        check_request(request, "Reference document")
    # the marked messages all went, the oldest unmarked ones did not
    marked = Message.objects.filter(chat=chat, cache_boundary=True).exclude(
        content__startswith="Reference"
    )
    assert marked.count() == 3
    last = json.dumps(requests[-1].body)
    assert all(m.content in last for m in marked) and "Question 0:" not in last


def test_all_sends_everything(chat, fake_llm):
    fill(chat, 40)
    chat.with_history("all")
    fake_llm.script(Reply("Everything."))
    chat.ask("And now?")
    assert "Question 0:" in json.dumps(fake_llm.last_request.body)


def test_unknown_window_sends_everything_and_warns_once(fake_llm, caplog):
    fake_llm.configure("openai", "gpt-unregistered")
    chat = Chat.objects.create(provider="openai", model_id="gpt-unregistered")
    fill(chat, 30)
    fake_llm.script(Reply("One."), Reply("Two."))
    with caplog.at_level(logging.WARNING, logger="django_llmchat.loop.history"):
        chat.ask("First?")
        chat.ask("Second?")
    warnings = [r for r in caplog.records if "context window" in r.getMessage()]
    assert len(warnings) == 1 and "gpt-unregistered" in warnings[0].getMessage()
    assert "Question 0:" in json.dumps(fake_llm.last_request.body)


def test_summarize_stores_one_summary_reuses_it_and_replaces_it(chat, fake_llm):
    fill(chat, 200)
    chat.with_history("summarize")
    fake_llm.server.responder = vendor(text="Noted, " + "with a long answer " * 20)
    events = list(chat.stream("Turn 0: what now?"))
    compacted = [e for e in events if isinstance(e, ContextCompacted)]
    assert len(compacted) == 1
    summary = Message.objects.get(chat=chat, summary_until__isnull=False)
    assert summary.is_summary and summary.role == "system"
    assert compacted[0].message_id == summary.pk
    assert compacted[0].tokens_after < compacted[0].tokens_before
    # the summary call has its own usage row and cost, linked to the summary
    usage = Usage.objects.get(chat=chat, operation="summary")
    assert usage.message_id == summary.pk and usage.status == "succeeded"
    assert usage.input_tokens and usage.total_cost is not None
    covered = Message.objects.get(pk=summary.summary_until_id)
    assert covered.position < summary.position
    # the next three turns reuse it: no new summary, no summary request
    for i in range(1, 4):
        chat.ask(f"Turn {i}: and then?")
    assert Message.objects.filter(chat=chat, summary_until__isnull=False).count() == 1
    requests = fake_llm.requests
    summary_requests = [r for r in requests if "compact a conversation" in str(r.body)]
    assert len(summary_requests) == 1
    chat_requests = [r for r in requests if r not in summary_requests]
    for request in chat_requests:
        check_request(request, "Reference document")
        assert summary.content in json.dumps(request.body)
        assert "Question 0:" not in json.dumps(request.body)
    # the window fills again: a second summary replaces the first (it covers more)
    turn = 4
    while Message.objects.filter(chat=chat, summary_until__isnull=False).count() < 2:
        chat.ask(f"Turn {turn}: more?")
        turn += 1
        assert turn < 40
    newer = Message.objects.filter(chat=chat, summary_until__isnull=False).latest("position")
    assert newer.summary_until.position > covered.position
    last = fake_llm.last_request.body
    assert newer.content in json.dumps(last) and vendor_tokens(last) <= LIMIT
    assert Message.objects.filter(chat=chat, summary_until__isnull=True).count() > 200


def test_context_length_400_leads_to_one_compaction_and_a_reply(chat, fake_llm):
    fill(chat, 70)  # fits the library's estimate of the window
    chat.with_history({"strategy": "summarize"})
    # the vendor counts twice what the library estimates: the first request is refused
    fake_llm.server.responder = vendor(scale=2.0)
    reply = chat.ask("What now?")
    assert reply.content == "Noted."
    assert Message.objects.filter(chat=chat, summary_until__isnull=False).count() == 1
    failed = Usage.objects.filter(chat=chat, status="failed")
    assert failed.count() == 1 and "context length" in failed.get().error
    assert chat.last_run.status == "succeeded"
    assert vendor_tokens(fake_llm.last_request.body, 2.0) <= LIMIT


def test_context_length_400_with_a_window_retries_tighter(chat, fake_llm):
    fill(chat, 200)
    # the vendor counts 1.5 times the text: more than the estimate, framing included
    fake_llm.server.responder = vendor(scale=1.5)
    reply = chat.ask("What now?")
    assert reply.content == "Noted."
    requests = fake_llm.requests
    assert len(requests) == 2  # the refused one and the tighter one
    assert len(requests[1].raw_body) < len(requests[0].raw_body)


def test_a_second_refusal_reaches_the_caller(chat, fake_llm):
    fill(chat, 60)
    fake_llm.script(Fault(status=400, body=TOO_LONG), Fault(status=400, body=TOO_LONG))
    with pytest.raises(ContextLengthExceededError):
        chat.ask("What now?")
    assert chat.last_run.status == "failed"
    assert len(fake_llm.requests) == 2


def test_a_history_processor_chooses_and_calls_stay_paired(chat, fake_llm):
    fill(chat, 40, every_tool=1)
    chat.with_history(f"{__name__}.keep_last_four")
    fake_llm.script(Reply("Short."))
    chat.ask("Only the end?")
    body = fake_llm.last_request.body
    calls, results = pairs(body)
    assert sorted(calls) == sorted(results)
    assert "Question 0:" not in json.dumps(body) and "Only the end?" in json.dumps(body)


def test_bad_policies_are_refused_with_the_reason(chat):
    with pytest.raises(ArgumentError, match="strategy 'windows'"):
        chat.with_history("windows")
    with pytest.raises(ArgumentError, match="keep must be a number between 0 and 1"):
        chat.with_history({"strategy": "summarize", "keep": 2})
    with pytest.raises(ArgumentError, match="unknown option 'size'"):
        chat.with_history({"size": 3})


def test_a_registered_processor_and_estimator_shape_the_request(chat, fake_llm, settings):
    settings.LLMCHAT = {**settings.LLMCHAT, **REGISTRIES}
    fill(chat, 40, every_tool=1)
    chat.with_history({"strategy": "last_four", "estimator": "words"})
    fake_llm.script(Reply("Short."))
    chat.ask("Only the end?")
    body = json.dumps(fake_llm.last_request.body)
    assert "Question 0:" not in body and "Only the end?" in body


def test_a_summary_answered_without_usage_is_billed_estimated(chat, fake_llm):
    """The summary model's vendor reporting no usage: the summary call's row keeps the
    request's estimated input and the summary's weighed output, priced, estimated."""
    fill(chat, 200)
    chat.with_history("summarize")
    answer = vendor()

    def respond(request):
        reply = answer(request)
        if isinstance(reply, Reply) and "compact a conversation" in str(request.body):
            reply.usage = False
        return reply

    fake_llm.server.responder = respond
    list(chat.stream("Turn 0: what now?"))
    usage = Usage.objects.get(chat=chat, operation="summary")
    assert (usage.status, usage.estimated) == ("succeeded", True)
    assert usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_cost is not None and usage.total_cost > 0


def test_a_summary_stays_with_the_branch_it_covers(chat, fake_llm):
    """A summary covers the path up to a message: a branch from before that message does
    not send it; switching back to the summarized branch does."""
    fill(chat, 200)
    chat.with_history("summarize")
    fake_llm.server.responder = vendor()
    chat.ask("Turn 0: what now?")
    summary = Message.objects.get(chat=chat, summary_until__isnull=False)
    summarized_leaf = chat.active_leaf
    early = chat.transcript().filter(role="assistant").first()  # "Read it."
    assert early.position < summary.summary_until.position
    chat.branch_from(early, "A fresh start?")
    summary.refresh_from_db()
    assert not summary.on_path
    body = json.dumps(fake_llm.last_request.body)
    assert summary.content not in body and "A fresh start?" in body and "Question 0:" not in body
    chat.switch_to(summarized_leaf)
    summary.refresh_from_db()
    assert summary.on_path
    chat.ask("Back again?")
    body = json.dumps(fake_llm.last_request.body)
    assert summary.content in body and "A fresh start?" not in body
