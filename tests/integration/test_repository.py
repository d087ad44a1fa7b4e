"""Memory storage on SQLite, PostgreSQL and MariaDB: round trip, row lifecycle, version refusal,
atomic batches, and the per-dialect locking statements (SQL Server compiled only)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, insert
from sqlalchemy.dialects import mssql, mysql, postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from app.db.locking import is_retryable, is_unique_violation, locked_memory_select
from app.db.schema import agent_memory
from app.db.writers import maintenance
from app.memory.ledger import MemoryLedger, stage_operations
from app.memory.repository import MemoryUnreadableError
from app.memory.rules import LIMITS, SEPARATOR, MemoryValidationError, Operation, Snapshot
from app.memory.service import MemoryService, MemoryUnavailableError
from tests.support.memory_db import add, entries, insert_row, rows, watch


def test_round_trip(engine: Engine) -> None:
    """What a commit stores is what a read returns: both documents, delimiter-joined, version 1."""
    service = MemoryService(engine)
    result = service.commit_operations(
        "alice",
        [
            [
                Operation("user", "add", content="The user prefers short answers."),
                Operation("user", "add", content="Multi-line\nfact with § inside."),
                Operation("memory", "add", content="The project uses PostgreSQL 16."),
            ]
        ],
    )
    expected = Snapshot(
        user=("The user prefers short answers.", "Multi-line\nfact with § inside."),
        memory=("The project uses PostgreSQL 16.",),
    )
    assert result.snapshot == expected
    assert result.changed == ("user", "memory")
    assert result.retry_count == 0
    assert service.read("alice") == expected
    stored = rows(engine, "alice")
    assert stored["user"] == (SEPARATOR.join(expected.user), 1)
    assert stored["memory"] == ("The project uses PostgreSQL 16.", 1)


def test_unicode_and_full_store_round_trip(engine: Engine) -> None:
    """Non-ASCII text and a store filled exactly to its limit survive storage unchanged."""
    service = MemoryService(engine)
    first = "Prefers café, naïve, 日本語 and emoji 🎉."
    filler = "x" * (LIMITS["memory"] - len(first) - len(SEPARATOR))
    service.commit_operations(
        "alice",
        [[Operation("memory", "add", content=first), Operation("memory", "add", content=filler)]],
    )
    snapshot = service.read("alice")
    assert snapshot.memory == (first, filler)
    assert snapshot.characters("memory") == LIMITS["memory"]


def test_missing_rows_are_empty_memory(engine: Engine) -> None:
    """A user with no rows reads as an empty snapshot, not an error."""
    assert MemoryService(engine).read("nobody") == Snapshot()


def test_removing_the_last_entry_deletes_the_row(engine: Engine) -> None:
    """Delete-on-empty: the emptied document's row is gone; the other document's row stays."""
    service = MemoryService(engine)
    service.commit_operations(
        "alice",
        [
            [
                Operation("user", "add", content="Likes tea."),
                Operation("memory", "add", content="CI."),
            ]
        ],
    )
    result = service.commit_operations("alice", [[Operation("user", "remove", match="tea")]])
    assert result.changed == ("user",)
    assert set(rows(engine, "alice")) == {"memory"}
    assert service.read("alice") == Snapshot(memory=("CI.",))


def test_only_changed_documents_are_written(engine: Engine) -> None:
    """A batch touching one document writes one row; a no-op batch writes nothing."""
    service = MemoryService(engine)
    service.commit_operations(
        "alice",
        [
            [
                Operation("user", "add", content="Likes tea."),
                Operation("memory", "add", content="CI."),
            ]
        ],
    )
    with watch(engine) as log:
        service.commit_operations("alice", add("user", "Likes jazz."))
    assert len(log.writes) == 1 and "UPDATE" in log.writes[0].upper()
    with watch(engine) as log:
        result = service.commit_operations("alice", add("user", "Likes jazz."))
    assert log.writes == [] and result.changed == ()


def test_users_are_isolated(engine: Engine) -> None:
    """One user's commit never reads or changes another user's rows."""
    service = MemoryService(engine)
    service.commit_operations("bob", add("user", "Bob likes coffee."))
    service.commit_operations("alice", add("user", "Alice likes tea."))
    service.commit_operations("alice", [[Operation("user", "remove", match="likes")]])
    assert service.read("bob") == Snapshot(user=("Bob likes coffee.",))
    assert rows(engine, "alice") == {}


def test_forget_deletes_both_rows(engine: Engine) -> None:
    """Forgetting removes both documents of that user and nobody else's."""
    service = MemoryService(engine)
    service.commit_operations(
        "alice", [[Operation("user", "add", content="a"), Operation("memory", "add", content="b")]]
    )
    service.commit_operations("bob", add("memory", "c"))
    assert service.forget("alice") == 2
    assert rows(engine, "alice") == {}
    assert entries(engine, "bob", "memory") == ["c"]


