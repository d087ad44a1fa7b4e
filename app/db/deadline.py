"""Waiting on database work with a deadline: past it the caller goes on, and the work it left
behind can never commit (see `app.db.guard`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from app.db.admission import admitted
from app.db.guard import Fence, current_fence

T = TypeVar("T")


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
