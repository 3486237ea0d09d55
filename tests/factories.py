"""Builders for transcripts and runs used across the suite."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from django_llmchat.models import Chat, Message, Run, ToolCall, Usage
from django_llmchat.models.message import QUEUED_POSITION


def build_transcript(chat: Chat, turns: int, *, with_attachments: bool = True) -> None:
    """Add ``turns`` rounds of user prompt -> assistant tool call -> tool result ->
    assistant answer (4 messages each), with usage rows and attachments, in bulk."""
    users, calls_msgs = [], []
    for i in range(turns):
        users.append(Message(chat=chat, role="user", content=f"question {i}"))
        calls_msgs.append(
            Message(
                chat=chat,
                role="assistant",
                content="",
                model_id=chat.model_id,
                provider=chat.provider,
                finish_reason="tool_calls",
            )
        )
    ordered = [m for pair in zip(users, calls_msgs, strict=True) for m in pair]
    Message.objects.bulk_create(ordered)
    tool_calls = [
        ToolCall(chat=chat, message=m, call_id=f"call_{i}", name="weather", arguments={"i": i})
        for i, m in enumerate(calls_msgs)
    ]
    ToolCall.objects.bulk_create(tool_calls)
    results, answers = [], []
    for i, tc in enumerate(tool_calls):
        results.append(Message(chat=chat, role="tool", content=f"sunny {i}", parent_tool_call=tc))
        answers.append(
            Message(
                chat=chat,
                role="assistant",
                content=f"It is sunny ({i}).",
                model_id=chat.model_id,
                provider=chat.provider,
                finish_reason="stop",
                thinking_text="Let me see.",
                thinking_signature="sig",
            )
        )
    Message.objects.bulk_create([m for pair in zip(results, answers, strict=True) for m in pair])
    usages = []
    for m in calls_msgs + answers:
        usages.append(
            Usage(
                chat=chat,
                message=m,
                provider=chat.provider,
                model_id=chat.model_id,
                status="succeeded",
                input_tokens=100,
                output_tokens=20,
                cache_read_tokens=10,
                total_cost=Decimal("0.0001"),
                input_cost=Decimal("0.00008"),
                output_cost=Decimal("0.00002"),
            )
        )
    Usage.objects.bulk_create(usages)
    from django_llmchat.models.branches import link_parents

    link_parents(chat.pk)  # bulk_create bypasses save(): each message follows the one before
    if with_attachments:
        from django_llmchat.models import Attachment

        Attachment.objects.bulk_create(
            [
                Attachment(
                    message=u,
                    file="llmchat/x/doc.txt",
                    filename="doc.txt",
                    mime_type="text/plain",
                    size=3,
                    sha256="0" * 64,
                )
                for u in users
            ]
        )


def taken_run(chat: Chat, prompt: Message | None = None, *, lease: float, **fields) -> Run:
    """A run a process took on, as that process left it: running, its lease ending
    ``lease`` seconds from now (negative: it ran out, the process is gone), holding the
    chat."""
    now = timezone.now()
    fields = {"attempt": 1, "worker": "elsewhere:1", **fields}
    run = Run.objects.create(
        chat=chat,
        prompt=prompt,
        status="running",
        started_at=now,
        lease_expires_at=now + timedelta(seconds=lease),
        **fields,
    )
    Chat.objects.filter(pk=chat.pk).update(status="running", active_run=run)
    return run


# -- the run package's tests (tests/runs) ----------------------------------------------
# the run lease and the attempts the run tests' chat is configured with (tests/runs/conftest.py)
LEASE = 30.0
MAX_ATTEMPTS = 3


def prompt_of(chat, text="Q"):
    return Message(chat=chat, role="user", content=text)


def fresh(run):
    return Run.objects.get(pk=run.pk)


def chat_row(chat):
    return Chat.objects.values("status", "active_run_id").get(pk=chat.pk)


def waiting_call(chat, run, call_id="c1"):
    """A tool call of ``run`` waiting for a decision."""
    message = chat.add_message(role="assistant", content="", run=run)
    return ToolCall.objects.create(chat=chat, message=message, call_id=call_id, name="pay")


def awaiting(chat, *call_ids):
    run = Run.objects.create(chat=chat, status="awaiting_approval", attempt=1, steps=1)
    Chat.objects.filter(pk=chat.pk).update(status="awaiting_approval", active_run=run)
    return run, [waiting_call(chat, run, c) for c in call_ids]


def _after_everything(chat, prompt):
    """The chat's last message placed after any clock reading, ``prompt`` queued: the
    place the prompt must move to is right after that message."""
    last = chat.add_message(role="assistant", content="A")
    far = last.position + 10**12
    Message.objects.filter(pk=last.pk).update(position=far)
    Message.objects.filter(pk=prompt.pk).update(position=QUEUED_POSITION + 5)
    return far + 1
