"""Revision 0012 (projects, project documents, the project of conversations, history entries and
proposals) on SQLite, PostgreSQL and MariaDB.

Invariants: the upgrade adds projects without touching existing memory (every document, history
entry and proposal reads the same, outside any project); the downgrade removes projects, their
documents and the history and proposals made in them, keeps every conversation (as a general
one) and every general row, and the upgrade runs again on what it left.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, inspect, text

from app.db.migrate import upgrade
from app.db.writers import maintenance
from app.memory import history, proposals
from app.memory.provenance import batches_to_json, changes_to_json
from app.memory.repository import load_snapshot
from app.memory.rules import SEPARATOR, Change, Operation, Snapshot
from app.memory.service import MemoryService
from tests.support.databases import migrate

BEFORE = "0011"


def read_before_expiries(engine: Engine, user_id: str) -> Snapshot:
    """The user's general documents read at a revision older than 0017 (no expiries table:
    the service's read, which attaches expiries, needs head's schema)."""
    with engine.connect() as connection:
        return load_snapshot(connection, user_id, expiring=False)


PROJECT = "7d3f1a52-0a4e-4f5b-9b8e-2c1d3e4f5a6b"
CHANGE = "1b2c3d4e-0000-4000-8000-000000000001"
PROPOSAL = "1b2c3d4e-0000-4000-8000-000000000002"
CONVERSATION = "c0ffee00-0000-4000-8000-000000000001"


def add(target: str, content: str) -> list[list[Operation]]:
    return [[Operation(target, "add", content=content)]]  # type: ignore[arg-type]


def plant_project_rows(engine: Engine, *, conversation: bool = True) -> None:
    """What revision 0012 holds and 0011 cannot: a project, its document, and a history entry,
    a proposal and a conversation in it."""
    stamp = datetime.now(UTC).replace(tzinfo=None)
    with engine.begin() as connection, maintenance(connection):
        connection.execute(
            text(
                "INSERT INTO amem_projects (id, user_id, name, general_memory, created_at, "
                "updated_at) VALUES (:id, 'alice', 'Client A', :no, :at, :at)"
            ),
            {"id": PROJECT, "no": False, "at": stamp},
        )
        connection.execute(
            text(
                "INSERT INTO amem_project_memory (project_id, user_id, content) "
                "VALUES (:id, 'alice', 'Client A bills monthly.')"
            ),
            {"id": PROJECT},
        )
        connection.execute(
            text(
                "INSERT INTO amem_memory_changes (id, user_id, source, operations, created_at, "
                "project_id) VALUES ('p-change', 'alice', 'api', '[]', :at, :id)"
            ),
            {"id": PROJECT, "at": stamp},
        )
        connection.execute(
            text(
                "INSERT INTO amem_memory_proposals (id, user_id, batches, created_at, expires_at, "
                "project_id) VALUES ('p-proposal', 'alice', '[]', :at, :later, :id)"
            ),
            {"id": PROJECT, "at": stamp, "later": stamp + timedelta(days=1)},
        )
        if not conversation:
            return
        connection.execute(
            text(
                "INSERT INTO amem_conversations (id, user_id, title, created_at, updated_at, "
                "project_id) VALUES (:conversation, 'alice', 'Kickoff', :at, :at, :id)"
            ),
            {"id": PROJECT, "conversation": CONVERSATION, "at": stamp},
        )


def test_existing_memory_reads_the_same_after_the_upgrade(fresh_engine: Engine) -> None:
    """Documents, history and proposals as revision 0011 stored them (planted in its own
    schema) read at 0012 exactly as written, all outside any project; the documents' rows
    are untouched, byte for byte."""
    migrate(fresh_engine, BEFORE)
    stamp = datetime.now(UTC).replace(tzinfo=None)
    change = Change("memory", "add", None, "Deploys with make.")
    staged = ((Operation("memory", "add", content="Proposed fact."),),)
    with fresh_engine.begin() as connection, maintenance(connection):
        connection.execute(
            text(
                "INSERT INTO agent_memory (user_id, memory_type, content) VALUES "
                "('alice', 'user', 'Name: Alice.'), ('alice', 'memory', :memory)"
            ),
            {"memory": SEPARATOR.join(["Deploys with make.", "Uses tabs."])},
        )
        connection.execute(
            text(
                "INSERT INTO amem_memory_changes (id, user_id, source, operations, created_at) "
                "VALUES (:id, 'alice', 'api', :operations, :at)"
            ),
            {"id": CHANGE, "operations": changes_to_json([change]), "at": stamp},
        )
        connection.execute(
            text(
                "INSERT INTO amem_memory_proposals (id, user_id, batches, created_at, expires_at) "
                "VALUES (:id, 'alice', :batches, :at, :later)"
            ),
            {
                "id": PROPOSAL,
                "batches": batches_to_json(staged),
                "at": stamp,
                "later": stamp + timedelta(days=1),
            },
        )
    with fresh_engine.connect() as connection:
        memory_rows = connection.execute(
            text("SELECT user_id, memory_type, content, created_at FROM agent_memory ORDER BY 2")
        ).all()

    upgrade(fresh_engine)
    snapshot = MemoryService(fresh_engine).read("alice")
    assert snapshot.user == ("Name: Alice.",)
    assert snapshot.memory == ("Deploys with make.", "Uses tabs.")
    assert snapshot.project == () and "project" not in snapshot.targets
    with fresh_engine.connect() as connection:
        [entry] = history.page(connection, "alice", limit=None, project_id=None) or []
        [proposal] = proposals.pending(connection, "alice", project_id=None)
        assert (
            connection.execute(
                text(
                    "SELECT user_id, memory_type, content, created_at FROM agent_memory ORDER BY 2"
                )
            ).all()
            == memory_rows
        )
    assert (entry.id, entry.changes, entry.project_id) == (CHANGE, (change,), None)
    assert (proposal.id, proposal.batches, proposal.project_id) == (PROPOSAL, staged, None)


def test_downgrade_keeps_what_the_previous_schema_reads(fresh_engine: Engine) -> None:
    """The way back drops projects, their documents, history and proposals; general memory and
    every conversation stay; upgrading again works on that data."""
    upgrade(fresh_engine)
    service = MemoryService(fresh_engine)
    service.commit_operations("alice", add("memory", "A general fact."))
    plant_project_rows(fresh_engine)
    general = service.read("alice")

    migrate(fresh_engine, BEFORE, down=True)
    inspector = inspect(fresh_engine)
    tables = set(inspector.get_table_names())
    assert "amem_projects" not in tables and "amem_project_memory" not in tables
    for table in ("amem_conversations", "amem_memory_changes", "amem_memory_proposals"):
        assert "project_id" not in {column["name"] for column in inspector.get_columns(table)}
    with fresh_engine.connect() as connection:
        ids = connection.execute(text("SELECT id FROM amem_memory_changes")).scalars().all()
        assert "p-change" not in ids and len(ids) == 1
        assert connection.execute(text("SELECT id FROM amem_memory_proposals")).all() == []
        assert connection.execute(text("SELECT id FROM amem_conversations")).scalars().all() == [
            CONVERSATION
        ]
    assert read_before_expiries(fresh_engine, "alice") == general

    upgrade(fresh_engine)
    assert service.read("alice") == general
    plant_project_rows(fresh_engine, conversation=False)
