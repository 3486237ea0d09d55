"""A web process killed in the middle of a reply it streams inline: the attempt it was
making stays on the ledger (its pending usage row, marked lost by the takeover) and
counts against the user's limits; the run is resumed by a worker and answered once."""

from __future__ import annotations

from decimal import Decimal

import httpx
import pytest
from django.test import override_settings
from rest_framework.authtoken.models import Token

from django_llmchat.models import Chat, Message, Run, Usage
from django_llmchat.runs import limits
from django_llmchat.tasks import recover_runs
from django_llmchat.testing import Fault, Reply

from .conftest import WebProcess, current_app, wait_until

pytestmark = [pytest.mark.redis]

LONG = " ".join(f"word{i}" for i in range(300))
LIMITS = {"default": {"usd_per_day": "50.00", "tokens_per_day": 100_000_000}}


def test_a_web_process_killed_mid_reply_leaves_its_attempt_on_the_ledger(
    services, llm, django_user_model
):
    llmchat = {**services.llmchat, "LIMITS": LIMITS}
    user = django_user_model.objects.create_user("killed-web", password="pw")
    token = Token.objects.create(user=user).key
    chat = Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")
    llm.script(
        Fault(chunk_delay=0.1, reply=Reply(LONG, chunk_size=4)),  # ~8 s of stream
        Reply("Recovered.", usage={"input_tokens": 40, "output_tokens": 3}),
    )
    web = WebProcess(services, llmchat)
    try:
        deltas = 0
        with httpx.stream(
            "POST",
            f"{web.url}/api/chats/{chat.pk}/messages/",
            json={"content": "Tell me a long story"},
            headers={"Authorization": f"Token {token}", "Accept": "text/event-stream"},
            timeout=30,
        ) as response:
            assert response.status_code == 200, web.output()
            for line in response.iter_lines():
                if line == "event: text_delta":
                    deltas += 1
                    if deltas == 3:
                        web.kill()  # SIGKILL mid-attempt: no cleanup of any kind
                        break
    finally:
        web.kill()
    run = chat.runs.get()
    assert run.status == Run.RUNNING  # nobody is left to end it
    dead = Usage.objects.get(chat=chat)
    assert dead.status == Usage.PENDING and dead.estimated and dead.input_tokens > 0
    assert dead.run_id == run.pk and dead.user_id == user.pk

    with override_settings(LLMCHAT=llmchat):
        # the limits count the dead attempt's estimate right away
        used = limits.spend(user.pk)
        assert used["tokens_per_day"] == dead.input_tokens
        assert used["usd_per_day"] == (dead.total_cost or Decimal(0)).quantize(
            Decimal("0.0000000001")
        )
        # once its lease ran out, the recovery sends the run to a worker
        worker = services.worker()
        try:
            wait_until(lambda: recover_runs() or Run.objects.get(pk=run.pk).attempt > 1, timeout=30)
            wait_until(
                lambda: Run.objects.get(pk=run.pk).status == Run.SUCCEEDED,
                timeout=60,
                message=worker.output(),
            )
        finally:
            worker.stop()
        rows = Usage.objects.filter(chat=chat).order_by("id")
        assert list(rows.values_list("status", "estimated")) == [
            (Usage.LOST, True),
            (Usage.SUCCEEDED, False),
        ]
        # one row per attempt, each counted: the lost estimate and the reply's tokens
        assert limits.spend(user.pk)["tokens_per_day"] == dead.input_tokens + 43
    assert list(Message.objects.filter(chat=chat).values_list("role", "content")) == [
        ("user", "Tell me a long story"),
        ("assistant", "Recovered."),
    ]
    assert len(llm.requests) == 2


def test_sigkill_of_a_worker_mid_attempt_is_counted_by_the_limits(services, llm, django_user_model):
    llmchat = {**services.llmchat, "LIMITS": LIMITS}
    user = django_user_model.objects.create_user("killed-worker", password="pw")
    chat = Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")
    llm.script(
        Fault(chunk_delay=0.1, reply=Reply(LONG, chunk_size=4)),
        Reply("Recovered.", usage={"input_tokens": 40, "output_tokens": 3}),
    )
    queue = f"{services.queue}-ledger"
    with override_settings(LLMCHAT=llmchat), current_app(services.sender(queue)):
        first = services.worker(queue=queue, concurrency=2)
        chat.ask_later("Tell me a long story")
        wait_until(lambda: len(llm.requests) == 1, timeout=30, message=first.output())
        first.kill()
        dead = Usage.objects.get(chat=chat)
        assert dead.status == Usage.PENDING and dead.estimated
        assert limits.spend(user.pk)["tokens_per_day"] == dead.input_tokens
        second = services.worker(queue=queue, concurrency=2)
        try:
            wait_until(
                lambda: chat.runs.get().status == Run.SUCCEEDED, timeout=60, message=second.output()
            )
        finally:
            second.stop()
        assert list(Usage.objects.filter(chat=chat).order_by("id").values_list("status")) == [
            (Usage.LOST,),
            (Usage.SUCCEEDED,),
        ]
        assert limits.spend(user.pk)["tokens_per_day"] == dead.input_tokens + 43
