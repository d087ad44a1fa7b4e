"""CPU-bound work of one request, off the event loop: a request whose work grows with its input
(an import's plan) runs it in a worker thread, at most `CPU_WORKERS` at once per process, so
the loop keeps answering everyone else (`/healthz` included) while it runs.

Not the database's thread hop (`app.concurrency.to_thread`): that one takes a database worker
slot, which CPU work must not hold, and its pool is sized for waiting on the database.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")

# One at a time per process: the GIL runs one thread's Python at once anyway, and each more
# thread doing it takes the loop's turns; a second request queues here, without blocking.
CPU_WORKERS = 1

_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _limiter() -> anyio.CapacityLimiter:
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(CPU_WORKERS)
    return limiter


async def off_loop(func: Callable[..., T], /, *args: object) -> T:
    """`func(*args)` in a worker thread, at most CPU_WORKERS at a time. A caller cancelled
    while it runs waits for it (it is bounded by its input), so nothing runs unowned."""
    return await anyio.to_thread.run_sync(func, *args, limiter=_limiter())
