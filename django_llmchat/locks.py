"""One lock per chat, so two tasks never run the loop of one chat at the same time.

The lock belongs to the process that took it and dies with it: a worker killed with
SIGKILL (or a lost machine) never leaves a chat locked.

* PostgreSQL: a session advisory lock (``pg_try_advisory_lock``) taken on ONE dedicated
  connection per worker process, shared by all its threads (a 50-thread worker holds one
  extra connection, not 50, and none while it runs nothing). PostgreSQL releases the
  locks when that connection drops, which the kernel does the moment the process dies
  (TCP keepalives cover a lost host).
* SQLite (and other databases): an exclusive ``flock`` on a file under the temporary
  directory, named after the database and the chat, which the kernel releases when the
  process dies. An in-memory database is private to its process, so a lock inside the
  process is enough there.

Inside a process, a set of held keys guards against two threads taking one chat's lock.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

logger = logging.getLogger("django_llmchat.locks")

__all__ = ["ChatLock"]

_POLL_SECONDS = 0.05

# Keys held by this process: (database alias, lock namespace, object id).
_held: set[tuple[str, str, int]] = set()
_held_mutex = threading.Lock()


def _int32(value: int) -> int:
    """``value`` folded into a signed 32-bit integer (advisory lock key halves)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


class _PostgresSession:
    """One autocommit connection per process and database alias, holding every advisory
    lock this process takes on that database."""

    def __init__(self, alias: str):
        self.alias = alias
        self.conn: Any = None
        self.pid = os.getpid()
        self.mutex = threading.Lock()
        self.keys: set[tuple[int, int]] = set()

    def _connect(self) -> Any:
        from django.db import connections

        wrapper = connections[self.alias]
        params = wrapper.get_connection_params()
        for name in ("cursor_factory", "context", "prepare_threshold"):
            params.pop(name, None)
        params.setdefault("application_name", "django_llmchat locks")
        # notice a vanished host within a minute, so its locks are not held forever
        params.setdefault("keepalives", 1)
        params.setdefault("keepalives_idle", 30)
        params.setdefault("keepalives_interval", 10)
        params.setdefault("keepalives_count", 3)
        conn = wrapper.Database.connect(**params)
        conn.autocommit = True
        return conn

    def _execute(self, sql: str, key: tuple[int, int]) -> Any:
        with self.conn.cursor() as cursor:
            cursor.execute(sql, key)
            row = cursor.fetchone()
        return row[0] if row else None

    def _ensure(self) -> None:
        if self.pid != os.getpid():  # forked: the parent's connection is not ours
            self.conn, self.pid, self.keys = None, os.getpid(), set()
        if self.conn is None or getattr(self.conn, "closed", False):
            self._reconnect()

    def _reconnect(self) -> None:
        lost = set(self.keys)
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = self._connect()
        self.keys = set()
        # locks held before the connection dropped are gone: take them again
        for key in lost:
            if self._execute("SELECT pg_try_advisory_lock(%s, %s)", key):
                self.keys.add(key)
            else:
                logger.error("lost the chat lock %s when the lock connection dropped", key)

    def run(self, sql: str, key: tuple[int, int]) -> Any:
        with self.mutex:
            self._ensure()
            try:
                return self._execute(sql, key)
            except Exception as exc:
                if not _is_connection_error(exc):
                    raise
                logger.warning("chat lock connection failed (%s); reconnecting", exc)
                self._reconnect()
                return self._execute(sql, key)

    def try_lock(self, key: tuple[int, int]) -> bool:
        got = bool(self.run("SELECT pg_try_advisory_lock(%s, %s)", key))
        if got:
            with self.mutex:
                self.keys.add(key)
        return got

    def unlock(self, key: tuple[int, int]) -> None:
        with self.mutex:
            self.keys.discard(key)
        try:
            self.run("SELECT pg_advisory_unlock(%s, %s)", key)
        except Exception:
            logger.exception("could not release the chat lock %s", key)
        with self.mutex:
            if not self.keys and self.conn is not None:
                # idle: hold no connection between runs (closing also drops any lock)
                conn, self.conn = self.conn, None
                try:
                    conn.close()
                except Exception:
                    pass


def _is_connection_error(exc: Exception) -> bool:
    name = type(exc).__name__
    return name in {"OperationalError", "InterfaceError"}


_sessions: dict[str, _PostgresSession] = {}
_sessions_mutex = threading.Lock()


def _session(alias: str) -> _PostgresSession:
    with _sessions_mutex:
        session = _sessions.get(alias)
        if session is None:
            session = _sessions[alias] = _PostgresSession(alias)
        return session


class ChatLock:
    """An exclusive lock on one row (by default a chat), across threads and processes.

    ``acquire(wait=seconds)`` returns whether the lock was taken; ``release()`` gives it
    back. As a context manager it waits forever.
    """

    def __init__(self, pk: int, *, namespace: str = "llmchat_chat", using: str = "default"):
        self.pk = int(pk)
        self.namespace = namespace
        self.using = using
        self._claim = (using, namespace, self.pk)
        self._release: Any = None

    @property
    def held(self) -> bool:
        return self._release is not None

    def acquire(self, wait: float | None = 0.0) -> bool:
        """Take the lock, polling up to ``wait`` seconds (``None``: forever)."""
        if self._release is not None:
            raise RuntimeError("this ChatLock is already held")
        deadline = None if wait is None else time.monotonic() + max(0.0, wait)
        while True:
            if self._try():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_SECONDS)

    def release(self) -> None:
        release, self._release = self._release, None
        if release is None:
            return
        try:
            release()
        finally:
            with _held_mutex:
                _held.discard(self._claim)

    def __enter__(self) -> ChatLock:
        self.acquire(wait=None)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # -- backends -------------------------------------------------------------------------
    def _try(self) -> bool:
        with _held_mutex:
            if self._claim in _held:
                return False
            _held.add(self._claim)
        try:
            release = self._try_shared()
        except BaseException:
            with _held_mutex:
                _held.discard(self._claim)
            raise
        if release is None:
            with _held_mutex:
                _held.discard(self._claim)
            return False
        self._release = release
        return True

    def _try_shared(self):
        """Take the cross-process part of the lock: a release callable, or ``None``."""
        from django.db import connections

        wrapper = connections[self.using]
        if wrapper.vendor == "postgresql":
            key = (_int32(zlib.crc32(self.namespace.encode())), _int32(self.pk))
            session = _session(self.using)
            if not session.try_lock(key):
                return None
            return lambda: session.unlock(key)
        name = str(wrapper.settings_dict.get("NAME") or "")
        if wrapper.vendor == "sqlite" and (not name or ":memory:" in name or "mode=memory" in name):
            return lambda: None  # a private in-memory database: this process is all there is
        return _file_lock(f"{wrapper.vendor}:{os.path.abspath(name)}", self.namespace, self.pk)


def _file_lock(database: str, namespace: str, pk: int):
    try:
        import fcntl
    except ImportError:  # no flock (Windows): the lock covers this process only
        return lambda: None
    folder = Path(tempfile.gettempdir()) / "django_llmchat-locks"
    folder.mkdir(mode=0o700, exist_ok=True)
    digest = hashlib.sha1(database.encode()).hexdigest()[:16]
    path = folder / f"{digest}-{namespace}-{pk}.lock"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file while we opened it: start over

    def release() -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    return release
