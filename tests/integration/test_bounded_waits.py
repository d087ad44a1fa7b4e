"""Every database wait is bounded, on SQLite, PostgreSQL (directly and through PgBouncer in
transaction mode, where the bounds are set per transaction) and MariaDB: sessions carry the
configured statement and lock timeouts, a pool checkout waits at most its timeout, a connection
held past its lease is broken, a lock held
by another session fails a commit clearly, and work abandoned at a deadline never commits.

Bounds are asserted as "answered well before the wait it replaces would have ended" (a sleep of
a minute, a lock held until released), with margins several times the configured bound, so a
loaded machine cannot make them flaky and an unbounded wait cannot pass.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest
from sqlalchemy import Engine, insert, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from app.db.deadline import DeadlineExceededError, within
from app.db.engine import SQLITE_IMMEDIATE, DatabaseLimits, build_engine, one_statement_read
from app.db.guard import Fence, WorkAbandonedError, current_fence
from app.db.schema import agent_memory
from app.db.writers import maintenance
from app.memory.rules import Snapshot
from app.memory.service import MemoryBusyError, MemoryService
from tests.support.apps import memory_rows
from tests.support.memory_db import add
from tests.support.postgres_servers import pooler_for
from tests.support.waiting import await_for

# A wait that these tests cut short; anything near it means the bound did not hold.
UNBOUNDED_SECONDS = 60
BOUND_SECONDS = 20  # well above every configured bound below, well below UNBOUNDED_SECONDS


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("pgbouncer", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def db_url(request: pytest.FixtureRequest) -> str:
    """The suite's databases, and PostgreSQL through PgBouncer in transaction mode."""
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture(
    params=["postgres", pytest.param("pgbouncer", marks=pytest.mark.postgres)],
)
def pg_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


@contextmanager
def bounded_engine(db_url: str, limits: DatabaseLimits) -> Iterator[Engine]:
    engine = build_engine(db_url, replace(limits, pooler=pooler_for(db_url)))
    try:
        yield engine
    finally:
        engine.dispose()


def backend(engine: Engine) -> str:
    return engine.dialect.name


def test_every_session_carries_the_configured_bounds(engine: Engine, db_url: str) -> None:
    """A new connection already runs under DB_STATEMENT_TIMEOUT_SECONDS and
    DB_LOCK_TIMEOUT_SECONDS, as the server reports them."""
    limits = DatabaseLimits(
        statement_timeout_seconds=7, lock_timeout_seconds=3, operation_timeout_seconds=40
    )
    with bounded_engine(db_url, limits) as bounded, bounded.connect() as connection:
        if backend(bounded) == "postgresql":
            row = connection.execute(
                text(
                    "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'), "
                    "current_setting('idle_in_transaction_session_timeout')"
                )
            ).one()
            assert tuple(row) == ("7s", "3s", "40s")
        elif backend(bounded) in ("mysql", "mariadb"):
            row = connection.execute(
                text("SELECT @@max_statement_time, @@innodb_lock_wait_timeout, @@lock_wait_timeout")
            ).one()
            assert (float(row[0]), int(row[1]), int(row[2])) == (7.0, 3, 3)
        else:
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 3000


def _endless_statement(engine: Engine) -> str:
    if backend(engine) == "postgresql":
        return f"SELECT pg_sleep({UNBOUNDED_SECONDS})"
    if backend(engine) in ("mysql", "mariadb"):
        return f"SELECT SLEEP({UNBOUNDED_SECONDS})"
    return "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"


