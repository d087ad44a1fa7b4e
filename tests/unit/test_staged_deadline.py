"""`within_staged`: work in two stages on one worker thread, each awaited by its own deadline.
Usually both arrive together; what the first stage hands over is the caller's once handed; the
rest can fail or run late (it is then left running) without touching it; a deadline on either
stage abandons the work's fence (its connections broken, nothing more committed); the worker
slot is held until the rest ends."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from app.concurrency import to_thread
from app.db.admission import Admission, use_admission
from app.db.deadline import DeadlineExceededError, Handover, within_staged
from app.db.guard import Fence, current_fence


class Worker:
    """A two-stage job for a worker thread: `before` seconds, hand over 1, `after` seconds,
    then return 2 (or raise `first_error` / `rest_error` at its stage)."""

    def __init__(
        self,
        before: float = 0.0,
        after: float = 0.0,
        first_error: BaseException | None = None,
        rest_error: BaseException | None = None,
    ) -> None:
        self.before, self.after = before, after
        self.first_error, self.rest_error = first_error, rest_error
        self.fence: Fence | None = None
        self.ended = threading.Event()

    def __call__(self, handover: Handover[int]) -> int:
        try:
            self.fence = current_fence.get()
            time.sleep(self.before)
            if self.first_error is not None:
                raise self.first_error
            handover(1)
            time.sleep(self.after)
            if self.rest_error is not None:
                raise self.rest_error
            return 2
        finally:
            self.ended.set()

    def work(self) -> Callable[[Handover[int]], Any]:
        return lambda handover: to_thread(self, handover)


def test_the_first_stage_is_handed_over_while_the_rest_runs_on() -> None:
    worker = Worker(after=0.3)

    async def scenario() -> None:
        first, later = await within_staged(1.0, worker.work(), what="first", rest="rest")
        assert first == 1
        assert not worker.ended.is_set()  # handed over before the call ended
        assert await later.result(2.0) == 2

    asyncio.run(scenario())
    assert worker.fence is not None and not worker.fence.abandoned


def test_a_rest_that_ends_soon_arrives_with_the_first_stage() -> None:
    """Usually both stages end before the first is returned: the caller is woken once."""
    worker = Worker()

    async def scenario() -> None:
        first, later = await within_staged(1.0, worker.work(), what="first", rest="rest")
        assert first == 1
        assert worker.ended.is_set()
        assert await later.result(0.0) == 2  # no wait left: it is there already

    asyncio.run(scenario())


def test_a_rest_that_fails_raises_from_its_result_only() -> None:
    worker = Worker(rest_error=ValueError("the rest fails"))

    async def scenario() -> None:
        first, later = await within_staged(1.0, worker.work(), what="first", rest="rest")
        assert first == 1
        with pytest.raises(ValueError, match="the rest fails"):
            await later.result(1.0)

    asyncio.run(scenario())


def test_a_rest_past_its_deadline_is_abandoned() -> None:
    worker = Worker(after=1.0)

    async def scenario() -> None:
        first, later = await within_staged(1.0, worker.work(), what="first", rest="the rest")
        assert first == 1
        with pytest.raises(DeadlineExceededError, match="the rest"):
            await later.result(0.05)
        assert worker.fence is not None and worker.fence.abandoned

    asyncio.run(scenario())


def test_a_first_stage_past_its_deadline_abandons_everything() -> None:
    worker = Worker(before=0.5)

    async def scenario() -> None:
        with pytest.raises(DeadlineExceededError, match="the first"):
            await within_staged(0.05, worker.work(), what="the first", rest="rest")
        assert worker.fence is not None and worker.fence.abandoned

    asyncio.run(scenario())


def test_what_the_first_stage_raises_is_the_callers() -> None:
    worker = Worker(first_error=KeyError("refused"))

    async def scenario() -> None:
        with pytest.raises(KeyError, match="refused"):
            await within_staged(1.0, worker.work(), what="first", rest="rest")

    asyncio.run(scenario())


def test_a_cancelled_caller_abandons_the_work() -> None:
    worker = Worker(before=0.5)

    async def scenario() -> None:
        waiting = asyncio.ensure_future(
            within_staged(5.0, worker.work(), what="first", rest="rest")
        )
        await asyncio.sleep(0.1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert worker.fence is not None and worker.fence.abandoned

    asyncio.run(scenario())


def test_abandoning_a_finished_rest_changes_nothing_and_a_running_one_is_broken_off() -> None:
    done, running = Worker(), Worker(after=1.0)

    async def scenario() -> None:
        _first, later = await within_staged(1.0, done.work(), what="first", rest="rest")
        assert await later.result(1.0) == 2
        later.abandon()
        assert done.fence is not None and not done.fence.abandoned
        _first, pending = await within_staged(1.0, running.work(), what="first", rest="rest")
        pending.abandon()
        assert running.fence is not None and running.fence.abandoned
        with pytest.raises(DeadlineExceededError):
            await pending.result(1.0)  # given up: never the caller's cancellation

    asyncio.run(scenario())


def test_the_worker_slot_is_held_until_the_rest_ends() -> None:
    worker = Worker(after=0.3)

    async def scenario() -> None:
        slots = Admission(1, queue_limit=4, wait_seconds=5.0)
        use_admission(slots)
        _first, later = await within_staged(1.0, worker.work(), what="first", rest="rest")
        assert slots.free == 0  # the rest still runs on its slot
        assert await later.result(1.0) == 2
        await asyncio.sleep(0)  # the task's exit runs its `admitted` block's release
        assert slots.free == 1

    asyncio.run(scenario())


def test_the_deadline_starts_once_the_work_holds_its_slot() -> None:
    """Waiting in line for a worker slot is a busy database, not a hung one."""
    first_worker, second_worker = Worker(after=0.3), Worker()

    async def scenario() -> None:
        slots = Admission(1, queue_limit=4, wait_seconds=5.0)
        use_admission(slots)
        _first, later = await within_staged(1.0, first_worker.work(), what="first", rest="rest")
        # Queued for 0.3 s behind the first one's rest, with a deadline of 0.2 s.
        handed, rest = await within_staged(0.2, second_worker.work(), what="first", rest="rest")
        assert handed == 1
        assert await rest.result(1.0) == 2
        assert await later.result(1.0) == 2

    asyncio.run(scenario())
