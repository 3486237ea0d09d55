"""Running the synchronous loop from async code: a worker thread feeds an asyncio queue."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from django.db import connections

_END = object()


async def stream_in_thread(make: Callable[[], Iterator[Any]]) -> AsyncIterator[Any]:
    """Iterate ``make()`` in a thread; yield its items here. Stopping early (``aclose``,
    a disconnected client) stops the thread between items."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue(maxsize=256)
    stop = threading.Event()

    def put(item: Any) -> None:
        fut = asyncio.run_coroutine_threadsafe(queue.put(item), loop)
        fut.result()

    def work() -> None:
        try:
            iterator = make()
            try:
                for item in iterator:
                    if stop.is_set():
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
