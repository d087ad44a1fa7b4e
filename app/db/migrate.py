"""Alembic, driven from code: migrate to head, report whether a database is at head, and keep
this project's revision in its own version table.

The revision lives in `amem_alembic_version`, never in Alembic's default `alembic_version`,
which another application sharing the database may own. Releases before the namespaced schema
(revisions 0001-0003) kept it in `alembic_version`: a database at one of those revisions is
recognised there (only when that table holds exactly that one revision and the tables the
revision created exist), adopted before upgrading, and handed back after a downgrade to one
of them, so that the code of that release finds it where it looks.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    String,
    Table,
    delete,
    insert,
    inspect,
    select,
)

from app.db.schema import PREFIX, is_search_object, metadata
from app.db.writers import maintenance

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"

VERSION_TABLE = f"{PREFIX}alembic_version"
LEGACY_VERSION_TABLE = "alembic_version"
# The releases that recorded their revision in `alembic_version`, with the tables each had.
LEGACY_REVISIONS: Mapping[str, frozenset[str]] = {
    "0001": frozenset({"agent_memory"}),
    "0002": frozenset({"agent_memory", "feature_flags"}),
    "0003": frozenset({"agent_memory", "feature_flags", "conversations", "conversation_messages"}),
}


def owns_table(name: str | None) -> bool:
    """Whether a table is this project's (autogenerate ignores everything else in the database)."""
    return name is not None and (name in metadata.tables or name.startswith(PREFIX))


def _include_name(name: str | None, type_: str, _parents: Mapping[str, Any]) -> bool:
    if is_search_object(name):
        return False  # each dialect's own search objects, outside the metadata (revision 0006)
    return owns_table(name) if type_ == "table" else True


# The options every Alembic context of this project is configured with (env.py and the checks).
CONTEXT_OPTIONS: dict[str, Any] = {
    "version_table": VERSION_TABLE,
    "compare_type": True,
    "include_name": _include_name,
}


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(engine: Engine) -> None:
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    # A migration may rewrite memory state (a data migration): it runs with no user writing.
    with engine.begin() as connection, maintenance(connection):
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(engine: Engine) -> str | None:
    """The database's revision: from our version table, else from a pre-namespace release's."""
    with engine.connect() as connection:
        return revision_of(connection)


def revision_of(connection: Connection) -> str | None:
    current = _versions(connection, VERSION_TABLE)
    if current:
        return MigrationContext.configure(
            connection, opts={"version_table": VERSION_TABLE}
        ).get_current_revision()
    return legacy_revision(connection)


# -- the pre-namespace version table ----------------------------------------------------------


def _version_table(name: str) -> Table:
    # Alembic's own layout of a version table.
    return Table(name, MetaData(), Column("version_num", String(32), primary_key=True))


def _versions(connection: Connection, name: str) -> list[str]:
    if not inspect(connection).has_table(name):
        return []
    table = _version_table(name)
    return [str(value) for value in connection.execute(select(table.c.version_num)).scalars()]


def legacy_revision(connection: Connection) -> str | None:
    """Our revision in `alembic_version`, or None when that table is absent or not ours."""
    versions = _versions(connection, LEGACY_VERSION_TABLE)
    if len(versions) != 1 or versions[0] not in LEGACY_REVISIONS:
        return None
    tables = set(inspect(connection).get_table_names())
    return versions[0] if LEGACY_REVISIONS[versions[0]] <= tables else None


def adopt_legacy_version(connection: Connection) -> None:
    """Before migrating: move our revision from `alembic_version` into our own table."""
    if _versions(connection, VERSION_TABLE):
        return
    revision = legacy_revision(connection)
    if revision is None:
        return
    _move(connection, revision, LEGACY_VERSION_TABLE, VERSION_TABLE)


def restore_legacy_version(connection: Connection) -> None:
    """After migrating: a database left at a pre-namespace revision keeps it where that
    release reads it, unless `alembic_version` already belongs to another application."""
    versions = _versions(connection, VERSION_TABLE)
    if len(versions) != 1 or versions[0] not in LEGACY_REVISIONS:
        return
    if _versions(connection, LEGACY_VERSION_TABLE):
        return
    _move(connection, versions[0], VERSION_TABLE, LEGACY_VERSION_TABLE)


def _move(connection: Connection, revision: str, source: str, target: str) -> None:
    target_table, source_table = _version_table(target), _version_table(source)
    target_table.create(connection, checkfirst=True)
    connection.execute(insert(target_table).values(version_num=revision))
    connection.execute(delete(source_table).where(source_table.c.version_num == revision))
    if not _versions(connection, source):
        source_table.drop(connection)
