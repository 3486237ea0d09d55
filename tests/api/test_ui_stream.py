"""``UIMessageStream``: the library's events as UI message chunks, without a server. Text
and reasoning parts share one implementation: the same events give the same chunks."""

import pytest

from django_llmchat.api.ui.stream import UIMessageStream
from django_llmchat.events import (
    ReasoningDelta,
    ReasoningDone,
    ReasoningPart,
    RunFinished,
    RunStarted,
    StepFinished,
    TextDelta,
    TextDone,
    TokenUsageDone,
    ToolCallDone,
    ToolResultDone,
)
from django_llmchat.values import Tokens


def feed(stream, *events):
    return [chunk for event in events for chunk in stream.feed(event)]


def types(chunks):
    return [c["type"] for c in chunks]


@pytest.mark.parametrize(
    "delta, done, kind",
    [
        (TextDelta, lambda text: TextDone(text), "text"),
        (
            ReasoningDelta,
            lambda text: ReasoningDone(ReasoningPart(type="text", text=text)),
            "reasoning",
        ),
    ],
)
def test_a_part_streams_start_deltas_end(delta, done, kind):
    stream = UIMessageStream(chat_id=7)
    got = feed(stream, RunStarted(run_id="3"), delta("Hel"), delta(""), delta("lo"), done("Hello"))
    assert got == [
        {"type": "start", "messageId": "run-3", "messageMetadata": {"chatId": 7, "runId": "3"}},
        {"type": "start-step"},
        {"type": f"{kind}-start", "id": f"{kind}-1"},
        {"type": f"{kind}-delta", "id": f"{kind}-1", "delta": "Hel"},
        {"type": f"{kind}-delta", "id": f"{kind}-1", "delta": "lo"},
        {"type": f"{kind}-end", "id": f"{kind}-1"},
    ]
    assert feed(stream, done("Hello")) == []  # the step streamed it already


@pytest.mark.parametrize(
    "done", [TextDone("Whole."), ReasoningDone(ReasoningPart(type="text", text="Whole."))]
)
def test_a_part_without_deltas_is_sent_whole(done):
    got = feed(UIMessageStream(), done)
    kind = "text" if isinstance(done, TextDone) else "reasoning"
    assert types(got) == ["start", "start-step", f"{kind}-start", f"{kind}-delta", f"{kind}-end"]
    assert got[3]["delta"] == "Whole."


def test_a_whole_text_stands_for_its_step_a_reasoning_block_does_not():
    stream = UIMessageStream()
    assert types(feed(stream, TextDone("a"), TextDone("a"))).count("text-delta") == 1
    stream = UIMessageStream()
    thought = ReasoningDone(ReasoningPart(type="text", text="b"))
    assert types(feed(stream, thought, thought)).count("reasoning-delta") == 2


def test_text_and_reasoning_close_each_other():
    got = feed(UIMessageStream(), ReasoningDelta("hm"), TextDelta("Hi"), ReasoningDelta("again"))
    assert types(got) == [
        "start",
        "start-step",
        "reasoning-start",
        "reasoning-delta",
        "reasoning-end",
        "text-start",
        "text-delta",
        "text-end",
        "reasoning-start",
        "reasoning-delta",
    ]
    assert [
        c.get("id") for c in got if c["type"].endswith("-start") and c["type"] != "start-step"
    ] == [
        "reasoning-2",  # the counter gave "message-1" first
        "text-3",
        "reasoning-4",
    ]


def test_two_calls_sharing_a_vendor_id_get_their_own_tool_call_ids():
    stream = UIMessageStream()
    got = feed(
        stream,
        ToolCallDone(item_id=None, call_id="c", name="a", arguments="{}"),
        ToolCallDone(item_id=None, call_id="c", name="b", arguments="{}"),
        ToolResultDone(call_id="c", name="b", result="B"),
        ToolResultDone(call_id="c", name="a", result='{"x": 1}'),
    )
    available = [c for c in got if c["type"] == "tool-input-available"]
    assert [c["toolCallId"] for c in available] == ["c", "c-2"]
    outputs = [(c["toolCallId"], c["output"]) for c in got if c["type"] == "tool-output-available"]
    assert outputs == [("c-2", "B"), ("c", {"x": 1})]


def test_steps_metadata_and_finish():
    stream = UIMessageStream()
    usage = Tokens(input_tokens=2, output_tokens=3)
    got = feed(
        stream,
        RunStarted(run_id="5"),
        TextDelta("Hi"),
        TokenUsageDone(token_usage=usage),
        StepFinished(message_id=9, token_usage=usage, cost="0.001"),
        RunFinished(run_id="5", status="succeeded", message_id=9, cost="0.001"),
    )
    assert types(got)[-4:] == ["text-end", "message-metadata", "finish-step", "finish"]
    assert got[-3]["messageMetadata"] == {
        "storedMessageId": 9,
        "tokens": {"input_tokens": 2, "output_tokens": 3},
        "cost": "0.001",
    }
    assert got[-1] == {
        "type": "finish",
        "finishReason": "stop",
        "messageMetadata": {
            "status": "succeeded",
            "runId": "5",
            "storedMessageId": 9,
            "cost": "0.001",
        },
    }
    assert feed(stream, TextDelta("late")) == []  # the message ended


def test_a_stopped_run_aborts_and_an_error_is_sent_once():
    stream = UIMessageStream()
    assert types(stream.error("boom")) == ["start", "error"]
    assert stream.error("again") == []
    got = feed(stream, TextDelta("part"), RunFinished(run_id="1", status="cancelled"))
    assert types(got)[-4:] == ["text-end", "finish-step", "abort", "finish"]
    assert got[-2] == {"type": "abort", "reason": "cancelled"}
    assert got[-1]["finishReason"] == "other"


def test_a_run_taken_over_names_its_calls_as_the_stored_steps_do():
    """A run restarts from its last stored step (a takeover, a retry): the calls of the
    step it did not store are dropped, so the step made again names its calls as the
    reload will (``call_0``, then ``call_0-2``, never ``call_0-3``)."""
    stream = UIMessageStream()
    call = ToolCallDone(item_id="call_0", call_id="call_0", name="lookup", arguments="{}")

    def ids(chunks):
        return [c["toolCallId"] for c in chunks if c["type"] == "tool-input-available"]

    first = feed(stream, RunStarted(run_id="5"), call, StepFinished(message_id=1))
    lost = feed(stream, call)  # the step its worker did not store
    again = feed(stream, RunStarted(run_id="5"), call, StepFinished(message_id=2))
    assert ids(first) + ids(lost) + ids(again) == ["call_0", "call_0-2", "call_0-2"]
    retried = feed(stream, call, RunFinished(run_id="5", status="retrying"))
    after = feed(stream, RunStarted(run_id="5"), call)
    assert ids(retried) == ids(after) == ["call_0-3"]