def test_a_connection_held_past_its_lease_is_broken_and_the_pool_heals(
    engine: Engine, db_url: str
) -> None:
    """With no server-side statement bound, a statement that would run for a minute is cut off
    by the client-side lease (DB_OPERATION_TIMEOUT_SECONDS): its socket is shut down (SQLite:
    the statement interrupted). The next checkout works on a healthy connection."""
    limits = DatabaseLimits(statement_timeout_seconds=None, operation_timeout_seconds=1)
    with bounded_engine(db_url, limits) as bounded:
        started = time.monotonic()
        with pytest.raises(DBAPIError), bounded.connect() as connection:
            connection.execute(text(_endless_statement(bounded))).all()
        assert time.monotonic() - started < BOUND_SECONDS
        with bounded.connect() as connection:
            assert connection.execute(text("SELECT 1")).scalar() == 1


def test_a_checkout_from_an_exhausted_pool_fails_within_the_pool_timeout(db_url: str) -> None:
    """Every pooled connection is held: the next checkout waits DB_POOL_TIMEOUT_SECONDS, not
    SQLAlchemy's 30 s default, then fails clearly; once one is returned the pool serves again."""
    limits = DatabaseLimits(pool_size=1, pool_max_overflow=0, pool_timeout_seconds=1)
    with bounded_engine(db_url, limits) as bounded:
        with bounded.connect() as held:
            held.execute(text("SELECT 1"))
            started = time.monotonic()
            with pytest.raises(PoolTimeoutError), bounded.connect():
                pass
            assert time.monotonic() - started < BOUND_SECONDS
        with bounded.connect() as connection:
            assert connection.execute(text("SELECT 1")).scalar() == 1


@contextmanager
def rows_locked_elsewhere(engine: Engine, user_id: str) -> Iterator[None]:
    """Another session holds the write lock on the user's memory until the block ends."""
    holder = engine.connect().execution_options(**{SQLITE_IMMEDIATE: True})
    transaction = holder.begin()  # SQLite: BEGIN IMMEDIATE, which locks the whole database
    if backend(engine) != "sqlite":
        holder.execute(
            select(agent_memory).where(agent_memory.c.user_id == user_id).with_for_update()
        ).all()
    try:
        yield
    finally:
        transaction.rollback()
        holder.close()


def test_a_commit_behind_a_held_lock_fails_clearly_and_writes_nothing(
    engine: Engine, db_url: str
) -> None:
    """Another session holds the user's rows (SQLite: the database) for longer than
    DB_LOCK_TIMEOUT_SECONDS: the commit fails with MemoryBusyError instead of waiting, nothing
    is written, and once the lock is gone the same commit succeeds."""
    service = MemoryService(engine)
    service.commit_operations("dora", add("user", "Dora likes maps."))
    limits = DatabaseLimits(lock_timeout_seconds=1)
    with bounded_engine(db_url, limits) as bounded:
        bounded_service = MemoryService(bounded, backoff_seconds=0.0)
        with rows_locked_elsewhere(engine, "dora"):
            started = time.monotonic()
            with pytest.raises(MemoryBusyError):
                bounded_service.commit_operations("dora", add("memory", "Dora deploys."))
            assert time.monotonic() - started < BOUND_SECONDS
        assert service.read("dora") == Snapshot(user=("Dora likes maps.",))
        bounded_service.commit_operations("dora", add("memory", "Dora deploys."))
    assert service.read("dora").memory == ("Dora deploys.",)


@pytest.mark.postgres
def test_the_writer_queue_is_bounded_by_the_lock_timeout(pg: Engine, pg_url: str) -> None:
    """PostgreSQL queues one user's writers on an advisory lock before their transaction: a
    writer queued behind a session that keeps that lock fails with MemoryBusyError after
    DB_LOCK_TIMEOUT_SECONDS (lock_timeout applies to advisory locks) and writes nothing."""
    with bounded_engine(pg_url, DatabaseLimits(lock_timeout_seconds=1)) as bounded:
        holder = pg.connect()
        try:
            holder.execute(text("SELECT pg_advisory_lock(hashtextextended('erin', 0))"))
            holder.commit()
            started = time.monotonic()
            with pytest.raises(MemoryBusyError):
                MemoryService(bounded).commit_operations("erin", add("user", "Erin."))
            assert time.monotonic() - started < BOUND_SECONDS
        finally:
            holder.execute(text("SELECT pg_advisory_unlock(hashtextextended('erin', 0))"))
            holder.close()
        assert memory_rows(pg, "erin") == 0
        MemoryService(bounded).commit_operations("erin", add("user", "Erin."))
    assert memory_rows(pg, "erin") == 1


