"""Concurrent writers and retries on SQLite, PostgreSQL and MariaDB: every valid change survives,
only deadlock/serialization failures are retried, and a retry replays the whole transaction."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from app.db.locking import is_retryable, is_unique_violation
from app.db.writers import maintenance
from app.memory.rules import MemoryValidationError, Operation
from app.memory.service import BACKOFF_SECONDS, MAX_ATTEMPTS, MemoryBusyError, MemoryService
from tests.support.databases import lock_waiters, migrated_engine, wipe
from tests.support.memory_db import (
    add,
    commit_facts_in_process,
    deadlock_error,
    entries,
    fail_loads,
    insert_row,
    is_memory_write,
    rows,
    serialization_error,
    unknown_error,
    watch,
)
from tests.support.waiting import wait_for

WAIT_SECONDS = 30


def run_threads(workers: list[Callable[[], Any]]) -> list[Any]:
    """Run callables in threads released together; return results, re-raising any failure."""
    barrier = threading.Barrier(len(workers))
    results: list[Any] = [None] * len(workers)
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait(timeout=WAIT_SECONDS)
            results[index] = workers[index]()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=WAIT_SECONDS * 2)
    assert not any(thread.is_alive() for thread in threads), "a writer never finished"
    if errors:
        raise errors[0]
    return results


class RecordingSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


# -- concurrent writers -----------------------------------------------------------------------


@pytest.mark.parametrize("seeded", [True, False], ids=["existing-user", "new-user"])
def test_eight_threads_writing_one_user_keep_every_fact(engine: Engine, seeded: bool) -> None:
    """Eight simultaneous commits for one user, each on its own connection, all survive, for
    a user with rows and for one with none yet: the locked reload and replay (and the retry
    of the first-insert race) prevent lost updates."""
    service = MemoryService(engine)
    if seeded:
        service.commit_operations("alice", add("user", "Seed fact."))
    facts = [f"Concurrent fact number {index}." for index in range(8)]
    results = run_threads(
        [
            lambda fact=fact: service.commit_operations("alice", add("memory", fact))
            for fact in facts
        ]
    )
    assert sorted(entries(engine, "alice", "memory")) == sorted(facts)
    assert entries(engine, "alice", "user") == (["Seed fact."] if seeded else [])
    assert all(result.snapshot.memory[-1] in facts for result in results)


def test_concurrent_edits_to_both_documents_keep_every_change(engine: Engine) -> None:
    """Writers that touch different documents and different entries of one user interleave
    without losing any change (adds, replaces and removes together)."""
    service = MemoryService(engine)
    service.commit_operations(
        "alice",
        [
            [
                Operation("user", "add", content="Old user fact."),
                Operation("memory", "add", content="Old memory fact."),
            ]
        ],
    )
    workers = [
        lambda: service.commit_operations(
            "alice", [[Operation("user", "replace", match="Old user", content="New user fact.")]]
        ),
        lambda: service.commit_operations(
            "alice", [[Operation("memory", "remove", match="Old memory")]]
        ),
        lambda: service.commit_operations("alice", add("memory", "Added memory fact.")),
        lambda: service.commit_operations("alice", add("user", "Added user fact.")),
    ]
    run_threads(workers)
    assert sorted(entries(engine, "alice", "user")) == ["Added user fact.", "New user fact."]
    assert entries(engine, "alice", "memory") == ["Added memory fact."]


def test_writers_in_separate_processes_keep_every_fact(db_url: str, engine: Engine) -> None:
    """Two OS processes, each with its own engine and connections, commit facts for one user
    at the same time; every fact is stored."""
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    plans = {f"proc-{p}": [f"Process {p} fact {i}." for i in range(4)] for p in range(2)}
    processes = [
        context.Process(
            target=commit_facts_in_process, args=(db_url, "alice", facts, start, results)
        )
        for facts in plans.values()
    ]
    for process in processes:
        process.start()
    try:
        start.set()
        reports = [results.get(timeout=90) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=30)
    assert [report[0] for report in reports] == ["ok", "ok"], reports
    assert all(process.exitcode == 0 for process in processes)
    expected = sorted(fact for facts in plans.values() for fact in facts)
    assert sorted(entries(engine, "alice", "memory")) == expected
    results.close()
    results.join_thread()


def test_first_writers_of_a_new_user_queue_on_the_writer_lock(engine: Engine) -> None:
    """Two first writers for a user with no rows: both facts end up stored, and neither had to
    retry a first-insert collision: the writer lock covers a user with no rows yet on every
    dialect (FOR UPDATE alone locks nothing there), so the second reads the first's row."""
    service = MemoryService(engine)
    results = run_threads(
        [
            lambda: service.commit_operations("newcomer", add("memory", "Fact from writer A.")),
            lambda: service.commit_operations("newcomer", add("memory", "Fact from writer B.")),
        ]
    )
    assert sorted(entries(engine, "newcomer", "memory")) == [
        "Fact from writer A.",
        "Fact from writer B.",
    ]
    assert [result.retry_count for result in results] == [0, 0]


