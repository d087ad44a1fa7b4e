"""A look at SQLite's per-file writer lock of this process (app/db/sqlite_writers.py)."""

from __future__ import annotations

import threading

from sqlalchemy import Engine


class RecordingLock:
    """A file's writer lock that tells when a writer had to wait for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waiting = threading.Event()

    def acquire(self, timeout: float) -> bool:
        if self.lock.acquire(blocking=False):
            return True
        self.waiting.set()
        return self.lock.acquire(timeout=timeout)

    def release(self) -> None:
        self.lock.release()

    def locked(self) -> bool:
        return self.lock.locked()


def record_writer_lock(engine: Engine) -> RecordingLock:
    """Put a recording lock in place of the engine's file lock; only while no writer holds it."""
    lock = RecordingLock()
    with engine.connect() as connection:
        connection_class = type(connection.connection.dbapi_connection)
        assert not connection_class.writer_lock.locked()
        connection_class.writer_lock = lock
    return lock
