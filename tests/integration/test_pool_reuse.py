"""The connection pool under load and at rest (`app/db/engine.py`, the `DB_POOL_*` defaults), on
each database.

- The service runs one worker thread per connection the pool may open. With the defaults the
  pool keeps every connection it opens, so a load that comes and goes opens each connection
  once: a connection opened past the pool size (overflow) is closed when it is returned, and
  the next wave of calls opened it again (55 connections for these 5 waves with the former
  5 + 10).
- A quiet process reuses the connection it returned last (LIFO), so a few warm connections
  serve it and the rest sit idle, instead of every checkout taking the one idle longest.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import pytest
from sqlalchemy import Connection, Engine, event, text

from app.db.engine import build_engine, default_limits

WAVES = 5


@pytest.fixture
def pooled(db_url: str) -> Iterator[Engine]:
    """An engine with the service's default limits for its database (4 connections on SQLite,
    15 on a server)."""
    engine = build_engine(db_url, default_limits(db_url))
    try:
        yield engine
    finally:
        engine.dispose()


def opened_connections(engine: Engine) -> list[int]:
    """One entry per connection the engine opens."""
    opened: list[int] = []
    lock = threading.Lock()

    @event.listens_for(engine, "connect")
    def _connected(dbapi_connection: object, _record: object) -> None:
        with lock:
            opened.append(id(dbapi_connection))

    return opened


def one_call(engine: Engine, together: threading.Barrier) -> None:
    """A call that holds its connection until the wave's other calls hold theirs."""
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
        together.wait(timeout=30)


def dbapi_connection(connection: Connection) -> object:
    return connection.connection.dbapi_connection


def test_a_load_in_waves_opens_each_connection_once(pooled: Engine) -> None:
    """Every thread busy, then every connection returned, again and again: what a busy service's
    turns do as they start and end together."""
    threads = pooled.pool.size()  # no overflow: as `app.runtime.size_worker_threads` sizes them
    opened = opened_connections(pooled)
    with ThreadPoolExecutor(threads) as workers:
        for _ in range(WAVES):
            together = threading.Barrier(threads)
            for call in [workers.submit(one_call, pooled, together) for _ in range(threads)]:
                call.result()

    assert len(opened) == threads  # each wave held them all at once; the first opened them


def test_a_quiet_process_reuses_the_connection_it_returned_last(pooled: Engine) -> None:
    size = pooled.pool.size()
    with ExitStack() as held:  # a burst: every connection out at once, then all returned
        burst = [dbapi_connection(held.enter_context(pooled.connect())) for _ in range(size)]
    assert size >= 2 and len({id(connection) for connection in burst}) == size

    used: set[int] = set()
    for _ in range(8):  # then one call at a time
        with pooled.connect() as connection:
            connection.execute(text("SELECT 1"))
            used.add(id(dbapi_connection(connection)))

    assert len(used) == 1
    assert used <= {id(connection) for connection in burst}
