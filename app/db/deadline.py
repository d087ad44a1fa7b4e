"""Waiting on database work with a deadline: past it the caller goes on, and the work it left
behind can never commit (see `app.db.guard`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, cast

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
    """The first stage's value, set once by the worker thread (`within_staged`). Setting it
    wakes nobody: the event loop looks at it when the work ends, or at its next check."""

    __slots__ = ("handed", "value")

    def __init__(self) -> None:
        self.handed = False
        self.value: T | None = None

    def __call__(self, value: T) -> None:
        self.value = value
        self.handed = True  # after the value: a reader that sees the flag sees the value


# How often `within_staged` looks whether the first stage is done while the rest still runs:
# the longest a rest that runs late (a read that hangs) holds the first stage back.
STAGE_CHECK_SECONDS = 0.02


class Later(Generic[R]):
    """The rest of `within_staged` work, in its worker thread under its own fence (usually it
    has ended by the time it is asked for): `result` waits for it by a deadline of its own;
    `abandon` gives it up unread."""

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
    seconds: float,
    work: Callable[[Handover[T]], Awaitable[R]],
    *,
    what: str,
    rest: str,
    check_every: float = STAGE_CHECK_SECONDS,
) -> tuple[T, Later[R]]:
    """`within` for work in two stages on one worker thread: the first stage's value (set on
    its `Handover`) is waited for at most `seconds`, and the rest of `work` goes on in the same
    thread, on the same connection, awaited later by its own deadline (`Later.result`). One
    thread hop and checkout serve both stages.

    Usually both end before the first is returned: one wake of the event loop, when the work
    ends. A rest still running `check_every` seconds after the first stage was handed over is
    left to run on, and the first stage returned without it. Handing over from the thread does
    not wake the loop: that wake, while the rest ran, cost the loop and the thread turns at
    the GIL and more time than it saved (docs/performance.md).

    Both stages share one fence and one worker slot, held until the rest ends. A deadline or a
    cancellation before the hand-over abandons everything, as `within` does; a failure of the
    rest (raised by `Later.result`) changes nothing of what was handed over."""
    loop = asyncio.get_running_loop()
    fence, handover = Fence(), Handover[T]()
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
        deadline = loop.time() + max(seconds, 0.0)
        while not task.done() and not handover.handed and (left := deadline - loop.time()) > 0:
            await asyncio.wait({task}, timeout=min(check_every, left))
    except asyncio.CancelledError:
        fence.abandon()
        task.cancel()
        raise
    if handover.handed:
        return cast("T", handover.value), Later(task, fence, rest)
    if task.done():
        task.result()  # what the first stage raised
        raise RuntimeError(f"{what} ended without handing its result over")
    fence.abandon()
    task.cancel()
    raise DeadlineExceededError(what, seconds)
