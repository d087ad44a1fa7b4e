"""Waiting on database work with a deadline: past it the caller goes on, and the work it left
behind can never commit (see `app.db.guard`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from app.db.admission import admitted
from app.db.guard import Fence, current_fence

T = TypeVar("T")
R = TypeVar("R")


class DeadlineExceededError(RuntimeError):
    """The work did not finish within its deadline; it was abandoned, nothing of it commits."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"{what} did not finish within {seconds:g} s")
        self.what = what
        self.seconds = seconds


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # the caller has gone; the outcome is abandoned on purpose


async def within(seconds: float, work: Callable[[], Awaitable[T]], *, what: str = "work") -> T:
    """Await `work()` for at most `seconds`, else raise `DeadlineExceededError`.

    `work()` runs in its own task whose context holds a fresh `Fence`, so every worker thread it
    starts (`asyncio.to_thread` copies the context) is fenced. At the deadline, or when the
    caller is cancelled, the fence is abandoned before control returns: those threads can no
    longer check out a connection or commit, and the connections they hold are broken, so they
    end promptly instead of waiting on a silent database.

    The deadline starts once the work is admitted (`app.db.admission`): a queue in front of a
    busy database is bounded there, by its own limits, and ends in `DatabaseBusyError`.
    """
    async with admitted():  # waiting in line is a busy database, not a hung one: not counted
        return await _fenced_within(seconds, work, what)


async def _fenced_within(seconds: float, work: Callable[[], Awaitable[T]], what: str) -> T:
    fence = Fence()

    async def fenced() -> T:
        current_fence.set(fence)  # this task's own context copy: the caller's is untouched
        return await work()

    task = asyncio.ensure_future(fenced())
    try:
        done, _pending = await asyncio.wait({task}, timeout=max(seconds, 0.0))
    except asyncio.CancelledError:
        fence.abandon()
        task.cancel()
        task.add_done_callback(_consume)
        raise
    if done:
        return task.result()
    fence.abandon()
    task.cancel()
    task.add_done_callback(_consume)
    raise DeadlineExceededError(what, seconds)


class Handover(Generic[T]):
    """A value a worker thread hands to the event loop before its call ends (`within_staged`):
    called once, from the thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.future: asyncio.Future[T] = loop.create_future()

    def __call__(self, value: T) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits for this
            self._loop.call_soon_threadsafe(_settle, self.future, value)


def _settle(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


class Later(Generic[R]):
    """The rest of `within_staged` work, still running in its worker thread under its own fence:
    `result` waits for it by a deadline of its own; `abandon` gives it up unread."""

    def __init__(self, task: asyncio.Future[R], fence: Fence, what: str) -> None:
        self._task = task
        self._fence = fence
        self._what = what

    async def result(self, seconds: float) -> R:
        """The rest's outcome within `seconds`, else `DeadlineExceededError` (the rest is
        abandoned: its connection broken, nothing of it commits)."""
        try:
            done, _pending = await asyncio.wait({self._task}, timeout=max(seconds, 0.0))
        except asyncio.CancelledError:
            self.abandon()
            raise
        if done and not self._task.cancelled():
            return self._task.result()
        self.abandon()  # abandoned before (its cancellation is not the caller's)
        raise DeadlineExceededError(self._what, seconds)

    def abandon(self) -> None:
        if not self._task.done():
            self._fence.abandon()
            self._task.cancel()


async def within_staged(
    seconds: float, work: Callable[[Handover[T]], Awaitable[R]], *, what: str, rest: str
) -> tuple[T, Later[R]]:
    """`within` for work in two stages on one worker thread: what `work` hands over (its
    `Handover`) is awaited for at most `seconds`, and the rest of `work` goes on in the same
    thread, on the same connection, awaited later by its own deadline (`Later.result`). One
    thread hop and checkout serve both stages.

    Both stages share one fence and one worker slot, held until the rest ends. A deadline or a
    cancellation before the hand-over abandons everything, as `within` does; a failure of the
    rest (raised by `Later.result`) changes nothing of what was handed over."""
    loop = asyncio.get_running_loop()
    fence, handover = Fence(), Handover[T](loop)
    started: asyncio.Future[None] = loop.create_future()

    async def fenced() -> R:
        async with admitted():  # the slot lives with the task: the rest still holds it
            current_fence.set(fence)
            started.set_result(None)
            return await work(handover)

    task = asyncio.ensure_future(fenced())
    task.add_done_callback(_consume)  # the rest may never be awaited (a client that left)
    try:
        # Waiting in line is a busy database, not a hung one: not counted (`within`).
        queued: set[asyncio.Future[Any]] = {started, task}
        await asyncio.wait(queued, return_when=asyncio.FIRST_COMPLETED)
        if not started.done():
            task.result()  # DatabaseBusyError (the queue), or a cancellation
        running: set[asyncio.Future[Any]] = {handover.future, task}
        await asyncio.wait(running, timeout=max(seconds, 0.0), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        fence.abandon()
        task.cancel()
        raise
    if handover.future.done():
        return handover.future.result(), Later(task, fence, rest)
    if task.done():
        task.result()  # what the first stage raised
        raise RuntimeError(f"{what} ended without handing its result over")
    fence.abandon()
    task.cancel()
    raise DeadlineExceededError(what, seconds)
