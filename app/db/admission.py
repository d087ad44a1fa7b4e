"""Admission in front of the database work: a busy database is a queue, a hung one a deadline.

Every database call runs on a worker thread holding a pooled connection (one thread per
connection, `app.runtime.size_worker_threads`). Before this queue, a burst of turns waited in
the executor's unbounded queue, and that wait counted against the deadlines meant for a database
that hangs (the turn's start, MEMORY_READ_TIMEOUT_SECONDS): a healthy database under a burst of
300 turn starts lost transcripts and memory. Now work first takes slots here, in order (one
per worker thread it will use), and its deadline starts once admitted. The queue is bounded in
length (DB_QUEUE_LIMIT) and in wait (DB_QUEUE_TIMEOUT_SECONDS); past either the work is refused
with `DatabaseBusyError` (`503 database_busy`, or the turn's `error` event).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import weakref
from collections import deque
from collections.abc import AsyncIterator


class DatabaseBusyError(RuntimeError):
    """The database work queue is full, or the work waited its whole DB_QUEUE_TIMEOUT_SECONDS."""


class Admission:
    """A first-come, first-served counter of worker-thread slots, with a bounded queue."""

    def __init__(self, slots: int, *, queue_limit: int, wait_seconds: float) -> None:
        self.slots = slots
        self.free = slots
        self.queue_limit = queue_limit
        self.wait_seconds = wait_seconds
        self.waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def acquire(self, units: int) -> int:
        """Take `units` slots (at most all of them), waiting in line; returns how many."""
        units = max(1, min(units, self.slots))
        if not self.waiters and self.free >= units:
            self.free -= units
            return units
        if len(self.waiters) >= self.queue_limit:
            raise DatabaseBusyError(f"{len(self.waiters)} database calls are already waiting")
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (units, granted)
        self.waiters.append(entry)
        try:
            async with asyncio.timeout(self.wait_seconds):
                await granted
        except BaseException as error:
            if granted.done() and not granted.cancelled():
                self.release(units)  # granted just as the caller left: hand the slots on
            else:
                granted.cancel()
                with contextlib.suppress(ValueError):
                    self.waiters.remove(entry)
                self._wake()  # a smaller request behind this one may fit now
            if isinstance(error, TimeoutError):
                raise DatabaseBusyError(
                    f"waited {self.wait_seconds:g} s for a database worker"
                ) from None
            raise
        return units

    def release(self, units: int) -> None:
        self.free += units
        self._wake()

    def _wake(self) -> None:
        while self.waiters and self.waiters[0][0] <= self.free:
            units, granted = self.waiters.popleft()
            if granted.done():  # its caller left
                continue
            self.free -= units
            granted.set_result(None)


_admissions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Admission] = (
    weakref.WeakKeyDictionary()
)
# Set while a task (and the tasks and threads it starts) holds slots: their calls are admitted.
_admitted: contextvars.ContextVar[bool] = contextvars.ContextVar("db_admitted", default=False)


def use_admission(admission: Admission) -> None:
    """Make `admission` the running loop's queue in front of database work."""
    _admissions[asyncio.get_running_loop()] = admission


@contextlib.asynccontextmanager
async def admitted(units: int = 1) -> AsyncIterator[None]:
    """Hold `units` worker slots for the body (once: nested calls inside are already admitted).
    A loop nobody configured (a script, a unit test) admits everything at once."""
    admission = _admissions.get(asyncio.get_running_loop())
    if admission is None or _admitted.get():
        yield
        return
    taken = await admission.acquire(units)
    token = _admitted.set(True)
    try:
        yield
    finally:
        _admitted.reset(token)
        admission.release(taken)
