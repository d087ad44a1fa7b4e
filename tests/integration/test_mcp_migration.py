"""Revision 0009 (history source `mcp` and `client`; proposals' `source` and `client`) on
SQLite, PostgreSQL and MariaDB.

Invariants: the upgrade keeps every existing row's meaning; the downgrade leaves a database the
previous schema accepts (an MCP change becomes `api`, proposals from MCP and import are dropped,
a turn's proposal stays) and its check again refuses `mcp`; upgrading again works on that data.
"""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import DBAPIError

from app.db.migrate import upgrade
from app.db.writers import maintenance
from app.memory import proposals
from app.memory.provenance import Provenance
from app.memory.rules import Operation
from app.memory.service import MemoryService
from tests.support.databases import migrate

BEFORE = "0008"
TURN = "0f8fad5b-d9cb-469f-a165-70867728950e"


def add(content: str) -> list[list[Operation]]:
    return [[Operation("user", "add", content=content)]]


def column(engine: Engine, table: str, name: str = "source") -> list[str | None]:
    with engine.connect() as connection:
        return list(connection.execute(text(f"SELECT {name} FROM {table} ORDER BY seq")).scalars())


def test_downgrade_keeps_data_the_previous_schema_accepts(fresh_engine: Engine) -> None:
    """After MCP and import writes, the downgrade to 0008 leaves `api` for the MCP change, only
    the turn's proposal, no `client` columns, and a check that refuses `mcp` again."""
    upgrade(fresh_engine)
    service = MemoryService(fresh_engine)
    service.commit_operations("alice", add("Likes tea."), provenance=Provenance("api"))
    service.commit_operations(
        "alice", add("Keeps bees."), provenance=Provenance("mcp", client="Claude Desktop")
    )
    service.propose("alice", add("Imported fact."), "import")
    service.set_save_mode("alice", "ask")
    service.commit_operations(
        "alice", add("From an MCP client."), provenance=Provenance("mcp"), may_propose=True
    )
    service.commit_operations(
        "alice",
        add("From a turn."),
        provenance=Provenance("turn", turn_id=TURN),
        may_propose=True,
    )
    assert column(fresh_engine, "amem_memory_changes") == ["api", "mcp"]
    assert column(fresh_engine, "amem_memory_proposals") == ["import", "mcp", None]

    migrate(fresh_engine, BEFORE, down=True)
    assert column(fresh_engine, "amem_memory_changes") == ["api", "api"]
    assert column(fresh_engine, "amem_memory_proposals", "turn_id") == [TURN]
    inspector = inspect(fresh_engine)
    assert "client" not in {c["name"] for c in inspector.get_columns("amem_memory_changes")}
    assert "client" not in {c["name"] for c in inspector.get_columns("amem_memory_proposals")}
    with (
        pytest.raises(DBAPIError),
        fresh_engine.begin() as connection,
        maintenance(connection),
    ):
        connection.execute(
            text(
                "INSERT INTO amem_memory_changes (id, user_id, source, operations, created_at) "
                "VALUES ('x', 'alice', 'mcp', '[]', CURRENT_TIMESTAMP)"
            )
        )

    upgrade(fresh_engine)
    with fresh_engine.connect() as connection:
        [kept] = proposals.pending(connection, "alice")
    assert kept.proposer == "turn" and kept.turn_id == TURN
    service.commit_operations("alice", [], provenance=Provenance("proposal"), proposal_id=kept.id)
    assert column(fresh_engine, "amem_memory_changes") == ["api", "api", "proposal"]
