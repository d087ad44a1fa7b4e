"""CPU-bound work of one request, off the event loop, so the loop keeps answering everyone else
(`/healthz` included) while it runs.

`in_process`: a pure function whose work is seconds (an import's plan) runs in a worker
process, one per service process, started on first use. A thread is not enough for it: a
thread running Python for seconds takes the GIL back every few milliseconds, and the loop waits
for it at each of a request's many steps (measured: `/healthz` answered in 1.5 s while an import
of 3,333 lines ran in a thread, scripts/bench/loop_stalls.py). `off_loop`: work that must
change the caller's objects (the chat tool's ledger) and lasts tens of milliseconds runs in a
thread, at most `CPU_WORKERS` at once per process.

Not the database's thread hop (`app.concurrency.to_thread`): that one takes a database worker
slot, which CPU work must not hold, and its pool is sized for waiting on the database.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
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


# The worker process, started on first use (spawned: forking a process that runs threads and
# holds database connections is unsafe). Its own interpreter: it competes for a core, not the
# GIL. concurrent.futures ends it at the interpreter's exit.
_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def _process_pool() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn")
            )
        return _pool


async def in_process(func: Callable[..., T], /, *args: object) -> T:
    """`func(*args)` (a module-level function of picklable arguments and result) in the
    worker process; calls queue for it, one at a time, without blocking the loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_process_pool(), func, *args)
