"""SQLite's writers of one process wait in line on the process's lock for their database file
(`app/db/sqlite_writers.py`), not in SQLite's busy handler: a second writer sends nothing to
SQLite until the first has ended; the wait is bounded and fails as SQLite's own would; a caller
that gives up stops waiting; and the lock is let go however the transaction ends."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, event, text
from sqlalchemy.exc import OperationalError

from app.db import sqlite_writers
from app.db.engine import SQLITE_IMMEDIATE, DatabaseLimits, build_engine
from app.db.guard import Fence, WorkAbandonedError, current_fence
from app.db.locking import is_retryable, is_timeout
from tests.support.sqlite_writers import record_writer_lock

INSERT = text("INSERT INTO t (x) VALUES (:x)")


def build(path: Path, lock_timeout: float = 5.0) -> Engine:
    engine = build_engine(f"sqlite:///{path}", DatabaseLimits(lock_timeout_seconds=lock_timeout))
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE IF NOT EXISTS t (x INTEGER)"))
    return engine


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = build(tmp_path / "writers.db", lock_timeout=5.0)
    try:
        yield engine
    finally:
        engine.dispose()


def writer(engine: Engine) -> Connection:
    return engine.connect().execution_options(**{SQLITE_IMMEDIATE: True})


def sent_by_thread(engine: Engine) -> list[tuple[str, str]]:
    sent: list[tuple[str, str]] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _sent(_connection: Connection, _cursor: object, statement: str, *_args: object) -> None:
        sent.append((threading.current_thread().name, statement))

    return sent


def in_thread(name: str, work: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:  # handed to the test
            errors.append(error)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread, errors


def test_a_second_writer_sends_nothing_until_the_first_has_committed(engine: Engine) -> None:
    lock = record_writer_lock(engine)
    sent = sent_by_thread(engine)
    order: list[str] = []

    def second() -> None:
        with writer(engine) as connection, connection.begin():
            connection.execute(INSERT, {"x": 2})

    with writer(engine) as first:
        transaction = first.begin()
        first.execute(INSERT, {"x": 1})
        thread, errors = in_thread("second", second)
        assert lock.waiting.wait(10)
        assert not [statement for name, statement in sent if name == "second"]
        transaction.commit()
        order.append("first committed")
    thread.join(10)
    assert not thread.is_alive() and errors == []
    assert [statement for name, statement in sent if name == "second"][0] == "BEGIN IMMEDIATE"
    with engine.connect() as connection:
        assert connection.execute(text("SELECT x FROM t ORDER BY x")).scalars().all() == [1, 2]
    assert not lock.locked()


def test_the_wait_is_bounded_and_fails_as_sqlites_busy_wait_does(tmp_path: Path) -> None:
    engine = build(tmp_path / "bounded.db", lock_timeout=0.3)
    sent = sent_by_thread(engine)
    try:
        with writer(engine) as first, first.begin():
            first.execute(INSERT, {"x": 1})
            thread, errors = in_thread("second", lambda: writer(engine).begin().close())
            thread.join(10)
            assert not thread.is_alive()
        [error] = errors
        assert isinstance(error, OperationalError)
        assert "database is locked" in str(error)
        assert is_timeout(error) and is_retryable(error)  # as SQLite's own "database is locked"
        assert not [statement for name, statement in sent if name == "second"]
    finally:
        engine.dispose()


def test_a_writer_whose_caller_gave_up_stops_waiting(tmp_path: Path) -> None:
    engine = build(tmp_path / "abandoned.db", lock_timeout=60)
    lock = record_writer_lock(engine)
    fence = Fence()

    def second() -> None:
        current_fence.set(fence)
        with writer(engine) as connection, connection.begin():
            connection.execute(INSERT, {"x": 2})

    try:
        with writer(engine) as first, first.begin():
            thread, errors = in_thread("second", second)
            assert lock.waiting.wait(10)
            fence.abandon()
            thread.join(10)  # well before the 60 s bound
            assert not thread.is_alive()
            [error] = errors
            assert isinstance(error, WorkAbandonedError)
        assert not lock.locked()
    finally:
        engine.dispose()


def _commit(connection: Connection) -> None:
    with connection.begin():
        connection.execute(INSERT, {"x": 1})


def _roll_back(connection: Connection) -> None:
    transaction = connection.begin()
    connection.execute(INSERT, {"x": 1})
    transaction.rollback()


def _fail_inside(connection: Connection) -> None:
    with pytest.raises(RuntimeError), connection.begin():
        connection.execute(INSERT, {"x": 1})
        raise RuntimeError("the work failed")


def _close_midway(connection: Connection) -> None:
    connection.begin()
    connection.execute(INSERT, {"x": 1})
    connection.invalidate()  # the connection is closed with its transaction open


@pytest.mark.parametrize(
    "end",
    [_commit, _roll_back, _fail_inside, _close_midway],
    ids=["commit", "rollback", "an error inside", "the connection closed midway"],
)
def test_the_lock_is_let_go_however_the_transaction_ends(
    engine: Engine, end: Callable[[Connection], None]
) -> None:
    lock = record_writer_lock(engine)
    with writer(engine) as connection:
        end(connection)
    assert not lock.locked()
    _commit(writer(engine))  # and the next writer gets it
    assert not lock.locked()


def test_a_begin_that_sqlite_refuses_lets_the_lock_go(tmp_path: Path) -> None:
    """Another process (here a connection outside the engine) holds SQLite's write lock: the
    engine's writer takes the process's lock, then SQLite refuses its BEGIN after the busy
    wait, and the process's lock is free again."""
    path = tmp_path / "outside.db"
    engine = build(path, lock_timeout=0.2)
    lock = record_writer_lock(engine)
    outside = sqlite3.connect(path, isolation_level=None)
    try:
        outside.execute("BEGIN IMMEDIATE")
        with pytest.raises(OperationalError, match="database is locked"):
            _commit(writer(engine))
        assert not lock.locked()
        outside.execute("ROLLBACK")
        _commit(writer(engine))
    finally:
        outside.close()
        engine.dispose()


def test_engines_on_one_file_share_its_lock(tmp_path: Path) -> None:
    one, two = build(tmp_path / "shared.db"), build(tmp_path / "shared.db")
    other = build(tmp_path / "other.db")
    try:
        locks = []
        for engine in (one, two, other):
            with engine.connect() as connection:
                locks.append(type(connection.connection.dbapi_connection).writer_lock)
        assert locks[0] is locks[1]
        assert locks[2] is not locks[0]
        assert sqlite_writers.writer_lock(str(tmp_path / "shared.db")) is locks[0]
    finally:
        for engine in (one, two, other):
            engine.dispose()
