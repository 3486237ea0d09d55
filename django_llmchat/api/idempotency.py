"""``Idempotency-Key``: a retried request that starts (or stops) a run gets the first
request's outcome instead of a second prompt and a second run.

The key is per user, per chat and per route (``scope``): the same key on another chat is
another request's (an AI SDK client's message ids, used as keys, may repeat across its
chats). Its row is written in the transaction that admits the run
(:func:`django_llmchat.runs.on_admit`), under the chat's lock and with a unique constraint
on ``(user, chat, scope, key)``, so of racing requests with one key exactly one stores
anything. A retry within ``LLMCHAT["IDEMPOTENCY_TTL"]`` seconds gets:

- the stored answer (status and JSON body) of a 202;
- for a streamed answer, the run's stream replayed from the chat's event stream (from the
  run's start, or after ``Last-Event-ID``); without ``LLMCHAT["EVENTS_URL"]``, the run as
  JSON (``{"run": ...}``) once it ended, a 409 while it has not;
- a 409 while the first request has not answered yet;
- a 422 when the key comes with another request on the chat and route (the body differs).

A first request that never answered (its process died, or it failed after the run was
admitted) does not hold its key forever. Its answer is rebuilt from what it stored: once
its run ended, or once the key is older than ``LLMCHAT["RUN_LEASE"]`` seconds (a request
answers within moments of admitting its run; a live one renews nothing, so this lease is
the bound), a retry gets the answer the first request would have given, the prompt and the
run as they are now (:meth:`Idempotency.recovered`), stored for later retries. A key
whose run is gone (nothing of the first request is left) is dropped after the lease and
the retry is answered afresh.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import IntegrityError, transaction
from django.utils.crypto import salted_hmac
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status
from rest_framework.exceptions import APIException, ValidationError
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder

from .. import runs
from ..conf import settings
from ..events import RunFinished, RunStarted, to_sse
from ..models import Chat, IdempotencyKey, Message, Run
from ..models.idempotency import KEY_MAX_LENGTH, KEY_PATTERN, expired_before
from .errors import Conflict

__all__ = [
    "HEADER",
    "IDEMPOTENCY_CONFLICT",
    "IDEMPOTENCY_PARAMETER",
    "IDEMPOTENCY_REUSED",
    "Idempotency",
    "KeyInProgress",
    "KeyReused",
    "Replayed",
]

logger = logging.getLogger("django_llmchat.api")

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
_KEY = re.compile(KEY_PATTERN)
_EVENT_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")

IDEMPOTENCY_PARAMETER = OpenApiParameter(
    HEADER,
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="A key of your choice (printable ASCII, at most 255 characters, e.g. a "
    "UUID) naming this request: a retry with the same key within "
    '`LLMCHAT["IDEMPOTENCY_TTL"]` seconds gets the first request\'s outcome (a streamed '
    "run is replayed) and starts nothing. Keys are per chat (the same key on another "
    "chat is another request's). The same key with another body is a 422; "
    "while the first request is still answering, a 409 (once its run ended, or after "
    '`LLMCHAT["RUN_LEASE"]` seconds with nobody answering it, the retry is answered).',
    pattern=r"^[\x21-\x7e]([\x20-\x7e]{0,253}[\x21-\x7e])?$",
)
IDEMPOTENCY_REUSED = OpenApiResponse(
    response=OpenApiTypes.OBJECT,
    description="The `Idempotency-Key` was used on this chat and route with another body: "
    '`{"detail", "code": "idempotency_key_reused"}`; or a guardrail blocked the message.',
)
IDEMPOTENCY_CONFLICT = OpenApiResponse(
    response=OpenApiTypes.OBJECT,
    description="The chat is busy, or the request with this `Idempotency-Key` is still in "
    'progress (`"code": "idempotency_key_in_progress"`): retry later.',
)


class KeyReused(APIException):
    """422: the key names another request."""

    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = f"This {HEADER} was already used with a different request: send a new key."
    default_code = "idempotency_key_reused"


class KeyInProgress(Conflict):
    """409: the first request with the key has not answered yet."""

    default_detail = (
        f"A request with this {HEADER} is still in progress: retry once it has answered."
    )
    default_code = "idempotency_key_in_progress"


_cutoff = expired_before


def _lease_cutoff():
    """Keys in progress created before this moment lost their request
    (``LLMCHAT["RUN_LEASE"]`` seconds: far longer than a request takes to answer once it
    admitted its run)."""
    from datetime import timedelta

    from django.utils import timezone

    return timezone.now() - timedelta(seconds=float(settings.RUN_LEASE))


def _named(row: IdempotencyKey) -> tuple[str, str, int]:
    return row.scope, row.key, row.chat_id


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=JSONEncoder))


_HASH_SALT = "django_llmchat.idempotency.request"


def _canonical(scope: str, chat_id: int, body: Any) -> bytes:
    text = json.dumps(
        {"scope": scope, "chat": chat_id, "body": body},
        sort_keys=True,
        separators=(",", ":"),
        cls=JSONEncoder,
    )
    return text.encode()


def request_hash(scope: str, chat_id: int, body: Any) -> str:
    """The request's fingerprint as stored: HMAC-SHA256 of the canonical request (the
    route, the chat, the body) keyed with ``SECRET_KEY``, so the row tells requests apart
    without holding anything a guess of the prompt can be checked against."""
    return salted_hmac(_HASH_SALT, _canonical(scope, chat_id, body), algorithm="sha256").hexdigest()


def request_hashes(scope: str, chat_id: int, body: Any) -> frozenset[str]:
    """Every fingerprint a stored row of this request may hold: with ``SECRET_KEY``, with
    each of ``SECRET_KEY_FALLBACKS`` (a key rotated within the window), and the unkeyed
    SHA-256 that a row stored before the fingerprint was keyed holds."""
    from django.conf import settings as django_settings

    text = _canonical(scope, chat_id, body)
    secrets = [django_settings.SECRET_KEY, *getattr(django_settings, "SECRET_KEY_FALLBACKS", ())]
    found = {salted_hmac(_HASH_SALT, text, s, algorithm="sha256").hexdigest() for s in secrets}
    found.add(hashlib.sha256(text).hexdigest())
    return frozenset(found)


def key_of(request, fallback: str | None = None) -> str | None:
    """The request's ``Idempotency-Key`` (a 400 when it is not printable ASCII of 1 to 255
    characters), else ``fallback``."""
    value = request.headers.get(HEADER)
    if value is None:
        if fallback and len(fallback) <= KEY_MAX_LENGTH and _KEY.match(fallback):
            return fallback
        return None
    value = value.strip()
    if not value or len(value) > KEY_MAX_LENGTH or not _KEY.match(value):
        raise ValidationError(
            {HEADER: ["must be 1 to 255 printable ASCII characters (e.g. a UUID)"]}
        )
    return value


class Idempotency:
    """One request's key: look up its earlier outcome, store its own."""

    def __init__(self, request, scope: str, chat: Chat, body: Any, key: str):
        self.request = request
        self.user = request.user
        self.scope = scope
        self.chat = chat
        self.key = key
        self.hash = request_hash(scope, chat.pk, body)
        self._body = body
        self._row: IdempotencyKey | None = None
        self._keyed: IdempotencyKey | None = None  # the row runs.keyed stores with the run
        self._looked = False  # earlier() read the key: _expired is what it found
        self._expired: int | None = None  # the key's expired row earlier() found

    @property
    def row(self) -> IdempotencyKey | None:
        """The key's row this request stored (``None`` before, or when it stored none)."""
        if self._row is None and self._keyed is not None and self._keyed.pk is not None:
            return self._keyed
        return self._row

    @row.setter
    def row(self, value: IdempotencyKey | None) -> None:
        self._row = value
        if value is None:
            self._keyed = None

    @classmethod
    def of(cls, request, scope: str, chat: Chat, body: Any, fallback: str | None = None):
        """The request's idempotency, ``None`` when it sent no key."""
        key = key_of(request, fallback)
        if key is None or not getattr(request.user, "is_authenticated", False):
            return None
        return cls(request, scope, chat, body, key)

    # -- a retry
    def earlier(self) -> IdempotencyKey | None:
        """The key's row within the window; :class:`KeyReused` when it names another
        request. A key left in progress past the lease with nothing of its request left
        (no run) is dropped: ``None``, the retry is answered afresh. The key's row past the
        window is read too (the key is unique: one row at most), so that storing the key
        deletes it only when there is one."""
        row = (
            IdempotencyKey.objects.filter(
                user=self.user, chat=self.chat, scope=self.scope, key=self.key
            )
            .select_related("run")
            .first()
        )
        self._looked, self._expired = True, None
        if row is not None and row.created_at < _cutoff():
            self._expired, row = row.pk, None
        if row is not None and row.request_hash != self.hash:
            if row.request_hash not in request_hashes(self.scope, self.chat.pk, self._body):
                raise KeyReused()
        if row is not None and row.response_status is None and row.run_id is None:
            if row.created_at < _lease_cutoff():
                # one statement: of racing retries one drops it, the others find it gone
                IdempotencyKey.objects.filter(
                    pk=row.pk, response_status__isnull=True, run__isnull=True
                ).delete()
                logger.warning("dropped the abandoned %s key %r of chat %s", *_named(row))
                return None
        return row

    def replay(self, view, row: IdempotencyKey):
        """The first request's outcome, again."""
        if row.response_status is None:
            row = self.recovered(view, row)
        body = row.response_body
        if isinstance(body, dict) and body.get("stream") and row.response_status == 200:
            return self._replay_stream(view, row)
        response = Response(body, status=row.response_status)
        response[REPLAYED_HEADER] = "true"
        return response

    def _replay_stream(self, view, row: IdempotencyKey):
        from .serializers import RunSerializer

        run = row.run
        if run is None:
            raise KeyInProgress()
        if not settings.EVENTS_URL:
            run.refresh_from_db()
            # a run waiting for a decision ended the first request's stream: it answers
            if run.status in (Run.QUEUED, Run.RUNNING):
                raise KeyInProgress(
                    f"The run started by the request with this {HEADER} is still in "
                    "progress: without live events it cannot be replayed; read it at "
                    "runs/{id}/ once it ends."
                )
            run = Run.objects.with_totals().get(pk=run.pk)
            context = view.get_serializer_context()
            response = Response({"run": RunSerializer(run, context=context).data}, status=200)
            response[REPLAYED_HEADER] = "true"
            return response
        last_id = self.request.headers.get("Last-Event-ID")
        last_id = last_id.strip() if last_id else None
        if last_id is not None and not _EVENT_ID.fullmatch(last_id):
            last_id = None
        kind = row.response_body["stream"]
        after = row.response_body.get("events_after") or "0-0"
        events = replay_events(self.chat.pk, run.pk, after=after, last_id=last_id)
        if kind == "ui":
            from . import ui

            frames = _ui_frames(ui, self.chat.pk, events)
            if view.is_asgi():
                frames = _in_thread(frames)
            response = ui.ui_response(frames)
        else:
            from .sse import sse_response

            frames = _sse_frames(events)
            if view.is_asgi():
                frames = _in_thread(frames)
            response = sse_response(frames)
        response[REPLAYED_HEADER] = "true"
        return response

    def recovered(self, view, row: IdempotencyKey) -> IdempotencyKey:
        """A key whose first request has not answered: its answer rebuilt from its run
        and stored, once the run ended (or waits for a decision) or the key is past the
        lease (its request is gone); :class:`KeyInProgress` before."""
        run = Run.objects.filter(pk=row.run_id).first() if row.run_id else None
        going = run is not None and run.status in (Run.QUEUED, Run.RUNNING)
        if run is None or (going and row.created_at >= _lease_cutoff()):
            raise KeyInProgress()
        status_code, body = self._rebuilt(view, run)
        # only a row still without its answer: a late first answer (or a racing retry) wins
        IdempotencyKey.objects.filter(pk=row.pk, response_status__isnull=True).update(
            response_status=status_code, response_body=_json(body)
        )
        row.refresh_from_db()
        logger.warning("answered the abandoned %s key %r of chat %s", *_named(row))
        return row

    def _rebuilt(self, view, run: Run) -> tuple[int, Any]:
        """The answer the first request gives once it admitted ``run``, from its scope."""
        from .serializers import MessageSerializer, RunSerializer

        context = view.get_serializer_context()
        run_data = RunSerializer(Run.objects.with_totals().get(pk=run.pk), context=context).data
        if self.scope == "messages" and run.prompt_id is not None:
            message = Message.objects.filter(pk=run.prompt_id).transcript().get()
            message_data = MessageSerializer(message, context=context).data
            return status.HTTP_202_ACCEPTED, {"message": message_data, "run": run_data}
        if self.scope in ("approved", "denied"):
            return status.HTTP_202_ACCEPTED, {
                "call_id": view.kwargs.get("call_id"),
                "approval": self.scope,
                "resumed": run.status != Run.AWAITING_APPROVAL,
                "run": run_data,
            }
        return status.HTTP_200_OK, {"run": run_data}

    # -- the first request
    @contextmanager
    def admitting(
        self,
        *,
        stream: str | None = None,
        events_after: str | None = None,
    ):
        """Store the key with the run the block admits (in the run's transaction: on
        PostgreSQL in the admission's one call, :func:`django_llmchat.runs.keyed`; with the
        statements that delete the key's expired row first, on
        :func:`~django_llmchat.runs.on_admit`); a racing request with the same key that got
        there first answers instead (:class:`Replayed` carries its outcome). ``stream``:
        the answer streams the run (``"sse"`` or ``"ui"``): the outcome is stored at once."""

        def answer_of(row: IdempotencyKey) -> IdempotencyKey:
            if stream is not None:  # the run's stream (the row names the run)
                row.response_status = 200
                row.response_body = {"stream": stream, "events_after": events_after}
            return row

        def store(run: Run) -> None:
            if self.row is not None:
                return  # one request, one key (several decisions of one ui/chat request)
            row = answer_of(self._new_row(run=run))
            # no savepoint: a duplicate's IntegrityError rolls the whole admission back
            # (the run's transaction, or its savepoint), and is answered below
            row.save(force_insert=True)
            self.row = row

        try:
            if self._looked and self._expired is None:
                # nothing to delete first: the row goes with the run, in the admission's
                # own call on PostgreSQL (runs.keyed)
                self._keyed = answer_of(self._new_row())
                with runs.keyed(self._keyed):
                    yield self
            else:
                with runs.on_admit(store):
                    yield self
        except IntegrityError:
            self.row = self._keyed = None
            raise Replayed(self._after_race()) from None

    def _new_row(self, **fields: Any) -> IdempotencyKey:
        """This request's key row, not saved yet; an expired row of the key is deleted
        first (the one :meth:`earlier` found, when it read the key)."""
        identity = {"user": self.user, "chat": self.chat, "scope": self.scope, "key": self.key}
        if not self._looked:
            IdempotencyKey.objects.filter(**identity, created_at__lt=_cutoff()).delete()
        elif self._expired is not None:
            IdempotencyKey.objects.filter(pk=self._expired, created_at__lt=_cutoff()).delete()
        return IdempotencyKey(**identity, request_hash=self.hash, **fields)

    def _after_race(self) -> IdempotencyKey:
        row = self.earlier()
        if row is None:  # the winner rolled back meanwhile
            raise KeyInProgress()
        return row

    @contextmanager
    def atomic(self):
        """For a request admitting no run (cancel): the key first, then the block, in one
        transaction."""
        try:
            with transaction.atomic():
                row = self._new_row()
                with transaction.atomic():
                    row.save(force_insert=True)
                self.row = row
                yield self
        except IntegrityError:
            self.row = None
            raise Replayed(self._after_race()) from None

    def forget(self) -> None:
        """The request ended without an outcome to replay (its decisions were stored but
        nothing resumed): a retry is answered afresh."""
        if self.row is not None:
            IdempotencyKey.objects.filter(pk=self.row.pk).delete()
            self.row = None

    def answered(self, status_code: int, body: Any, run: Run | None = None) -> None:
        """Store the first request's answer (a key stored by :meth:`admitting`)."""
        if self.row is None:
            return
        updates: dict[str, Any] = {"response_status": status_code, "response_body": _json(body)}
        if run is not None:
            updates["run"] = run
        IdempotencyKey.objects.filter(pk=self.row.pk).update(**updates)


