"""The namespaced, exact schema (revision 0004) on SQLite, PostgreSQL and MariaDB, from a
database a previous release left behind: data kept, version moved out of `alembic_version`,
the way back, and another application's `alembic_version` never touched.

Each test starts from a brand-new database created with the server's default collation.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, inspect, select, text

from app.conversations import repository as conversations
from app.db.engine import build_engine
from app.db.migrate import (
    LEGACY_VERSION_TABLE,
    VERSION_TABLE,
    current_revision,
    head_revision,
    upgrade,
)
from app.db.schema import conversation_messages, is_search_object, metadata
from app.db.writers import maintenance
from app.memory.repository import load_snapshot
from app.memory.rules import Snapshot
from app.memory.service import MemoryService
from tests.support.databases import mariadb_database, migrate
from tests.support.memory_db import add

PREVIOUS = "0003"  # the last revision before the namespaced schema
NAMESPACED = "0004"  # the namespaced, exact schema this file is about


def is_at_head(engine: Engine) -> bool:
    return current_revision(engine) == head_revision()


CONVERSATION = "0f8fad5b-d9cb-469f-a165-70867728950e"
FOREIGN_REVISION = "a1b2c3d4e5f6"


@pytest.fixture
def fresh(fresh_engine: Engine) -> Engine:
    return fresh_engine


def versions(engine: Engine, table: str) -> list[str] | None:
    """The rows of a version table, or None when the table does not exist."""
    if not inspect(engine).has_table(table):
        return None
    with engine.connect() as connection:
        return sorted(connection.execute(text(f"SELECT version_num FROM {table}")).scalars())


def tables(engine: Engine) -> set[str]:
    """The tables, leaving out the search engine's own (SQLite's FTS5 tables, revision 0006)."""
    return {name for name in inspect(engine).get_table_names() if not is_search_object(name)}


def seed_previous_release(engine: Engine) -> None:
    """Rows as the release before 0004 wrote them, under its table names."""
    with engine.begin() as connection, maintenance(connection):
        connection.execute(
            text(
                "INSERT INTO agent_memory (user_id, memory_type, content) "
                "VALUES ('alice', 'user', 'The user likes tea.')"
            )
        )
        connection.execute(
            text(
                "INSERT INTO feature_flags (name, enabled, updated_by) "
                "VALUES ('memory', :on, 'ops')"
            ),
            {"on": False},
        )
        connection.execute(
            text(
                "INSERT INTO conversations (id, user_id, title, created_at, updated_at) "
                "VALUES (:id, 'alice', 'Tea', :at, :at)"
            ),
            {"id": CONVERSATION, "at": "2026-11-30"},
        )
        for number in (1, 2, 3):
            connection.execute(
                text(
                    "INSERT INTO conversation_messages "
                    "(id, conversation_id, turn_id, role, content, created_at) "
                    "VALUES (:n, :c, 't', :role, :content, :at)"
                ),
                {
                    "n": number * 10,
                    "c": CONVERSATION,
                    "role": "user" if number % 2 else "assistant",
                    "content": f"message {number}",
                    "at": "2026-11-30",
                },
            )


def test_a_previous_release_upgrades_with_its_data_and_its_version_moved(fresh: Engine) -> None:
    """At 0003 the revision is in `alembic_version`; upgrading moves it into
    `amem_alembic_version` (dropping the now empty table), renames the tables, keeps every row
    and message id, and new messages follow the copied ones."""
    migrate(fresh, PREVIOUS)
    assert versions(fresh, LEGACY_VERSION_TABLE) == [PREVIOUS]
    assert versions(fresh, VERSION_TABLE) is None
    assert current_revision(fresh) == PREVIOUS and not is_at_head(fresh)
    seed_previous_release(fresh)

    upgrade(fresh)
    assert is_at_head(fresh)
    assert versions(fresh, VERSION_TABLE) == [head_revision()]
    assert versions(fresh, LEGACY_VERSION_TABLE) is None
    assert tables(fresh) == set(metadata.tables) | {VERSION_TABLE}

    assert MemoryService(fresh).read("alice").user == ("The user likes tea.",)
    with fresh.begin() as connection:
        flag = connection.execute(
            text("SELECT enabled, updated_by FROM amem_feature_flags WHERE name = 'memory'")
        ).one()
        assert (bool(flag[0]), flag[1]) == (False, "ops")
        found = conversations.get(connection, "alice", CONVERSATION)
        assert found is not None and found.title == "Tea"
        conversations.add_message(connection, CONVERSATION, "t2", "user", "message 4", "complete")
        ids = (
            connection.execute(text("SELECT id FROM amem_conversation_messages ORDER BY id"))
            .scalars()
            .all()
        )
        stored = conversations.messages(connection, CONVERSATION)
    assert ids[:3] == [10, 20, 30] and ids[3] > 30
    assert [m.content for m in stored] == [f"message {n}" for n in (1, 2, 3, 4)]


def test_the_way_back_restores_the_previous_layout(fresh: Engine) -> None:
    """Downgrading to 0003 gives back the old table names with the data and puts the revision
    back in `alembic_version`, where that release reads it; upgrading again is lossless."""
    migrate(fresh, PREVIOUS)
    seed_previous_release(fresh)
    upgrade(fresh)
    migrate(fresh, PREVIOUS, down=True)
    assert versions(fresh, LEGACY_VERSION_TABLE) == [PREVIOUS]
    assert versions(fresh, VERSION_TABLE) is None
    assert {"feature_flags", "conversations", "conversation_messages"} <= tables(fresh)
    assert not tables(fresh) & {name for name in metadata.tables if name != "agent_memory"}
    with fresh.connect() as connection:
        contents = (
            connection.execute(text("SELECT content FROM conversation_messages ORDER BY id"))
            .scalars()
            .all()
        )
    assert contents == ["message 1", "message 2", "message 3"]

    upgrade(fresh)
    assert is_at_head(fresh)
    assert MemoryService(fresh).read("alice").user == ("The user likes tea.",)


@pytest.mark.parametrize("foreign", [FOREIGN_REVISION, "0002"], ids=["foreign", "same-id"])
def test_another_applications_alembic_version_is_never_touched(fresh: Engine, foreign: str) -> None:
    """A database already holding another application's `alembic_version` (even one whose
    revision id happens to be one of ours, without our tables): migrating up, down to 0003 and
    to base leaves it exactly as it was, and our revision lives in our own table."""
    with fresh.begin() as connection:
        connection.execute(
            text(
                f"CREATE TABLE {LEGACY_VERSION_TABLE} "
                "(version_num VARCHAR(32) NOT NULL PRIMARY KEY)"
            )
        )
        connection.execute(text(f"INSERT INTO {LEGACY_VERSION_TABLE} VALUES (:r)"), {"r": foreign})
        connection.execute(text("CREATE TABLE other_app_data (id INTEGER PRIMARY KEY)"))

    upgrade(fresh)
    assert is_at_head(fresh)
    assert set(metadata.tables) <= tables(fresh)
    assert versions(fresh, VERSION_TABLE) == [head_revision()]
    assert versions(fresh, LEGACY_VERSION_TABLE) == [foreign]

    migrate(fresh, PREVIOUS, down=True)
    assert current_revision(fresh) == PREVIOUS  # kept in our table: theirs is taken
    assert versions(fresh, VERSION_TABLE) == [PREVIOUS]
    assert versions(fresh, LEGACY_VERSION_TABLE) == [foreign]
    upgrade(fresh)
    assert is_at_head(fresh)

    migrate(fresh, "base", down=True)
    assert versions(fresh, LEGACY_VERSION_TABLE) == [foreign]
    assert "other_app_data" in tables(fresh)
    assert not tables(fresh) & set(metadata.tables)


def test_every_table_is_prefixed_except_the_designs_agent_memory() -> None:
    """The namespace: `agent_memory` keeps the design's name; every other table, index and
    named constraint, and the version table, carry the `amem_` prefix."""
    assert VERSION_TABLE == "amem_alembic_version"
    for table in metadata.tables.values():
        if table.name == "agent_memory":
            continue
        assert table.name.startswith("amem_"), table.name
        names = [index.name for index in table.indexes]
        names += [constraint.name for constraint in table.constraints]
        assert all(isinstance(name, str) and "_amem_" in name for name in names), names


# -- MariaDB: what the old collation did, and a way back that would redo it ----------------------


@pytest.fixture
def mariadb_fresh() -> Iterator[Engine]:
    with mariadb_database() as url:
        engine = build_engine(url)
        yield engine
        engine.dispose()


@pytest.mark.mariadb
def test_rows_the_old_collation_merged_stay_one_row_owned_by_its_stored_spelling(
    mariadb_fresh: Engine,
) -> None:
    """Before 0004, on the default collation, `ALICE` read and wrote `alice`'s row. The
    upgrade cannot split what was one row: it stays with the spelling stored in it (`alice`),
    holding what both wrote, and `ALICE` starts empty."""
    engine = mariadb_fresh
    migrate(engine, PREVIOUS)
    with engine.begin() as connection, maintenance(connection):
        connection.execute(
            text(
                "INSERT INTO agent_memory (user_id, memory_type, content) "
                "VALUES ('alice', 'user', 'Written by alice.')"
            )
        )
        merged = connection.execute(
            text(
                "UPDATE agent_memory SET content = 'Written by alice.\n§\nWritten by ALICE.' "
                "WHERE user_id = 'ALICE '"
            )
        ).rowcount
    assert merged == 1  # the old schema's flaw, shown: case and trailing space ignored

    upgrade(engine)
    service = MemoryService(engine)
    assert service.read("alice").user == ("Written by alice.", "Written by ALICE.")
    assert service.read("ALICE").user == ()
    assert service.read("ALICE ").user == ()


def read_before_expiries(engine: Engine, user_id: str) -> Snapshot:
    """The user's general documents read at a revision older than 0017 (no expiries table:
    the service's read, which attaches expiries, needs head's schema)."""
    with engine.connect() as connection:
        return load_snapshot(connection, user_id, expiring=False)


@pytest.mark.mariadb
def test_the_way_back_refuses_to_merge_users_and_changes_nothing(mariadb_fresh: Engine) -> None:
    """With `alice` and `ALICE` both holding memory, downgrading below 0004 would fold them
    into one key: it fails with a clear reason before any change, and the schema stays at 0004
    with both users' rows. (Later revisions are stepped down first: their downgrades run
    before 0004's check, and cannot know how far the downgrade will go.)"""
    engine = mariadb_fresh
    upgrade(engine)
    service = MemoryService(engine)
    service.commit_operations("alice", add("user", "Fact of alice."))
    service.commit_operations("ALICE", add("user", "Fact of ALICE."))
    migrate(engine, NAMESPACED, down=True)
    at_namespaced = tables(engine)
    with pytest.raises(RuntimeError, match="differ only in case, accents or trailing spaces"):
        migrate(engine, PREVIOUS, down=True)
    assert current_revision(engine) == NAMESPACED
    assert tables(engine) == at_namespaced
    assert {"agent_memory", VERSION_TABLE} <= at_namespaced
    assert read_before_expiries(engine, "alice").user == ("Fact of alice.",)
    assert read_before_expiries(engine, "ALICE").user == ("Fact of ALICE.",)


@pytest.mark.mariadb
def test_the_way_back_refuses_to_truncate_long_messages(mariadb_fresh: Engine) -> None:
    """A message longer than the previous TEXT column (65,535 bytes) blocks the downgrade
    before any change, instead of failing half-way through non-transactional DDL."""
    engine = mariadb_fresh
    upgrade(engine)
    long_message = "\U0001f600" * 20_000  # 80,000 bytes
    with engine.begin() as connection:
        conversations.create(connection, CONVERSATION, "alice", "Long")
        conversations.add_message(connection, CONVERSATION, "t", "user", long_message, "complete")
    migrate(engine, NAMESPACED, down=True)  # later revisions first (see the test above)
    with pytest.raises(RuntimeError, match="longer than the previous schema's TEXT"):
        migrate(engine, PREVIOUS, down=True)
    assert current_revision(engine) == NAMESPACED
    with engine.connect() as connection:  # the columns of this revision, not of head
        stored = connection.execute(
            select(conversation_messages.c.content).where(
                conversation_messages.c.conversation_id == CONVERSATION
            )
        ).scalars()
        assert list(stored) == [long_message]
