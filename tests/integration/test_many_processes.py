"""Many processes on one PostgreSQL database, one Redis and one broker: two gunicorn web
processes (A and B) and two Celery worker processes, driven over real HTTP.

- prompts posted at once to several chats, alternately to A and B (``POST messages/``,
  202): each prompt gets exactly one reply, each chat keeps one path, every provider
  request has its usage row and none is left pending, nothing stays busy;
- a reply started through A and stopped through B (``POST cancel/``): the run ends
  cancelled, the text streamed so far is kept as the reply, the attempt billed as an
  estimate;
- the worker streaming a reply SIGKILLed: the other worker takes the run over and answers
  it once; the killed attempt stays on the ledger (``lost``) beside the answer's.

Every wait polls the database (or the chat's event stream) up to a generous deadline.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from rest_framework.authtoken.models import Token

from django_llmchat import streams
from django_llmchat.events import TextDelta
from django_llmchat.models import Chat, Message, Run, Usage
from django_llmchat.tasks import recover_runs
from django_llmchat.testing import Fault, Reply
from django_llmchat.testing.invariants import assert_one_path
from tests.conftest import import_or_unavailable

from .conftest import WebProcess, Worker, current_app, wait_until

pytestmark = [pytest.mark.redis]

CHATS = 4
PROMPTS = 3  # per chat, posted at once
LONG = " ".join(f"word{i}" for i in range(300))
BILLED = {Usage.SUCCEEDED, Usage.CANCELLED, Usage.FAILED, Usage.LOST}


@dataclass
class Cluster:
    queue: str
    webs: list[WebProcess]
    workers: list[Worker]

    def output(self) -> str:
        logs = [f"web {web.url}:\n{web.output()}" for web in self.webs]
        logs += [f"worker {worker.pid}:\n{worker.output()}" for worker in self.workers]
        return "\n".join(logs)


@pytest.fixture(scope="module")
def cluster(services):
    """Two gunicorn web processes and two workers on a queue of their own, started at once."""
    import_or_unavailable("gunicorn")  # the dev extra has it
    queue = f"{services.queue}-many"
    with ThreadPoolExecutor(4) as pool:
        webs = [
            pool.submit(
                WebProcess, services, services.llmchat, gunicorn=True, LLMCHAT_TEST_QUEUE=queue
            )
            for _ in range(2)
        ]
        workers = [pool.submit(services.worker, queue=queue, concurrency=4) for _ in range(2)]
    found = Cluster(queue, [], [])
    try:
        found.webs = [future.result() for future in webs]
        found.workers = [future.result() for future in workers]
        yield found
    finally:
        for web in found.webs:
            web.stop()
        for worker in found.workers:
            worker.stop()


@pytest.fixture
def procs(cluster, services, llm):
    """The cluster, a worker killed by an earlier test replaced; ``recover_runs`` and
    ``ask_later`` of this process send to its queue."""
    for i, worker in enumerate(cluster.workers):
        if worker.proc is None or worker.proc.poll() is not None:
            cluster.workers[i] = services.worker(queue=cluster.queue, concurrency=4)
    with current_app(services.sender(cluster.queue)):
        yield cluster


@pytest.fixture
def account(django_user_model):
    user = django_user_model.objects.create_user("many-processes", password="pw")
    return user, Token.objects.create(user=user).key


def _post(url: str, token: str, json: dict | None = None) -> httpx.Response:
    return httpx.post(url, json=json, headers={"Authorization": f"Token {token}"}, timeout=60)


def _chat(user) -> Chat:
    return Chat.objects.create(user=user, provider="openai", model_id="gpt-4.1-mini")


def _deltas(chat: Chat, after: str, count: int) -> str:
    """Follow the chat's events until ``count`` text deltas arrived; their text."""
    text = []
    for _, event in streams.follow(chat.pk, after, block_ms=200, timeout=60):
        if isinstance(event, TextDelta):
            text.append(event.content)
            if len(text) == count:
                return "".join(text)
    raise AssertionError(f"chat {chat.pk}: {len(text)} of {count} text deltas arrived")


def _all_ended(services, chats: list[Chat], runs: int) -> list[Run]:
    """Wait until the chats have ``runs`` runs, all finished, the task that ran each ended
    (a later copy of it could only find nothing to do) and the chats idle."""

    def finished():
        found = list(Run.objects.filter(chat__in=chats).order_by("id"))
        done = len(found) == runs and all(run.is_finished for run in found)
        return found if done else None

    found = wait_until(finished, timeout=60, message="the runs did not all end")
    for run in found:
        services.wait_task_ended(run.task_id, timeout=60)
    wait_until(lambda: not Chat.objects.filter(pk__in=[c.pk for c in chats]).exclude(status="idle"))
    return found


def _billed(chats: list[Chat], llm) -> list[Usage]:
    """Every provider request has its usage row, none left pending, each with tokens."""
    rows = list(Usage.objects.filter(chat__in=chats, operation="chat").order_by("id"))
    assert len(rows) == len(llm.requests), (len(rows), len(llm.requests))
    for row in rows:
        assert row.status in BILLED, (row.pk, row.status)
        assert row.input_tokens and row.total_cost, (row.pk, row.input_tokens, row.total_cost)
    return rows


