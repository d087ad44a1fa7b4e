"""Helpers for work that must finish even when the task awaiting it is cancelled, and the flag that
tells a worker thread to stop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


class CancelFlag:
    """A one-way cancellation flag shared with a worker thread: `set()` and `is_set()`, as
    `threading.Event` has them. Nothing here waits on it, so it has no Condition, lock and waiter
    deque (about 1.5 KiB that every open turn held). A bool attribute is read and written
    whole under the GIL."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


# How long a cancelled caller keeps waiting for cleanup it started (a rollback, a transcript row).
CLEANUP_SECONDS = 10.0


async def wait_shielded(task: asyncio.Future[Any], seconds: float | None) -> None:
    """Wait for `task` to end, at most `seconds` (None: as long as it takes), even inside a
    cancelled scope: asyncio's one-shot cancellation and anyio's (sse-starlette's task groups)
    repeated one alike. The task's outcome is retrieved, never raised here."""
    with anyio.CancelScope(shield=True):
        await asyncio.wait([task], timeout=seconds)
    if task.done() and not task.cancelled():
        task.exception()


async def finish_even_if_cancelled(
    work: Awaitable[T],
    *,
    on_cancel: Callable[[], None] | None = None,
    cleanup_seconds: float | None = CLEANUP_SECONDS,
) -> T:
    """Await `work` in its own task. If the caller is cancelled meanwhile, call `on_cancel`
    (e.g. set a worker's cancel event), wait up to `cleanup_seconds` for the task to end, and
    re-raise the cancellation: the caller never abandons work that decides what was committed.
    `cleanup_seconds=None` waits as long as the work takes (it must be bounded by itself, as a
    database transaction is by its statement and lock timeouts)."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if on_cancel is not None:
            on_cancel()
        await wait_shielded(task, cleanup_seconds)
        raise