# -- retries -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_error", [deadlock_error, serialization_error], ids=["deadlock", "serialization"]
)
def test_deadlock_on_load_is_retried_once(
    engine: Engine, make_error: Callable[[str], Exception]
) -> None:
    """A deadlock/serialization failure is retried: the load runs again, the commit succeeds
    with retry_count 1, after one short jittered backoff."""
    sleep = RecordingSleep()
    service = MemoryService(engine, sleep=sleep)
    service.commit_operations("alice", add("memory", "Existing fact."))
    dialect = engine.dialect.name
    with watch(engine, before=fail_loads(lambda: make_error(dialect), times=1)) as log:
        result = service.commit_operations("alice", add("memory", "New fact."))
    assert log.loads == 2
    assert result.retry_count == 1
    assert entries(engine, "alice", "memory") == ["Existing fact.", "New fact."]
    assert len(sleep.delays) == 1
    assert BACKOFF_SECONDS * 0.5 <= sleep.delays[0] <= BACKOFF_SECONDS * 1.5


def test_deadlock_during_persistence_replays_the_whole_transaction(engine: Engine) -> None:
    """A deadlock at the write (after the load and the replay) rolls back and the retry starts
    over: the snapshot is loaded again and the batches are re-applied to it."""
    service = MemoryService(engine, sleep=RecordingSleep())
    service.commit_operations("alice", add("memory", "Existing fact."))
    dialect = engine.dialect.name
    failed = [False]

    def before(statement: str) -> None:
        if is_memory_write(statement) and not failed[0]:
            failed[0] = True
            raise deadlock_error(dialect)

    batches = [
        [
            Operation("memory", "add", content="New fact."),
            Operation("memory", "remove", match="Existing"),
        ]
    ]
    with watch(engine, before=before) as log:
        result = service.commit_operations("alice", batches)
    assert failed[0]
    assert log.loads == 2
    assert len(log.writes) == 2
    assert result.retry_count == 1
    assert entries(engine, "alice", "memory") == ["New fact."]


def test_retries_stop_after_the_attempt_limit(engine: Engine) -> None:
    """A deadlock that keeps happening is retried at most MAX_ATTEMPTS - 1 times, then raised;
    nothing is committed. (SQLite's stand-in is its busy error: once the retries are spent, it
    is a lock wait that ran out, raised as MemoryBusyError.)"""
    sleep = RecordingSleep()
    service = MemoryService(engine, sleep=sleep)
    dialect = engine.dialect.name
    failing = fail_loads(lambda: deadlock_error(dialect), times=99)
    with (
        watch(engine, before=failing) as log,
        pytest.raises((DBAPIError, MemoryBusyError)) as caught,
    ):
        service.commit_operations("alice", add("memory", "Never stored."))
    assert isinstance(caught.value, MemoryBusyError) == (dialect == "sqlite")
    raised = caught.value.__cause__ if isinstance(caught.value, MemoryBusyError) else caught.value
    assert isinstance(raised, DBAPIError) and is_retryable(raised)
    assert log.loads == MAX_ATTEMPTS == 3
    assert len(sleep.delays) == MAX_ATTEMPTS - 1
    assert sleep.delays[1] > sleep.delays[0] * 0.3  # grows with the attempt, jitter aside
    assert rows(engine, "alice") == {}


def test_unknown_database_errors_are_not_retried(engine: Engine) -> None:
    """A database failure that is not a deadlock/serialization error is raised at once."""
    sleep = RecordingSleep()
    service = MemoryService(engine, sleep=sleep)
    dialect = engine.dialect.name
    failing = fail_loads(lambda: unknown_error(dialect), times=1)
    with watch(engine, before=failing) as log, pytest.raises(DBAPIError) as caught:
        service.commit_operations("alice", add("memory", "Never stored."))
    assert not is_retryable(caught.value) and not is_unique_violation(caught.value)
    assert log.loads == 1
    assert sleep.delays == []
    assert rows(engine, "alice") == {}


