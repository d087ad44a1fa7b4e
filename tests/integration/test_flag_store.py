"""The flag store's rule on PostgreSQL and MariaDB: a value read from the database is kept for
FLAG_CACHE_SECONDS and no longer; a read that fails or runs out of its deadline makes memory
off (`unavailable`) for the same window, never the MEMORY_ENABLED default.

The flags table is made unreadable by another session's exclusive lock, the way an operator's
long migration or a stuck transaction would; the cache window runs on an injected clock, so the
test steps across it instead of sleeping through it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text

from app.db.engine import DatabaseLimits, build_engine
from app.db.schema import feature_flags
from app.memory.flags import MEMORY_FLAG, FlagStore, write_flag
from tests.support.databases import migrated_engine, wipe

TTL = 10.0
READ_TIMEOUT = 0.5
# The server would end the blocked read only after this: the deadline must end it first.
SLOW = DatabaseLimits(
    statement_timeout_seconds=60, lock_timeout_seconds=60, operation_timeout_seconds=90
)


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def server_url(request: pytest.FixtureRequest) -> Iterator[str]:
    url = str(request.getfixturevalue(f"{request.param}_url"))
    engine = migrated_engine(url)
    wipe(engine)
    engine.dispose()
    yield url


@contextmanager
def flags_locked(url: str) -> Iterator[None]:
    """Another session holds an exclusive lock on the flags table until the block ends."""
    engine = build_engine(url)
    connection = engine.connect()
    try:
        if engine.dialect.name == "postgresql":
            transaction = connection.begin()
            connection.execute(text(f"LOCK TABLE {feature_flags.name} IN ACCESS EXCLUSIVE MODE"))
            yield
            transaction.rollback()
        else:
            connection.exec_driver_sql(f"LOCK TABLES {feature_flags.name} WRITE")
            yield
            connection.exec_driver_sql("UNLOCK TABLES")
    finally:
        connection.close()
        engine.dispose()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_read_value_is_kept_for_its_window_then_memory_is_off_never_the_default(
    server_url: str,
) -> None:
    """Stored off, default on. Within the window the stored "off" is served without a read;
    past it, with the table locked, the read runs out of its deadline and memory is
    `unavailable` (not the default "on"), and that answer is kept for a window too, without a
    read per request. Unlocked and past that window, the stored "off" is read again."""
    engine = build_engine(server_url, SLOW)
    reads: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _flag_reads(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        # The switch's own locking read (for its audit row) is a write, not a flag read.
        if f"FROM {feature_flags.name}" in statement and "FOR UPDATE" not in statement:
            reads.append(statement)

    clock = Clock()
    store = FlagStore(
        engine,
        default_memory=True,
        ttl_seconds=TTL,
        read_timeout_seconds=READ_TIMEOUT,
        clock=clock,
    )
    try:
        write_flag(engine, MEMORY_FLAG, False, updated_by="operator")
        assert await store.memory_status() == "disabled"
        assert len(reads) == 1
        with flags_locked(server_url):
            clock.now += TTL / 2
            assert await store.memory_status() == "disabled"  # within the window: no read
            assert len(reads) == 1
            clock.now += TTL
            began = time.monotonic()
            assert await store.memory_status() == "unavailable"
            assert time.monotonic() - began < 20 * READ_TIMEOUT  # the lock would hold 60 s
            assert len(reads) == 2
            assert await store.memory_status() == "unavailable"  # remembered for its window
            assert not await store.memory_enabled()
            assert len(reads) == 2
        clock.now += TTL
        assert await store.memory_status() == "disabled"
        assert len(reads) == 3
    finally:
        engine.dispose()


async def test_an_operators_change_is_served_at_once_by_the_process_that_made_it(
    server_url: str,
) -> None:
    """`set` stores the flag and replaces this process's cached value immediately."""
    engine = build_engine(server_url)
    store = FlagStore(engine, default_memory=False, ttl_seconds=TTL, clock=Clock())
    try:
        assert await store.memory_status() == "disabled"
        await store.set(MEMORY_FLAG, True, updated_by="operator")
        assert await store.memory_status() == "enabled"
    finally:
        engine.dispose()


async def test_read_since_ignores_a_cached_value_read_before_it(server_url: str) -> None:
    """The commit point asks for a value read no earlier than its turn began: a value cached
    before that is not used even inside its window, and one read after it is reused."""
    engine = build_engine(server_url)
    reads: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _flag_reads(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        # The switch's own locking read (for its audit row) is a write, not a flag read.
        if f"FROM {feature_flags.name}" in statement and "FOR UPDATE" not in statement:
            reads.append(statement)

    clock = Clock()
    store = FlagStore(engine, default_memory=False, ttl_seconds=TTL, clock=clock)
    try:
        write_flag(engine, MEMORY_FLAG, True, updated_by="operator")
        assert await store.memory_status() == "enabled"
        clock.now += 1
        turn_began = store.now()
        write_flag(engine, MEMORY_FLAG, False, updated_by="another replica")
        assert await store.memory_status() == "enabled"  # the cache, within its window
        assert await store.memory_status(read_since=turn_began) == "disabled"
        assert len(reads) == 2
        assert await store.memory_status(read_since=turn_began) == "disabled"  # reused
        assert await store.memory_status() == "disabled"
        assert len(reads) == 2
    finally:
        engine.dispose()