class HeldWrite:
    """A write in a worker thread that stops inside its transaction, after its INSERT and before
    its COMMIT, until the test lets it go on; it records how it ended."""

    def __init__(self, engine: Engine, user_id: str) -> None:
        self.engine = engine
        self.user_id = user_id
        self.inserted = threading.Event()
        self.go_on = threading.Event()
        self.finished = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.engine.begin() as connection, maintenance(connection):
                connection.execute(
                    insert(agent_memory).values(
                        user_id=self.user_id, memory_type="user", content="written"
                    )
                )
                self.inserted.set()
                self.go_on.wait(UNBOUNDED_SECONDS)
        except BaseException as error:
            self.error = error
            raise
        finally:
            self.finished.set()


async def test_work_abandoned_at_its_deadline_never_commits(engine: Engine) -> None:
    """The fence: a worker left behind by a deadline, that goes on to COMMIT after its caller
    gave up, is refused (on PostgreSQL and MariaDB its connection is also broken at once); its
    row never appears. The same write, let go before the deadline, commits: the test would see
    a late commit."""
    kept = HeldWrite(engine, "kept")
    kept.go_on.set()
    await within(BOUND_SECONDS, lambda: asyncio.to_thread(kept.run))
    assert kept.error is None and memory_rows(engine, "kept") == 1

    late = HeldWrite(engine, "late")
    with pytest.raises(DeadlineExceededError):
        # Long enough for the INSERT to happen on a loaded machine: the fence, not a failed
        # INSERT, is what stops this write.
        await within(3.0, lambda: asyncio.to_thread(late.run))
    assert late.inserted.is_set()
    late.go_on.set()  # the abandoned worker now reaches its COMMIT
    await await_for(late.finished.is_set, "the abandoned worker to end")
    assert late.error is not None
    assert memory_rows(engine, "late") == 0


def test_work_that_starts_after_its_deadline_never_reaches_the_database(engine: Engine) -> None:
    """A worker that only starts after its caller gave up (it was queued for a thread, or its
    connect completed late) runs no statement; the connection it got goes back to the pool
    unharmed instead of being thrown away."""
    with engine.connect() as connection:  # one pooled connection, known to the test
        connection.execute(text("SELECT 1"))
    pooled = engine.pool.checkedin()
    fence = Fence()
    fence.abandon()
    token = current_fence.set(fence)
    try:
        with pytest.raises(WorkAbandonedError), engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    finally:
        current_fence.reset(token)
    assert engine.pool.checkedin() == pooled
    with engine.connect() as connection:
        assert connection.execute(text("SELECT 1")).scalar() == 1


def test_a_connection_broken_between_two_statements_never_goes_back_to_the_pool(
    engine: Engine,
) -> None:
    """A caller that gives up while its worker runs Python between two statements (no
    transaction open, as a read in autocommit) breaks the connection with nothing failing on
    it: its next statement is refused (MariaDB, whose read runs in a transaction: the rollback
    then fails on the broken socket), and the connection is closed instead of going back to the
    pool with its socket shut down. The next checkout, within the second in which no liveness
    ping runs, gets a working connection."""
    fence = Fence()
    token = current_fence.set(fence)
    try:
        with pytest.raises((WorkAbandonedError, DBAPIError)), engine.connect() as connection:
            one_statement_read(connection)
            assert connection.execute(text("SELECT 1")).scalar() == 1
            connection.rollback()
            fence.abandon()  # the caller's deadline, between two statements
            connection.execute(text("SELECT 2"))
    finally:
        current_fence.reset(token)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT 3")).scalar() == 3
