"""One object per process, for the background threads a process keeps (the lease keeper of
:mod:`django_llmchat.runs`, the event outbox of :mod:`django_llmchat.streams`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class _MadeInAProcess(Protocol):
    pid: int
    """The id of the process that made the object."""


T = TypeVar("T", bound=_MadeInAProcess)


class PerProcess(Generic[T]):
    """``get()`` is this process's ``factory()``, made on first use. A forked child gets its
    own: the parent's copy, whose thread did not survive the fork, has another ``pid``."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self.factory = factory
        self.instance: T | None = None
        self.mutex = threading.Lock()

    def get(self) -> T:
        found = self.current()
        if found is not None:
            return found
        with self.mutex:
            if self.instance is None or self.instance.pid != os.getpid():
                self.instance = self.factory()
            return self.instance

    def current(self) -> T | None:
        """This process's object, or ``None`` when it has not made one (never makes one)."""
        found = self.instance
        return found if found is not None and found.pid == os.getpid() else None