@pytest.mark.parametrize("version", [0, 2, 99])
def test_unknown_schema_version_is_refused_and_never_overwritten(
    engine: Engine, version: int
) -> None:
    """A row this code does not understand makes the user's memory unreadable: reads fail
    (the turn then runs with memory unavailable) and commits fail without touching the row."""
    insert_row(engine, "alice", "memory", "written by a future release", schema_version=version)
    service = MemoryService(engine)
    with pytest.raises(MemoryUnavailableError):
        service.read("alice")
    with pytest.raises(MemoryUnreadableError):
        service.commit_operations("alice", add("user", "A new fact."))
    with pytest.raises(MemoryUnreadableError):
        service.commit_operations("alice", add("memory", "A new fact."))
    assert rows(engine, "alice") == {"memory": ("written by a future release", version)}


def test_failed_batch_commits_nothing(engine: Engine) -> None:
    """A batch whose last step is invalid commits none of its valid earlier steps."""
    service = MemoryService(engine)
    service.commit_operations("alice", add("memory", "Keep me."))
    with pytest.raises(MemoryValidationError), watch(engine) as log:
        service.commit_operations(
            "alice",
            [
                [
                    Operation("user", "add", content="Should not persist."),
                    Operation("memory", "remove", match="Keep"),
                    Operation("memory", "remove", match="absent"),
                ]
            ],
        )
    assert log.writes == []
    assert rows(engine, "alice") == {"memory": ("Keep me.", 1)}


def test_a_failing_later_batch_discards_earlier_batches(engine: Engine) -> None:
    """The staged batches commit all together or not at all."""
    service = MemoryService(engine)
    with pytest.raises(MemoryValidationError):
        service.commit_operations(
            "alice",
            [add("user", "First batch.")[0], [Operation("user", "remove", match="absent")]],
        )
    assert rows(engine, "alice") == {}


def test_commit_replays_batches_with_capacity_after_each(engine: Engine) -> None:
    """The commit re-applies each staged batch exactly as staged: capacity is checked after
    every batch, so a batch that no longer fits the latest snapshot fails the whole commit."""
    service = MemoryService(engine)
    ledger = MemoryLedger(snapshot=service.read("alice"))
    stage_operations(ledger, [Operation("memory", "add", content="b" * (LIMITS["memory"] - 50))])
    stage_operations(ledger, [Operation("memory", "remove", match="bbbb")])
    service.commit_operations("alice", add("memory", "c" * 100))  # another request, meanwhile
    with pytest.raises(MemoryValidationError) as caught:
        service.commit_operations("alice", ledger.batches)
    assert caught.value.code == "capacity_exceeded"
    assert entries(engine, "alice", "memory") == ["c" * 100]


