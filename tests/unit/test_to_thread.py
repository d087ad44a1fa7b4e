"""`app.concurrency.to_thread`, the database calls' thread hop: what `asyncio.to_thread` promises
(the outcome, the copied context, a queued call cancelled with its caller), on the executor the
runtime sizes, without chaining the executor's future to the awaited one."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from app.concurrency import to_thread, use_executor

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


class CountingExecutor(ThreadPoolExecutor):
    """Counts submissions, and notes a done-callback added to any future it returned."""

    def __init__(self, workers: int) -> None:
        super().__init__(max_workers=workers)
        self.submitted = 0
        self.chained = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        future = super().submit(fn, *args, **kwargs)
        original = future.add_done_callback

        def noted(callback: Any) -> None:
            self.chained += 1
            original(callback)

        future.add_done_callback = noted  # type: ignore[method-assign]
        return future


def run(main: Any) -> Any:
    return asyncio.run(main())


def test_results_and_exceptions_come_back_from_the_registered_executor() -> None:
    executor = CountingExecutor(2)

    async def main() -> tuple[Any, ...]:
        use_executor(executor)
        value = await to_thread(lambda a, b: a + b, 2, 3)
        with pytest.raises(KeyError, match="missing"):
            await to_thread(lambda: {}["missing"])
        name = await to_thread(lambda: threading.current_thread().name)
        return value, name

    value, name = run(main)
    executor.shutdown()
    assert value == 5
    assert name != threading.main_thread().name
    assert executor.submitted == 3
    assert executor.chained == 0  # no done-callback on the executor's future


def test_the_worker_sees_the_callers_context_and_cannot_change_it() -> None:
    async def main() -> tuple[str, str]:
        use_executor(ThreadPoolExecutor(max_workers=1))
        request_id.set("r-1")

        def worker() -> str:
            seen = request_id.get()
            request_id.set("changed in the worker")
            return seen

        return await to_thread(worker), request_id.get()

    assert run(main) == ("r-1", "r-1")


def test_a_queued_call_is_not_run_once_its_caller_is_cancelled() -> None:
    """One worker, busy: the second call waits in the queue; its caller is cancelled, and the
    call never runs. (A call already running ends on its own; its outcome is dropped.)"""
    release = threading.Event()
    started = threading.Event()
    ran: list[str] = []

    executor = ThreadPoolExecutor(max_workers=1)

    async def main() -> None:
        use_executor(executor)

        def busy() -> str:
            started.set()
            release.wait(10)
            ran.append("busy")
            return "busy"

        first = asyncio.ensure_future(to_thread(busy))
        with ThreadPoolExecutor(max_workers=1) as helper:  # the only worker is taken
            await asyncio.get_running_loop().run_in_executor(helper, started.wait, 10)
        queued = asyncio.ensure_future(to_thread(lambda: ran.append("queued")))
        await asyncio.sleep(0.05)
        queued.cancel()
        first.cancel()  # running: it goes on, and nobody waits for its outcome
        release.set()
        for task in (first, queued):
            with pytest.raises(asyncio.CancelledError):
                await task

    run(main)
    executor.shutdown(wait=True)  # whatever was still queued has run by now
    assert ran == ["busy"]


def test_without_a_registered_executor_it_is_asyncio_to_thread() -> None:
    async def main() -> str:
        return await to_thread(lambda: threading.current_thread().name)

    assert run(main).startswith("asyncio_")
