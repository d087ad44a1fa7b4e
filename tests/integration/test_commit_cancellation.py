"""Cancellation reaches the database worker: a cancelled commit rolls back at whichever of the
three checkpoints it reaches, on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from sqlalchemy import Engine, text

from app.db.engine import SQLITE_IMMEDIATE
from app.memory.repository import CommitCancelledError
from app.memory.rules import MemoryValidationError, Operation
from app.memory.service import MemoryService
from tests.support.databases import lock_waiters
from tests.support.memory_db import (
    add,
    cancel_on_call,
    deadlock_error,
    fail_loads,
    is_memory_load,
    rows,
    watch,
)
from tests.support.sqlite_writers import record_writer_lock

WAIT_SECONDS = 30
BATCHES = [
    [
        Operation("user", "remove", match="Original user"),
        Operation("memory", "replace", match="Original memory", content="Changed memory fact."),
        Operation("memory", "add", content="Added memory fact."),
    ]
]


def seed(engine: Engine) -> dict[str, tuple[str, int]]:
    MemoryService(engine).commit_operations(
        "alice",
        [
            [
                Operation("user", "add", content="Original user fact."),
                Operation("memory", "add", content="Original memory fact."),
            ]
        ],
    )
    return rows(engine, "alice")


CHECKPOINTS = [
    pytest.param(1, "before the query", 0, False, id="before-query"),
    pytest.param(2, "before persistence", 1, False, id="before-persistence"),
    pytest.param(3, "before the transaction ended", 1, True, id="before-transaction-end"),
]


@pytest.mark.parametrize(("call", "stage", "loads", "wrote"), CHECKPOINTS)
def test_cancellation_at_each_checkpoint_commits_nothing(
    engine: Engine, call: int, stage: str, loads: int, wrote: bool
) -> None:
    """should_cancel is read before the query, before persistence and before the transaction
    ends; turning true at any of them raises inside the transaction, which rolls back, even
    after the rows were already written (checkpoint three)."""
    before = seed(engine)
    should_cancel, calls = cancel_on_call(call)
    with watch(engine) as log, pytest.raises(CommitCancelledError, match=stage):
        MemoryService(engine).commit_operations("alice", BATCHES, should_cancel)
    assert calls[0] == call
    assert log.loads == loads
    assert bool(log.writes) is wrote
    assert rows(engine, "alice") == before


def test_uncancelled_commit_reads_all_three_checkpoints(engine: Engine) -> None:
    """A commit that is never cancelled consults should_cancel exactly three times and commits."""
    seed(engine)
    should_cancel, calls = cancel_on_call(99)
    MemoryService(engine).commit_operations("alice", BATCHES, should_cancel)
    assert calls[0] == 3
    assert set(rows(engine, "alice")) == {"memory"}


def test_cancellation_is_not_retried_and_stops_retries(engine: Engine) -> None:
    """A cancelled commit is never retried, and a deadlock that arrives after the request was
    cancelled is not retried either."""
    before = seed(engine)
    dialect = engine.dialect.name
    calls = [0]

    def cancelled_after_first_check() -> bool:
        calls[0] += 1
        return calls[0] > 1

    failing = fail_loads(lambda: deadlock_error(dialect), times=1)
    with watch(engine, before=failing) as log, pytest.raises(Exception) as caught:
        MemoryService(engine, sleep=lambda _s: None).commit_operations(
            "alice", BATCHES, cancelled_after_first_check
        )
    assert not isinstance(caught.value, CommitCancelledError)  # the deadlock, not retried
    assert log.loads == 1
    assert rows(engine, "alice") == before


async def test_commit_in_worker_returns_the_result(engine: Engine) -> None:
    """Without cancellation, the worker commits and the event stays clear."""
    seed(engine)
    cancel_event = threading.Event()
    result = await MemoryService(engine).commit_in_worker("alice", BATCHES, cancel_event)
    assert result.snapshot.memory == ("Changed memory fact.", "Added memory fact.")
    assert not cancel_event.is_set()
    assert set(rows(engine, "alice")) == {"memory"}


async def test_failed_batch_in_worker_commits_nothing(engine: Engine) -> None:
    """A batch the rules reject on the latest snapshot fails the worker and commits nothing."""
    before = seed(engine)
    with pytest.raises(MemoryValidationError):
        await MemoryService(engine).commit_in_worker(
            "alice",
            [add("memory", "Fine.")[0], [Operation("user", "remove", match="absent")]],
            threading.Event(),
        )
    assert rows(engine, "alice") == before


async def test_cancelling_the_task_while_the_worker_is_blocked_commits_nothing(
    engine: Engine,
) -> None:
    """The request task is cancelled while its worker thread waits for a lock held by another
    connection: the cancel event is set, the worker rolls back once it gets the lock, the task
    ends cancelled, and nothing is committed."""
    before = seed(engine)
    dialect = engine.dialect.name
    # SQLite: the worker waits for the process's writer lock, which the holder's BEGIN IMMEDIATE
    # took (app/db/sqlite_writers.py); elsewhere for the row lock, at the memory's load.
    writer_lock = record_writer_lock(engine) if dialect == "sqlite" else None
    holder = engine.connect()
    if dialect == "sqlite":
        holder = holder.execution_options(**{SQLITE_IMMEDIATE: True})
    transaction = holder.begin()  # SQLite: BEGIN IMMEDIATE takes the write lock
    if dialect != "sqlite":
        holder.execute(
            text(
                "SELECT content FROM agent_memory "
                "WHERE user_id = 'alice' AND memory_type = 'user' FOR UPDATE"
            )
        )
    reached = writer_lock.waiting if writer_lock is not None else threading.Event()
    worker_thread: list[int] = []

    def before_statement(statement: str) -> None:
        if is_memory_load(statement) and threading.get_ident() in worker_thread:
            reached.set()

    service = MemoryService(engine)
    original = service.commit_operations

    def tracked(*args: object, **kwargs: object) -> object:
        worker_thread.append(threading.get_ident())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    service.commit_operations = tracked  # type: ignore[method-assign]
    cancel_event = threading.Event()
    try:
        with watch(engine, before=before_statement):
            task = asyncio.create_task(service.commit_in_worker("alice", BATCHES, cancel_event))
            assert await asyncio.to_thread(reached.wait, WAIT_SECONDS), (
                "worker never reached the lock"
            )
            if dialect != "sqlite":
                await wait_for_lock_waiter(engine)
            task.cancel()
            assert await asyncio.to_thread(cancel_event.wait, WAIT_SECONDS)
            assert not task.done()  # the shield keeps the task waiting for its worker
            transaction.rollback()
            with pytest.raises(asyncio.CancelledError):
                await task
    finally:
        if transaction.is_active:
            transaction.rollback()
        holder.close()
    assert task.cancelled()
    assert rows(engine, "alice") == before


async def wait_for_lock_waiter(engine: Engine) -> None:
    """Poll (with a deadline) until a session of this database waits for the row lock."""

    def waiting() -> bool:
        return lock_waiters(engine, "%agent_memory%FOR UPDATE%") >= 1

    deadline = time.monotonic() + WAIT_SECONDS
    while not await asyncio.to_thread(waiting):
        assert time.monotonic() < deadline, "the worker never waited for the row lock"
        await asyncio.sleep(0.02)