def test_non_database_errors_are_not_retried(engine: Engine) -> None:
    """An unexpected Python error inside the transaction is raised at once and rolls back."""
    sleep = RecordingSleep()
    service = MemoryService(engine, sleep=sleep)

    def before(statement: str) -> None:
        if is_memory_write(statement):
            raise RuntimeError("unexpected")

    with watch(engine, before=before) as log, pytest.raises(Exception, match="unexpected"):
        service.commit_operations("alice", add("memory", "Never stored."))
    assert log.loads == 1 and sleep.delays == []
    assert rows(engine, "alice") == {}


def test_validation_errors_are_not_retried(engine: Engine) -> None:
    """A batch the rules reject fails on the first attempt; it is never replayed."""
    sleep = RecordingSleep()
    service = MemoryService(engine, sleep=sleep)
    with watch(engine) as log, pytest.raises(MemoryValidationError):
        service.commit_operations("alice", [[Operation("memory", "remove", match="absent")]])
    assert log.loads == 1
    assert sleep.delays == []


# -- real server errors are classified correctly ---------------------------------------------


@contextmanager
def open_transaction(engine: Engine, isolation: str | None = None) -> Iterator[Connection]:
    connection = engine.connect()
    if isolation:
        connection = connection.execution_options(isolation_level=isolation)
    transaction = connection.begin()
    try:
        with maintenance(connection):  # a raw writer of its own, outside the unit of work
            yield connection
    finally:
        if transaction.is_active:
            transaction.rollback()
        connection.close()


LOCK_ROW = "SELECT content FROM agent_memory WHERE user_id = :u AND memory_type = :t FOR UPDATE"


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def server_engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    """A migrated, emptied engine on each server that has row locks (SQLite has none)."""
    engine = migrated_engine(str(request.getfixturevalue(f"{request.param}_url")))
    wipe(engine)
    yield engine
    engine.dispose()


def test_a_real_deadlock_is_classified_as_retryable(server_engine: Engine) -> None:
    """Two transactions locking two rows in opposite order: the server's own deadlock error
    (PostgreSQL 40P01, MariaDB 1213) is recognised as retryable."""
    engine = server_engine
    insert_row(engine, "alice", "user", "u")
    insert_row(engine, "alice", "memory", "m")
    outcome: dict[str, BaseException | None] = {}
    with open_transaction(engine) as first, open_transaction(engine) as second:
        if engine.dialect.name == "postgresql":
            second.execute(text("SET LOCAL deadlock_timeout = '50ms'"))
        first.execute(text(LOCK_ROW), {"u": "alice", "t": "user"})
        second.execute(text(LOCK_ROW), {"u": "alice", "t": "memory"})

        def first_waits() -> None:
            try:
                first.execute(text(LOCK_ROW), {"u": "alice", "t": "memory"})
                outcome["first"] = None
            except BaseException as error:
                outcome["first"] = error

        thread = threading.Thread(target=first_waits)
        thread.start()
        wait_for(
            lambda: lock_waiters(engine, "%agent_memory%FOR UPDATE%") >= 1,
            "the first transaction waits for the lock",
        )
        try:
            second.execute(text(LOCK_ROW), {"u": "alice", "t": "user"})
            outcome["second"] = None
        except DBAPIError as error:
            outcome["second"] = error
            second.rollback()
        thread.join(timeout=WAIT_SECONDS)
    victims = [error for error in outcome.values() if error is not None]
    assert len(victims) == 1, outcome
    assert is_retryable(victims[0])


@pytest.mark.postgres
def test_a_real_serialization_failure_is_classified_as_retryable(postgres_url: str) -> None:
    """PostgreSQL's own 40001 at SERIALIZABLE (two writers of one row) is retryable."""
    engine = migrated_engine(postgres_url)
    wipe(engine)
    insert_row(engine, "alice", "user", "u")
    update = "UPDATE agent_memory SET content = :c WHERE user_id = 'alice' AND memory_type = 'user'"
    read = "SELECT content FROM agent_memory WHERE user_id = 'alice'"
    with (
        open_transaction(engine, "SERIALIZABLE") as first,
        open_transaction(engine, "SERIALIZABLE") as second,
    ):
        first.execute(text(read)).all()
        second.execute(text(read)).all()
        first.execute(text(update), {"c": "first"})
        first.commit()
        with pytest.raises(DBAPIError) as caught:
            second.execute(text(update), {"c": "second"})
    engine.dispose()
    assert is_retryable(caught.value)