def test_commit_applies_staged_batches_to_the_latest_snapshot(engine: Engine) -> None:
    """A ledger staged on an old read is replayed on the latest stored state: the fact another
    request committed in between survives (no lost update)."""
    service = MemoryService(engine)
    ledger = MemoryLedger(snapshot=service.read("alice"))
    stage_operations(ledger, [Operation("memory", "add", content="From this turn.")])
    service.commit_operations("alice", add("memory", "From another turn."))
    result = service.commit_operations("alice", ledger.batches)
    assert result.snapshot.memory == ("From another turn.", "From this turn.")
    assert entries(engine, "alice", "memory") == ["From another turn.", "From this turn."]


def test_a_stale_edit_is_rejected_clearly(engine: Engine) -> None:
    """If another request removed the entry a staged edit targets, the commit fails as stale
    and changes nothing, instead of editing some other entry."""
    service = MemoryService(engine)
    service.commit_operations("alice", add("memory", "Deploys run on Fridays."))
    ledger = MemoryLedger(snapshot=service.read("alice"))
    stage_operations(ledger, [Operation("memory", "replace", match="Fridays", content="Mondays.")])
    service.commit_operations("alice", [[Operation("memory", "remove", match="Fridays")]])
    with pytest.raises(MemoryValidationError) as caught:
        service.commit_operations("alice", ledger.batches)
    assert caught.value.code == "stale_match"
    assert rows(engine, "alice") == {}


def test_duplicate_primary_key_is_recognised_as_the_first_insert_race(engine: Engine) -> None:
    """The real unique-violation error of each driver is classified as the first-insert race
    (retried), and it is not mistaken for a deadlock."""
    insert_row(engine, "alice", "user", "first")
    with (
        pytest.raises(IntegrityError) as caught,
        engine.begin() as connection,
        maintenance(connection),
    ):
        connection.execute(
            insert(agent_memory).values(user_id="alice", memory_type="user", content="second")
        )
    assert is_unique_violation(caught.value)
    assert not is_retryable(caught.value)


@pytest.mark.parametrize(
    ("dialect", "name", "expected"),
    [
        pytest.param(
            mssql.dialect(), "mssql", "FROM agent_memory WITH (UPDLOCK, HOLDLOCK)", id="mssql"
        ),
        pytest.param(postgresql.dialect(), "postgresql", "FOR UPDATE", id="postgresql"),
        pytest.param(mysql.dialect(is_mariadb=True), "mariadb", "FOR UPDATE", id="mariadb"),
        pytest.param(mysql.dialect(), "mysql", "FOR UPDATE", id="mysql"),
    ],
)
def test_locked_select_per_dialect(dialect: object, name: str, expected: str) -> None:
    """SQL Server reads under UPDLOCK+HOLDLOCK (range-locking a user with no rows yet);
    PostgreSQL and MariaDB/MySQL use SELECT ... FOR UPDATE."""
    sql = " ".join(str(locked_memory_select(name, "alice").compile(dialect=dialect)).split())  # type: ignore[arg-type]
    assert expected in sql
    assert "agent_memory.user_id =" in sql
    if name == "mssql":
        assert "FOR UPDATE" not in sql


def test_sqlite_locked_select_relies_on_begin_immediate() -> None:
    """SQLite has no row locks: the select is plain and the write transaction is taken at BEGIN
    (see test_commit_concurrency for the behaviour)."""
    sql = str(locked_memory_select("sqlite", "alice").compile(dialect=sqlite.dialect()))
    assert "FOR UPDATE" not in sql and "WITH (" not in sql


def test_sqlite_writer_begins_immediate(sqlite_url: str) -> None:
    """The commit's SQLite transaction starts with BEGIN IMMEDIATE (the write lock up front)."""
    from tests.support.databases import migrated_engine, wipe

    engine = migrated_engine(sqlite_url)
    wipe(engine)
    try:
        with watch(engine) as log:
            MemoryService(engine).commit_operations("alice", add("user", "x"))
        begins = [s for s in log.statements if s.upper().startswith("BEGIN")]
        assert begins == ["BEGIN IMMEDIATE"]
    finally:
        engine.dispose()
