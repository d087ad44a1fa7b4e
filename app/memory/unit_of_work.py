"""The one way in for writes to a user's memory state: a transaction that holds the user's writer
lock from its first statement to its end, on every dialect.

MemoryService opens one per write (a commit, a REST batch, undo, accept, reject, forget, the save
mode) and retries it whole; app/memory/writes.py holds what each write does inside it.

The boundary is a type: every store function that writes memory state takes a `UnitOfWork`, never
a `Connection`, so a write outside one does not type-check (`mypy --strict`), and only
`unit_of_work` below makes one (tests/integration/test_one_way_in.py holds both). The guard in
app/db/writers.py is the second line, for SQL no type sees: it refuses memory-state writes on
any connection that is not inside a unit of work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection, Engine

from app.db.engine import SQLITE_IMMEDIATE
from app.db.writers import holding_writer_lock, release_session_lock

# Called with the user's lock held, naming the write (tests hold a writer there to prove that
# every other writer of the user waits).
LockObserver = Callable[[str, str], None]


@dataclass(frozen=True)
class UnitOfWork:
    """A transaction holding `user_id`'s writer lock; its statements see the latest commits.
    Made by `unit_of_work` only: holding one is the proof that the lock is held, which is why
    the store's write functions take it (and its `user_id`: they write for no one else)."""

    connection: Connection
    user_id: str


def _write_connection(engine: Engine) -> Connection:
    connection = engine.connect()
    dialect = connection.dialect.name
    if dialect == "sqlite":
        return connection.execution_options(**{SQLITE_IMMEDIATE: True})
    if dialect in ("postgresql", "mysql", "mariadb"):
        # The writer lock excludes the user's other writers, and each statement at READ
        # COMMITTED reads the latest committed rows, so everything read after the lock is what
        # the previous writer left. SERIALIZABLE would only add conflicts between users
        # (PostgreSQL's predicate locks, InnoDB's shared next-key locks).
        return connection.execution_options(isolation_level="READ COMMITTED")
    return connection.execution_options(isolation_level="SERIALIZABLE")


@contextmanager
def unit_of_work(
    engine: Engine,
    user_id: str,
    what: str,
    *,
    before: LockObserver | None = None,
    observe: LockObserver | None = None,
) -> Iterator[UnitOfWork]:
    """Begin, take the user's writer lock, yield; commit when the block ends normally, roll back
    when it raises. The lock is released after the transaction ended (at its end, except
    MariaDB's session lock, released right after). `before` is called just before the lock is
    asked for, `observe` once it is held."""
    if before is not None:
        before(user_id, what)
    with _write_connection(engine) as connection:
        locked = False
        try:
            with connection.begin(), holding_writer_lock(connection, user_id):
                locked = True
                if observe is not None:
                    observe(user_id, what)
                yield UnitOfWork(connection, user_id)
        finally:
            if locked:
                release_session_lock(connection, user_id)
