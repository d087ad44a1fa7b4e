"""Helpers for work that must finish even when the task awaiting it is cancelled, the thread hop of
every database call, and the flag that tells a worker thread to stop."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import weakref
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from app.db.admission import admitted

T = TypeVar("T")

# The executor `to_thread` submits to, per event loop (set with `use_executor`).
_executors: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Executor] = (
    weakref.WeakKeyDictionary()
)


def use_executor(executor: Executor) -> None:
    """Make `executor` the running loop's default executor and the one `to_thread` uses."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(executor)
    _executors[loop] = executor


async def drain_workers(seconds: float) -> None:
    """Stop the running loop's worker threads taking work and wait, at most `seconds`, for the
    calls they are still running (a late connect, a call its caller stopped waiting for). The
    engine is disposed after this: a connection such a call hands back is then closed with the
    pool instead of being left open for the garbage collector."""
    executor = _executors.pop(asyncio.get_running_loop(), None)
    if executor is None:
        return
    executor.shutdown(wait=False, cancel_futures=True)
    with anyio.move_on_after(seconds):
        await anyio.to_thread.run_sync(executor.shutdown, True, abandon_on_cancel=True)


async def to_thread(func: Callable[..., T], /, *args: Any) -> T:
    """`asyncio.to_thread` (the context copied into the worker, the call cancelled if it has not
    started when its caller is), without chaining a `concurrent.futures.Future` to the awaited
    one: `asyncio.wrap_future` adds its callback under that future's lock, which the worker
    thread takes as it starts the call, so the event loop often blocked on that lock and then
    waited for the GIL the worker held. Here the worker hands its outcome to the loop. Kept over
    anyio's `to_thread.run_sync` with a `CapacityLimiter` because it costs the loop less per hop
    (`scripts/bench/to_thread.py`; the figures are in docs/performance.md).

    The call first takes its worker slot (`app.db.admission`), unless its caller holds one."""
    async with admitted():
        return await _run_in_worker(func, *args)


async def _run_in_worker(func: Callable[..., T], /, *args: Any) -> T:
    loop = asyncio.get_running_loop()
    executor = _executors.get(loop)
    if executor is None:  # a loop nobody sized (a script, a test without the runtime)
        return await asyncio.to_thread(func, *args)
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def call() -> None:
        if future.cancelled():  # its caller left while it was queued
            return
        try:
            result = context.run(func, *args)
        except BaseException as error:  # handed to the caller, as the executor's future would
            _hand_over(loop, _settle_error, future, error)
        else:
            _hand_over(loop, _settle, future, result)

    submitted = executor.submit(call)
    try:
        return await future
    except asyncio.CancelledError:
        submitted.cancel()  # out of the queue if still there; a running call ends on its own
        raise


def _hand_over(loop: asyncio.AbstractEventLoop, settle: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits for this
        loop.call_soon_threadsafe(settle, *args)


def _settle(future: asyncio.Future[T], result: T) -> None:
    if not future.done():
        future.set_result(result)


def _settle_error(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class CancelFlag:
    """A one-way cancellation flag shared with a worker thread: `set()` and `is_set()`, as
    `threading.Event` has them. Nothing here waits on it, so it has no Condition, lock and waiter
    deque for every open turn to hold. A bool attribute is read and written
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
    cancelled scope: asyncio's one-shot cancellation and anyio's repeated one (a cancelled
    scope, as the SSE and answer responses use) alike. The task's outcome is retrieved, never
    raised here."""
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
