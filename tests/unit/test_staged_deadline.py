"""`within_staged`: work in two stages on one worker thread, each awaited by its own deadline.
Usually both arrive together; what the first stage hands over is the caller's once handed; the
rest can fail or run late (it is then left running) without touching it; a deadline on either
stage abandons the work's fence (its connections broken, nothing more committed); the worker
slot is held until the rest ends."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.concurrency import to_thread
from app.db.admission import Admission, use_admission
from app.db.deadline import DeadlineExceededError, Handover, within_staged
from app.db.guard import Fence, current_fence

Gates = Callable[[], threading.Event]
# A gate the test never opens lets its stage go on after this long, so that a failing test
# does not leave a thread behind; no test waits for it.
GATE_SECONDS = 30.0


class Worker:
    """A two-stage job for a worker thread: its first stage waits for `first_gate` (when given),
    hands over 1, its rest waits for `rest_gate`, then returns 2 (or raises `first_error` /
    `rest_error` at its stage). The tests open the gates where the order matters, so that no
    outcome depends on how fast the machine runs."""

    def __init__(
        self,
        first_error: BaseException | None = None,
        rest_error: BaseException | None = None,
        *,
        first_gate: threading.Event | None = None,
        rest_gate: threading.Event | None = None,
    ) -> None:
        self.first_error, self.rest_error = first_error, rest_error
        self.first_gate, self.rest_gate = first_gate, rest_gate
        self.fence: Fence | None = None
        self.started = threading.Event()
        self.ended = threading.Event()

    def __call__(self, handover: Handover[int]) -> int:
        try:
            self.fence = current_fence.get()
            self.started.set()
            if self.first_gate is not None:
                self.first_gate.wait(GATE_SECONDS)
            if self.first_error is not None:
                raise self.first_error
            handover(1)
            if self.rest_gate is not None:
                self.rest_gate.wait(GATE_SECONDS)
            if self.rest_error is not None:
                raise self.rest_error
            return 2
        finally:
            self.ended.set()

    def work(self) -> Callable[[Handover[int]], Any]:
        return lambda handover: to_thread(self, handover)


@pytest.fixture
def gates() -> Iterator[Gates]:
    """New gates for a test's workers. A test opens its gates before its event loop closes
    (which waits for the loop's worker threads); the rest are opened when it ends, so that a
    failed test does not leave a thread waiting."""
    made: list[threading.Event] = []

    def gate() -> threading.Event:
        made.append(threading.Event())
        return made[-1]

    yield gate
    for event in made:
        event.set()


def test_the_first_stage_is_handed_over_while_the_rest_runs_on(gates: Gates) -> None:
    rest = gates()
    worker = Worker(rest_gate=rest)

    async def scenario() -> None:
        # The rest is held until the first stage is back: it must come back without it, long
        # before the stage's deadline would give it up.
        async with asyncio.timeout(GATE_SECONDS / 3):
            first, later = await within_staged(
                GATE_SECONDS, worker.work(), what="first", rest="rest"
            )
        assert first == 1
        assert not worker.ended.is_set()  # handed over before the call ended
        rest.set()
        assert await later.result(5.0) == 2

    asyncio.run(scenario())
    assert worker.fence is not None and not worker.fence.abandoned


def test_a_rest_that_ends_within_the_check_arrives_with_the_first_stage() -> None:
    """Usually both stages end before the first is returned: the caller is woken once. (How
    soon is `check_every`; a generous one here, so that a slow machine changes nothing.)"""
    worker = Worker()

    async def scenario() -> None:
        first, later = await within_staged(
            30.0, worker.work(), what="first", rest="rest", check_every=30.0
        )
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


def test_a_rest_past_its_deadline_is_abandoned(gates: Gates) -> None:
    rest = gates()
    worker = Worker(rest_gate=rest)

    async def scenario() -> None:
        first, later = await within_staged(5.0, worker.work(), what="first", rest="the rest")
        assert first == 1
        with pytest.raises(DeadlineExceededError, match="the rest"):
            await later.result(0.05)
        assert worker.fence is not None and worker.fence.abandoned
        rest.set()  # the abandoned thread ends before the loop's executor shuts down

    asyncio.run(scenario())


def test_a_first_stage_past_its_deadline_abandons_everything(gates: Gates) -> None:
    first = gates()
    worker = Worker(first_gate=first)

    async def scenario() -> None:
        with pytest.raises(DeadlineExceededError, match="the first"):
            await within_staged(0.05, worker.work(), what="the first", rest="rest")
        assert worker.fence is not None and worker.fence.abandoned
        first.set()

    asyncio.run(scenario())


def test_what_the_first_stage_raises_is_the_callers() -> None:
    worker = Worker(first_error=KeyError("refused"))

    async def scenario() -> None:
        with pytest.raises(KeyError, match="refused"):
            await within_staged(1.0, worker.work(), what="first", rest="rest")

    asyncio.run(scenario())


def test_a_cancelled_caller_abandons_the_work(gates: Gates) -> None:
    first = gates()
    worker = Worker(first_gate=first)

    async def scenario() -> None:
        waiting = asyncio.ensure_future(
            within_staged(5.0, worker.work(), what="first", rest="rest")
        )
        # Cancelled while its first stage runs.
        assert await asyncio.to_thread(worker.started.wait, GATE_SECONDS)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert worker.fence is not None and worker.fence.abandoned
        first.set()

    asyncio.run(scenario())


def test_abandoning_a_finished_rest_changes_nothing_and_a_running_one_is_broken_off(
    gates: Gates,
) -> None:
    rest = gates()
    done, running = Worker(), Worker(rest_gate=rest)

    async def scenario() -> None:
        _first, later = await within_staged(5.0, done.work(), what="first", rest="rest")
        assert await later.result(5.0) == 2
        later.abandon()
        assert done.fence is not None and not done.fence.abandoned
        _first, pending = await within_staged(5.0, running.work(), what="first", rest="rest")
        pending.abandon()
        assert running.fence is not None and running.fence.abandoned
        with pytest.raises(DeadlineExceededError):
            await pending.result(1.0)  # given up: never the caller's cancellation
        rest.set()

    asyncio.run(scenario())


def test_the_worker_slot_is_held_until_the_rest_ends(gates: Gates) -> None:
    rest = gates()
    worker = Worker(rest_gate=rest)

    async def scenario() -> None:
        slots = Admission(1, queue_limit=4, wait_seconds=5.0)
        use_admission(slots)
        _first, later = await within_staged(5.0, worker.work(), what="first", rest="rest")
        assert slots.free == 0  # the rest still runs on its slot
        rest.set()
        assert await later.result(5.0) == 2
        await asyncio.sleep(0)  # the task's exit runs its `admitted` block's release
        assert slots.free == 1

    asyncio.run(scenario())


def test_the_deadline_starts_once_the_work_holds_its_slot(gates: Gates) -> None:
    """Waiting in line for a worker slot is a busy database, not a hung one."""
    held = gates()
    first_worker, second_worker = Worker(rest_gate=held), Worker()

    async def scenario() -> None:
        slots = Admission(1, queue_limit=4, wait_seconds=5.0)
        use_admission(slots)
        _first, later = await within_staged(5.0, first_worker.work(), what="first", rest="rest")
        # Queued behind the first one's rest for longer than its own deadline of 0.2 s.
        second = asyncio.ensure_future(
            within_staged(0.2, second_worker.work(), what="first", rest="rest")
        )
        await asyncio.sleep(0.3)
        assert not second.done() and not second_worker.ended.is_set()  # still in line
        held.set()
        handed, rest = await second
        assert handed == 1
        assert await rest.result(5.0) == 2
        assert await later.result(5.0) == 2

    asyncio.run(scenario())
