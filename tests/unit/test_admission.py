"""The queue in front of database work (app/db/admission.py): slots are granted first come,
first served; DB_QUEUE_LIMIT waiters wait and one more is refused at once; a wait past
DB_QUEUE_TIMEOUT_SECONDS is refused; a waiter that leaves (cancelled, or granted as it left)
never keeps slots; nested work of an admitted caller is not admitted again."""

from __future__ import annotations

import asyncio

import pytest

from app.db.admission import Admission, DatabaseBusyError, admitted, use_admission


async def settle() -> None:
    """Let every ready callback run (grants are handed over through futures)."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_grants_are_first_come_first_served_and_never_exceed_the_slots() -> None:
    async def run() -> list[int]:
        admission = Admission(2, queue_limit=10, wait_seconds=30)
        order: list[int] = []
        await admission.acquire(2)

        async def wait(n: int, units: int) -> None:
            await admission.acquire(units)
            order.append(n)

        waiters = [asyncio.ensure_future(wait(n, units)) for n, units in ((1, 2), (2, 1), (3, 1))]
        await settle()
        assert order == [] and admission.free == 0
        admission.release(2)
        await settle()
        assert order == [1] and admission.free == 0  # the larger first request is not passed
        admission.release(2)
        await settle()
        assert order == [1, 2, 3] and admission.free == 0
        await asyncio.gather(*waiters)
        return order

    assert asyncio.run(run()) == [1, 2, 3]


@pytest.mark.parametrize(("waiting", "refused"), [(3, False), (4, True)], ids=["bound", "bound+1"])
def test_the_queue_holds_its_limit_and_refuses_one_more(waiting: int, refused: bool) -> None:
    """With DB_QUEUE_LIMIT 3, three callers wait; a fourth is refused at once."""

    async def run() -> bool:
        admission = Admission(1, queue_limit=3, wait_seconds=30)
        await admission.acquire(1)
        tasks = [asyncio.ensure_future(admission.acquire(1)) for _ in range(waiting)]
        await settle()
        failed = [t for t in tasks if t.done() and isinstance(t.exception(), DatabaseBusyError)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert admission.waiters == type(admission.waiters)()
        return bool(failed)

    assert asyncio.run(run()) is refused


def test_a_wait_past_its_bound_is_refused_and_leaves_the_line() -> None:
    async def run() -> None:
        admission = Admission(1, queue_limit=10, wait_seconds=0.01)
        await admission.acquire(1)
        with pytest.raises(DatabaseBusyError):
            await admission.acquire(1)
        assert not admission.waiters
        admission.release(1)
        assert admission.free == 1

    asyncio.run(run())


def test_a_caller_that_leaves_never_keeps_slots() -> None:
    """Cancelled while waiting, or granted just as it was cancelled: the slots go on."""

    async def run() -> None:
        admission = Admission(1, queue_limit=10, wait_seconds=30)
        await admission.acquire(1)
        leaving = asyncio.ensure_future(admission.acquire(1))
        await settle()
        admission.release(1)  # granted...
        leaving.cancel()  # ...and cancelled before it ran
        await asyncio.gather(leaving, return_exceptions=True)
        assert admission.free == 1 and not admission.waiters

    asyncio.run(run())


def test_nested_work_of_an_admitted_caller_is_not_admitted_again() -> None:
    """Work inside `admitted()` (and the tasks it starts) holds its caller's slots: with one
    slot, nested calls would otherwise wait for themselves."""

    async def run() -> int:
        admission = Admission(1, queue_limit=10, wait_seconds=0.5)
        use_admission(admission)
        async with admitted():
            inner = asyncio.ensure_future(_nested())
            return await inner

    async def _nested() -> int:
        async with admitted():
            return 7

    assert asyncio.run(run()) == 7