class Replayed(Exception):
    """A racing request with the same key stored its key first: answer its outcome."""

    def __init__(self, row: IdempotencyKey):
        self.row = row
        super().__init__(row.pk)


def replay_events(
    chat_id: int, run_id: int, *, after: str, last_id: str | None
) -> Iterator[tuple[str | None, Any]]:
    """``(event_id, event)`` of run ``run_id`` from the chat's event stream: from its
    ``run_started`` (read after ``after``, the stream's position before the run was
    admitted), or right after ``last_id``, to its final ``run_finished``; ``(None,
    None)`` while idle. Ends as well when the run ended in the database and nothing came
    for two idle periods (its end was never published)."""
    from .. import streams
    from .sse import heartbeat_ms

    started = last_id is not None
    idle = 0
    wanted = str(run_id)
    for event_id, event in streams.follow(
        chat_id,
        last_id or after,
        stop_at_run_end=False,
        heartbeat=True,
        block_ms=heartbeat_ms(),  # no patience: its idle periods tell an unpublished end
    ):
        if event is None:
            finished = Run.objects.filter(pk=run_id, status__in=Run.FINISHED).exists()
            idle = idle + 1 if finished else 0
            if idle >= 2:
                return
            yield None, None
            continue
        idle = 0
        if not started:
            if isinstance(event, RunStarted) and event.run_id == wanted:
                started = True
            else:
                continue  # an earlier run's events
        yield event_id, event
        if isinstance(event, RunFinished) and event.run_id == wanted:
            if event.status != "retrying":
                return


def _sse_frames(events) -> Iterator[str]:
    from .sse import comment

    yield comment("connected")
    try:
        for event_id, event in events:
            yield comment() if event is None else to_sse(event, event_id)
    except Exception as exc:
        logger.exception("replaying a run failed", exc_info=exc)
        from .sse import frame, unavailable_message

        yield frame("error", {"type": "events_unavailable", "message": unavailable_message(exc)})


def _ui_frames(ui, chat_id: int, events) -> Iterator[str]:
    stream = ui.UIMessageStream(chat_id=chat_id)
    try:
        for _, event in events:
            if event is None:
                yield ": keep-alive\n\n"
                continue
            yield "".join(ui.chunk(item) for item in stream.feed(event))
    except Exception as exc:
        logger.exception("replaying a run of chat %s failed", chat_id, exc_info=exc)
        from .sse import unavailable_message

        yield "".join(ui.chunk(i) for i in stream.error(unavailable_message(exc)))
    yield ui.DONE


def _in_thread(frames: Iterator[str]):
    from ..loop.aio import stream_in_thread

    def make():
        try:
            yield from frames
        finally:
            from django.db import connections

            connections.close_all()

    return stream_in_thread(make)
