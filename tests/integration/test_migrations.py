"""Alembic migrations on fresh SQLite, PostgreSQL and MariaDB databases: idempotent upgrade,
full downgrade and re-upgrade, the design's agent_memory table, and no drift from app.db.schema."""

from __future__ import annotations

import re

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import DBAPIError

from app.db.migrate import (
    CONTEXT_OPTIONS,
    MIGRATIONS,
    alembic_config,
    current_revision,
    head_revision,
    upgrade,
)
from app.db.schema import metadata
from app.db.writers import maintenance
from tests.support.databases import migrate
from tests.support.memory_db import insert_row, rows

APP_TABLES = set(metadata.tables)
# The names the tables had before the namespaced schema (revision 0004).
LEGACY_TABLES = {"feature_flags", "conversations", "conversation_messages"}


def downgrade(engine: Engine, revision: str = "base") -> None:
    migrate(engine, revision, down=True)


def app_tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) & (APP_TABLES | LEGACY_TABLES)


def test_upgrade_to_head_is_idempotent(fresh_engine: Engine) -> None:
    """A fresh database reaches head; upgrading again changes nothing and keeps the data."""
    assert current_revision(fresh_engine) is None
    assert current_revision(fresh_engine) != head_revision()
    upgrade(fresh_engine)
    assert current_revision(fresh_engine) == head_revision()
    assert app_tables(fresh_engine) == APP_TABLES
    insert_row(fresh_engine, "alice", "user", "Survives a second upgrade.")
    upgrade(fresh_engine)
    assert current_revision(fresh_engine) == head_revision()
    assert rows(fresh_engine, "alice") == {"user": ("Survives a second upgrade.", 1)}


def test_downgrade_to_base_and_upgrade_again(fresh_engine: Engine) -> None:
    """Every migration is reversible: base removes all application tables, and the chain
    applies again cleanly afterwards."""
    upgrade(fresh_engine)
    downgrade(fresh_engine)
    assert current_revision(fresh_engine) is None
    assert app_tables(fresh_engine) == set()
    upgrade(fresh_engine)
    assert current_revision(fresh_engine) == head_revision()
    assert app_tables(fresh_engine) == APP_TABLES


def test_each_step_downgrades_and_upgrades(fresh_engine: Engine) -> None:
    """Walking down one revision at a time and back up reaches head at every step."""
    upgrade(fresh_engine)
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    revisions = [rev.revision for rev in script.walk_revisions()]  # head first
    for revision in revisions[1:]:
        downgrade(fresh_engine, revision)
        assert current_revision(fresh_engine) == revision
    upgrade(fresh_engine)
    assert current_revision(fresh_engine) == head_revision()


def test_upgrade_through_the_configured_url(fresh_engine: Engine) -> None:
    """Alembic's own entry point (env.py building its engine from the URL) migrates too."""
    command.upgrade(alembic_config(fresh_engine.url.render_as_string(hide_password=False)), "head")
    assert current_revision(fresh_engine) == head_revision()


def test_migrated_schema_matches_the_table_definitions(fresh_engine: Engine) -> None:
    """No drift: autogenerate finds nothing between the migrations and app.db.schema."""
    upgrade(fresh_engine)
    with fresh_engine.connect() as connection:
        context = MigrationContext.configure(connection, opts=CONTEXT_OPTIONS)
        assert compare_metadata(context, metadata) == []


def test_agent_memory_is_the_design_table(fresh_engine: Engine) -> None:
    """Primary key (user_id, memory_type), schema_version defaulting to 1, timestamps set by
    the database, and memory_type limited to 'user' and 'memory'."""
    upgrade(fresh_engine)
    inspector = inspect(fresh_engine)
    assert inspector.get_pk_constraint("agent_memory")["constrained_columns"] == [
        "user_id",
        "memory_type",
    ]
    columns = {column["name"]: column for column in inspector.get_columns("agent_memory")}
    assert set(columns) == {
        "user_id",
        "memory_type",
        "content",
        "schema_version",
        "created_at",
        "updated_at",
    }
    assert not any(column["nullable"] for column in columns.values())
    assert columns["user_id"]["type"].length == 128
    with fresh_engine.begin() as connection, maintenance(connection):
        connection.execute(
            text(
                "INSERT INTO agent_memory (user_id, memory_type, content) VALUES ('a', 'user', 'x')"
            )
        )
        version, created = connection.execute(
            text("SELECT schema_version, created_at FROM agent_memory WHERE user_id = 'a'")
        ).one()
    assert version == 1 and created is not None
    with pytest.raises(DBAPIError), fresh_engine.begin() as connection, maintenance(connection):
        connection.execute(
            text(
                "INSERT INTO agent_memory (user_id, memory_type, content) "
                "VALUES ('a', 'other', 'x')"
            )
        )


def test_migrations_are_named_by_date_and_form_one_chain() -> None:
    """Files are named YYYY-MM-DD_<rev>_<slug>.py and the revisions form a single line."""
    files = sorted(path.name for path in (MIGRATIONS / "versions").glob("*.py"))
    assert files
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}_\w+_\w+\.py", name) for name in files), files
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1
    assert len(list(script.walk_revisions())) == len(files)
