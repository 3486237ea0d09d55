"""The event streams on a Redis Cluster: every command names one chat's key (one hash
slot), and ``LLMCHAT["EVENTS_CLUSTER"]`` makes the clients redis-py's ``RedisCluster``.

The commands are recorded as the clients pack them for the wire (single commands and
pipelines, sync and asyncio) on the real Redis of ``REDIS_URL``; the server itself names
each command's keys (``COMMAND GETKEYS``), and their slots are compared."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from django.test import override_settings

from django_llmchat import streams, streams_redis
from django_llmchat.checks import check_settings
from django_llmchat.events import RunFinished, RunStarted, TextDelta
from tests.conftest import require_service


@pytest.fixture
def recorded(monkeypatch):
    """Every command any Redis client sends while the test runs, as its arguments."""
    import redis.asyncio.connection as asynchronous
    import redis.connection as synchronous

    commands: list[tuple] = []

    def pipelined(many):
        def pack_commands(self, batch):
            batch = list(batch)
            commands.extend(tuple(args) for args in batch)
            return many(self, batch)

        return pack_commands

    sync_send = synchronous.AbstractConnection.send_command

    def send_command(self, *args, **kwargs):  # the sync client packs in there
        commands.append(args)
        return sync_send(self, *args, **kwargs)

    async_pack = asynchronous.AbstractConnection.pack_command

    def pack_command(self, *args):  # the asyncio client's send_command packs with it
        commands.append(args)
        return async_pack(self, *args)

    monkeypatch.setattr(synchronous.AbstractConnection, "send_command", send_command)
    monkeypatch.setattr(asynchronous.AbstractConnection, "pack_command", pack_command)
    for cls in (synchronous.AbstractConnection, asynchronous.AbstractConnection):
        monkeypatch.setattr(cls, "pack_commands", pipelined(cls.pack_commands))
    return commands


@pytest.fixture
def events():
    url = require_service("REDIS_URL")
    prefix = f"llmchat-test-{uuid.uuid4().hex[:8]}"
    value = {"EVENTS_URL": url, "EVENTS_KEY_PREFIX": prefix}
    with override_settings(LLMCHAT=value):
        yield value
        client = streams.client()
        for key in client.scan_iter(match=f"{prefix}:*"):
            client.delete(key)


def keyed(commands: list[tuple]) -> list[tuple[str, list[str]]]:
    """The commands that name keys: (name, their keys), as the server reads them."""
    import redis
    from redis.exceptions import ResponseError

    probe = redis.Redis.from_url(require_service("REDIS_URL"), decode_responses=True)
    found = []
    for args in list(commands):
        name = str(args[0].decode() if isinstance(args[0], bytes) else args[0]).upper()
        try:
            keys = probe.command_getkeys(*args)
        except ResponseError:  # no key: HELLO, SELECT, CLIENT SETINFO, PING...
            continue
        found.append((name, list(keys)))
    probe.close()
    return found


def across_slots(commands: list[tuple]) -> list[tuple[str, list[str]]]:
    from redis.cluster import key_slot

    return [
        (name, keys)
        for name, keys in keyed(commands)
        if len({key_slot(k.encode()) for k in keys}) > 1
    ]


def chats_in_different_slots(n: int) -> list[int]:
    """``n`` chat ids whose stream keys sit in ``n`` different hash slots."""
    from redis.cluster import key_slot

    chosen: dict[int, int] = {}
    chat_id = 1
    while len(chosen) < n:
        chosen.setdefault(key_slot(streams.stream_key(chat_id).encode()), chat_id)
        chat_id += 1
    return sorted(chosen.values())


@pytest.mark.redis
def test_the_checker_sees_a_command_across_two_chats(events, recorded):
    first, second = chats_in_different_slots(2)
    streams.client().delete(streams.stream_key(first), streams.stream_key(second))
    assert across_slots(recorded) == [
        ("DEL", [streams.stream_key(first), streams.stream_key(second)])
    ]


@pytest.mark.redis
def test_publishing_following_and_deleting_touch_one_chat_per_command(events, recorded):
    chats = chats_in_different_slots(4)
    for chat_id in chats:  # one pipeline per publish
        streams.publish(chat_id, RunStarted(run_id=f"r{chat_id}"))
    for chat_id in chats:  # the publisher thread: the events of every chat, one pipeline
        streams.publish_later(chat_id, TextDelta("hi"))
        streams.publish_later(chat_id, RunFinished(run_id=f"r{chat_id}"))
    assert streams.flush()
    first = chats[0]
    assert len(list(streams.follow(first, "0", block_ms=50, timeout=2))) == 3
    assert list(streams.follow(first, None, block_ms=50, timeout=0.2)) == []
    last = streams.last_id(first)
    assert streams.has_id(first, last)

    async def collect():
        return [item async for item in streams.afollow(first, "0", block_ms=50, timeout=2)]

    assert len(asyncio.run(collect())) == 3
    assert streams.delete(chats) == len(chats)
    assert streams.delete(chats) == 0

    named = keyed(recorded)
    assert {name for name, _ in named} >= {"XADD", "EXPIRE", "XREAD", "XRANGE", "XREVRANGE", "DEL"}
    assert across_slots(recorded) == []
    assert all(len(keys) == 1 for _, keys in named), named
    deleted = [keys[0] for name, keys in named if name == "DEL"]
    assert deleted == [streams.stream_key(c) for c in chats] * 2


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_erasing_a_user_deletes_each_stream_on_its_own(events, recorded, django_user_model):
    from django_llmchat.chats.lifecycle import erase_user
    from django_llmchat.models import Chat

    user = django_user_model.objects.create_user("erased")
    chats = [Chat.objects.create(user=user, title=f"c{i}") for i in range(5)]
    for chat in chats:
        streams.publish(chat.pk, RunStarted(run_id="r"))
    recorded.clear()
    assert erase_user(user).chats == 5
    assert not any(streams.client().exists(streams.stream_key(c.pk)) for c in chats)
    named = keyed(recorded)
    assert sorted(keys[0] for name, keys in named if name == "DEL") == sorted(
        streams.stream_key(c.pk) for c in chats
    )
    assert across_slots(recorded) == []


def test_events_cluster_makes_cluster_clients(monkeypatch):
    import redis.asyncio.cluster
    import redis.cluster

    made = []

    def from_url(url, **options):
        made.append((url, options))
        return "a cluster client"

    monkeypatch.setattr(redis.cluster.RedisCluster, "from_url", staticmethod(from_url))
    monkeypatch.setattr(streams_redis, "_clients", {})
    url = "redis://node-1.example:6379/0"
    with override_settings(LLMCHAT={"EVENTS_URL": url, "EVENTS_CLUSTER": True}):
        assert streams.client() == "a cluster client"
        assert made[0][0] == url and made[0][1]["decode_responses"] is True
        assert streams._client_class(asynchronous=True) is redis.asyncio.cluster.RedisCluster
    with override_settings(LLMCHAT={"EVENTS_URL": url}):
        assert streams._client_class() is redis.Redis
        assert streams._client_class(asynchronous=True) is redis.asyncio.Redis


@pytest.mark.parametrize(
    ("cluster", "url", "wrong"),
    [
        (True, "redis://node-1:6379/0", False),
        (True, "rediss://node-1:6379/0", False),
        (False, "unix:///run/redis.sock", False),
        (True, "unix:///run/redis.sock", True),
        ("yes", "redis://node-1:6379/0", True),
    ],
)
def test_events_cluster_is_checked(cluster, url, wrong):
    with override_settings(LLMCHAT={"EVENTS_URL": url, "EVENTS_CLUSTER": cluster}):
        ids = {message.id for message in check_settings()}
    assert ("llmchat.E018" in ids) is wrong
