"""SQLite's writers of one process wait in line on a lock, not in SQLite's busy handler.

SQLite lets one transaction write at a time. A writer that finds the database locked waits in
SQLite's busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25 and then up to 100 ms between tries,
however soon the lock frees: under load, writers slept while nobody wrote, with the cores idle.
So a write transaction of the service (`BEGIN IMMEDIATE`: every one of them, app/db/engine.py)
first takes a lock of this process for its database file, and the next writer starts as soon as
the last one commits or rolls back. A writer in another process still meets SQLite's own wait.

The wait is bounded like SQLite's (DB_LOCK_TIMEOUT_SECONDS, then "database is locked", as SQLite
says it) and ends early when its caller has given up (the fence, app/db/guard.py).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from sqlalchemy.exc import OperationalError

from app.db.guard import current_fence

# How often a waiting writer looks whether its caller has given up.
CHECK_SECONDS = 0.05

_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def writer_lock(database: str) -> threading.Lock:
    """The lock of one database file in this process (every engine on the file shares it); an
    in-memory database has its own."""
    if database in ("", ":memory:") or database.startswith("file:"):
        return threading.Lock()
    key = str(Path(database).resolve())
    with _locks_lock:
        return _locks.setdefault(key, threading.Lock())


class WriterConnection(sqlite3.Connection):
    """A sqlite3 connection that holds its file's writer lock from `take_writer_lock` until
    its transaction ends (commit, rollback, or the connection closed)."""

    writer_lock: threading.Lock
    holds_writer_lock = False

    def take_writer_lock(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        fence = current_fence.get()
        while True:
            if fence is not None:
                fence.check("writer lock")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OperationalError(
                    "BEGIN IMMEDIATE", None, sqlite3.OperationalError("database is locked")
                )
            wait = min(remaining, CHECK_SECONDS) if fence is not None else remaining
            if self.writer_lock.acquire(timeout=wait):
                self.holds_writer_lock = True
                return

    def let_go(self) -> None:
        if self.holds_writer_lock:
            self.holds_writer_lock = False
            self.writer_lock.release()

    def commit(self) -> None:
        super().commit()  # a commit that fails leaves the transaction open, and the lock held
        self.let_go()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self.let_go()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.let_go()


def connection_class(lock: threading.Lock) -> type[WriterConnection]:
    """The connection class (sqlite3's `factory`) for a database file's lock."""
    return type("WriterConnection", (WriterConnection,), {"writer_lock": lock})