def test_racing_prompts_through_two_web_processes_get_one_reply_each(procs, services, llm, account):
    user, key = account
    llm.server.responder = lambda request: Fault(
        chunk_delay=0.01, reply=Reply(f"Answer to {request.last_user_text}", chunk_size=4)
    )
    chats = [_chat(user) for _ in range(CHATS)]
    posts = [(chat, f"chat {chat.pk} prompt {i}") for i in range(PROMPTS) for chat in chats]
    ready = threading.Barrier(len(posts))

    def post(n: int) -> httpx.Response:
        chat, content = posts[n]
        web = procs.webs[n % 2]  # alternately A and B
        ready.wait(timeout=60)
        return _post(f"{web.url}/api/chats/{chat.pk}/messages/", key, {"content": content})

    with ThreadPoolExecutor(len(posts)) as pool:
        responses = list(pool.map(post, range(len(posts))))
    assert [r.status_code for r in responses] == [202] * len(posts), (
        [r.text for r in responses if r.status_code != 202],
        procs.output(),
    )

    runs = _all_ended(services, chats, len(posts))
    assert {run.status for run in runs} == {Run.SUCCEEDED}, procs.output()
    for chat in chats:
        assert_one_path(chat)
        transcript = [(m.role, m.content) for m in chat.transcript()]
        prompts = [content for role, content in transcript if role == "user"]
        assert sorted(prompts) == sorted(c for ch, c in posts if ch.pk == chat.pk)
        # each prompt followed by its one reply
        assert transcript == [
            pair
            for prompt in prompts
            for pair in (("user", prompt), ("assistant", f"Answer to {prompt}"))
        ]
        assert Message.objects.filter(chat=chat, role="assistant").count() == PROMPTS
    rows = _billed(chats, llm)
    # each run's answer billed once, on its reply
    answered = [row for row in rows if row.status == Usage.SUCCEEDED]
    assert sorted(row.run_id for row in answered) == sorted(run.pk for run in runs)
    assert all(row.message_id and not row.estimated for row in answered)


def test_a_stop_through_the_other_web_process_keeps_the_partial_reply_billed(
    procs, services, llm, account
):
    user, key = account
    web_a, web_b = procs.webs
    llm.script(Fault(chunk_delay=0.1, reply=Reply(LONG, chunk_size=4)))  # about 60 s of stream
    chat = _chat(user)
    after = streams.last_id(chat.pk)
    posted = _post(f"{web_a.url}/api/chats/{chat.pk}/messages/", key, {"content": "A long story"})
    assert posted.status_code == 202, (posted.text, procs.output())
    seen = _deltas(chat, after, 3)  # a worker streams it

    stopped = _post(f"{web_b.url}/api/chats/{chat.pk}/cancel/", key)
    assert stopped.status_code == 202, (stopped.text, procs.output())
    assert stopped.json()["cancel_requested"] is True

    (run,) = _all_ended(services, [chat], 1)
    assert (run.status, run.interrupt_reason) == (Run.CANCELLED, "cancelled")
    assert_one_path(chat)
    (prompt, reply) = chat.transcript()
    assert (prompt.role, prompt.content) == ("user", "A long story")
    # the text streamed before the stop is the reply; the rest was never read
    assert reply.role == "assistant" and reply.finish_reason == "cancelled"
    assert reply.content.startswith(seen) and LONG.startswith(reply.content)
    assert len(reply.content) < len(LONG)
    (row,) = _billed([chat], llm)
    assert (row.status, row.estimated) == (Usage.CANCELLED, True)
    assert row.output_tokens and row.run_id == run.pk and row.message_id == reply.pk


def test_a_worker_sigkilled_mid_reply_the_other_answers_once(procs, services, llm, account):
    user, key = account
    llm.script(
        Fault(chunk_delay=0.1, reply=Reply(LONG, chunk_size=4)),
        Reply("Recovered.", usage={"input_tokens": 40, "output_tokens": 3}),
    )
    chat = _chat(user)
    after = streams.last_id(chat.pk)
    posted = _post(f"{procs.webs[1].url}/api/chats/{chat.pk}/messages/", key, {"content": "Go"})
    assert posted.status_code == 202, (posted.text, procs.output())
    _deltas(chat, after, 3)
    run = chat.runs.get()
    task_id = run.task_id  # unacknowledged by the worker streaming it
    (victim,) = [w for w in procs.workers if run.worker.endswith(f":{w.pid}")]
    (other,) = [w for w in procs.workers if w is not victim]
    victim.kill()
    dead = Usage.objects.get(chat=chat)
    assert dead.status == Usage.PENDING and dead.estimated

    # the broker gives the task back to the other worker, or the recovery sends it there,
    # once the run's lease ran out
    wait_until(
        lambda: recover_runs() or Run.objects.get(pk=run.pk).attempt > 1,
        timeout=30,
        message=other.output(),
    )
    (run,) = _all_ended(services, [chat], 1)
    services.wait_task_ended(task_id, timeout=60)  # the killed worker's task, redelivered
    assert (run.status, run.attempt) == (Run.SUCCEEDED, 2), other.output()
    assert run.worker.endswith(f":{other.pid}")
    assert_one_path(chat)
    assert [(m.role, m.content) for m in chat.transcript()] == [
        ("user", "Go"),
        ("assistant", "Recovered."),
    ]
    assert Message.objects.filter(chat=chat, role="assistant").count() == 1
    rows = _billed([chat], llm)
    assert [(r.status, r.estimated) for r in rows] == [(Usage.LOST, True), (Usage.SUCCEEDED, False)]
    assert rows[0].input_tokens == dead.input_tokens and rows[1].output_tokens == 3
