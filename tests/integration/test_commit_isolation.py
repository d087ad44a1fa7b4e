"""The commit's isolation on the database servers: whatever the isolation level (SERIALIZABLE on
MariaDB; READ COMMITTED with the per-user queue and `FOR UPDATE` on PostgreSQL), a commit applies
its batches to the latest committed snapshot while it excludes concurrent writers, and on
PostgreSQL writers of different users never conflict (no retry).

Each test holds one transaction open at a point where a weaker scheme would go wrong, waits until
the commit under test is observed blocked on that transaction's lock, then lets it go.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import Engine, delete, update

from app.db.schema import agent_memory
from app.db.writers import maintenance
from app.memory.rules import SEPARATOR, Operation
from app.memory.service import CommitResult, MemoryService
from tests.support.databases import lock_waiters, writer_lock_statement
from tests.support.memory_db import add, entries
from tests.support.waiting import wait_for

WAIT_SECONDS = 30


class Background:
    """One commit in a thread; `result()` joins it and re-raises its failure."""

    def __init__(self, work: Callable[[], CommitResult]) -> None:
        self._result: CommitResult | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work,))
        self._thread.start()

    def _run(self, work: Callable[[], CommitResult]) -> None:
        try:
            self._result = work()
        except BaseException as error:
            self._error = error

    def result(self) -> CommitResult:
        self._thread.join(WAIT_SECONDS)
        assert not self._thread.is_alive(), "the commit never finished"
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def locking_read(engine: Engine) -> str:
    """What a commit that waits for another writer is blocked in, per dialect."""
    return writer_lock_statement(engine)


def test_a_queued_writer_applies_its_change_to_the_previous_writers_commit(
    server_db: Engine,
) -> None:
    """Writer A has read the user's rows and holds its transaction open; writer B, started
    meanwhile, waits for A (it is seen blocked), then reads what A committed and adds to it:
    neither change is lost, and B's result is A's snapshot plus B's fact."""
    service = MemoryService(server_db)
    service.commit_operations("alice", add("memory", "Seed fact."))
    read_done, release = threading.Event(), threading.Event()
    calls = 0

    def hold_after_read() -> bool:
        nonlocal calls
        calls += 1
        if calls == 2:  # "before persistence": A has read and replayed under its locks
            read_done.set()
            assert release.wait(WAIT_SECONDS)
        return False

    first = Background(
        lambda: service.commit_operations("alice", add("memory", "Fact of A."), hold_after_read)
    )
    assert read_done.wait(WAIT_SECONDS)
    second = Background(lambda: service.commit_operations("alice", add("memory", "Fact of B.")))
    wait_for(lambda: lock_waiters(server_db, locking_read(server_db)) >= 1, "B waiting for A")
    release.set()
    assert first.result().retry_count == 0
    result = second.result()
    assert result.snapshot.memory == ("Seed fact.", "Fact of A.", "Fact of B.")
    assert result.retry_count == 0
    assert entries(server_db, "alice", "memory") == ["Seed fact.", "Fact of A.", "Fact of B."]


@pytest.mark.parametrize("change", ["update", "delete"])
def test_a_commit_waiting_on_another_writers_row_lock_reads_its_committed_rows(
    server_db: Engine, change: str
) -> None:
    """Another transaction (outside the queue: an operator's script, `forget`) changes the
    user's row and holds it; the commit waits on the row lock, then works on the row as that
    transaction committed it: the update is kept, the deleted entries do not come back."""
    service = MemoryService(server_db)
    service.commit_operations("bob", add("memory", "Old fact."))
    key = (agent_memory.c.user_id == "bob") & (agent_memory.c.memory_type == "memory")
    with server_db.connect() as other, maintenance(other):
        with other.begin():
            if change == "update":
                content = SEPARATOR.join(["Old fact.", "Fact of the other writer."])
                other.execute(update(agent_memory).where(key).values(content=content))
            else:
                other.execute(delete(agent_memory).where(key))
            commit = Background(
                lambda: service.commit_operations(
                    "bob", [[Operation("memory", "add", content="Fact of the commit.")]]
                )
            )
            wait_for(lambda: lock_waiters(server_db, "%FOR UPDATE%") >= 1, "the commit waiting")
        result = commit.result()
    expected = (
        ["Old fact.", "Fact of the other writer.", "Fact of the commit."]
        if change == "update"
        else ["Fact of the commit."]
    )
    assert list(result.snapshot.memory) == expected
    assert entries(server_db, "bob", "memory") == expected


def test_writers_of_different_users_never_retry_on_postgresql(pg: Engine) -> None:
    """Twelve threads, each committing repeatedly for its own user (first inserts, then
    replaces, side by side): no commit conflicts with another user's, so none is retried, and
    every document holds exactly its writer's last change."""
    service = MemoryService(pg)
    writers, commits = 12, 5
    barrier = threading.Barrier(writers)
    retries: list[int] = []
    lock = threading.Lock()

    def writer(index: int) -> CommitResult:
        barrier.wait(WAIT_SECONDS)
        user, tag = f"user-{index}", f"writer {index} counter"
        result = service.commit_operations(user, add("memory", f"{tag} 0"))
        with lock:
            retries.append(result.retry_count)
        for n in range(1, commits):
            result = service.commit_operations(
                user, [[Operation("memory", "replace", match=tag, content=f"{tag} {n}")]]
            )
            with lock:
                retries.append(result.retry_count)
        return result

    threads = [Background(lambda index=index: writer(index)) for index in range(writers)]
    for thread in threads:
        thread.result()
    assert retries == [0] * (writers * commits)
    for index in range(writers):
        assert entries(pg, f"user-{index}", "memory") == [f"writer {index} counter {commits - 1}"]
