"""Running the synchronous loop from async code: a worker thread feeds an asyncio queue
(:func:`stream_in_thread`), or is awaited for its result (:func:`call_in_thread`)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

from ..conf import settings

_END = object()


async def call_in_thread(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Await ``func(*args, **kwargs)`` called in a worker thread, which closes its own
    database connections when it returns: the async twin of a blocking verb."""

    def call() -> Any:
        try:
            return func(*args, **kwargs)
        finally:
            connections.close_all()  # the worker thread's own connections

    return await sync_to_async(call, thread_sensitive=False)()


def _trace_context() -> Any:
    """Which trace a run started in the thread joins: the caller's
    (telemetry.current_context(), read here: that module's imports would close a circle),
    ``None`` without OpenTelemetry."""
    if not settings.OPENTELEMETRY:
        return None
    from opentelemetry import context

    return context.get_current()


def _put(queue: asyncio.Queue, loop: asyncio.AbstractEventLoop, stop, item: Any) -> None:
    """Whether ``item`` reaches the consumer's queue: not once ``stop`` is set (the
    consumer gone, nobody will take it), waiting for room meanwhile."""
    if stop.is_set():
        return
    fut = asyncio.run_coroutine_threadsafe(queue.put(item), loop)
    while True:
        try:
            fut.result(timeout=1.0)
            return
        except TimeoutError:
            if stop.is_set():  # the consumer is gone: nobody will take it
                fut.cancel()
                return


def _in_trace(trace_context: Any, produce: Callable[[], None]) -> None:
    """Whether ``produce`` runs in the caller's trace (attached for its time) or in none."""
    if trace_context is None:
        return produce()
    from opentelemetry import context

    token = context.attach(trace_context)
    try:
        produce()
    finally:
        context.detach(token)


def _produce(make: Callable[[], Iterator[Any]], put, stop, drain: bool) -> None:
    """Which of ``make()``'s items are put (all until ``stop``, then none: the iteration
    ends, or with ``drain`` goes on to the end unheard), then the end or the error that
    ended it; the thread's connections closed after."""
    try:
        iterator = make()
        try:
            for item in iterator:
                if stop.is_set():
                    if drain:
                        continue
                    break
                put(item)
        finally:
            close = getattr(iterator, "close", None)
            if close:
                close()
        put(_END)
    except BaseException as exc:  # delivered to the consumer
        if not stop.is_set():
            put(exc)
    finally:
        connections.close_all()  # this thread's connections


async def stream_in_thread(
    make: Callable[[], Iterator[Any]], *, drain: bool = False
) -> AsyncIterator[Any]:
    """Iterate ``make()`` in a thread; yield its items here. Stopping early (``aclose``,
    a disconnected client) stops the thread between items, or, with ``drain=True``, lets
    it iterate to the end with nobody listening (a run that must finish)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue(maxsize=256)
    stop = threading.Event()

    def put(item: Any) -> None:
        _put(queue, loop, stop, item)

    trace_context = _trace_context()

    def work() -> None:
        _in_trace(trace_context, lambda: _produce(make, put, stop, drain))

    thread = threading.Thread(target=work, name="llmchat-astream", daemon=True)
    thread.start()
    try:
        while True:
            item = await queue.get()
            if item is _END:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while not queue.empty():  # unblock a producer waiting on a full queue
            queue.get_nowait()
