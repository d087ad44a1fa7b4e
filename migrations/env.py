"""Alembic environment: uses the connection handed in by app.db.migrate, or the configured URL.

The revision is kept in this project's own version table (app.db.migrate.VERSION_TABLE); a
database still recording it in `alembic_version` from an earlier release is adopted first.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from app.db.engine import build_engine
from app.db.migrate import CONTEXT_OPTIONS, adopt_legacy_version, restore_legacy_version
from app.db.schema import metadata

config = context.config


def run(connection: Connection) -> None:
    adopt_legacy_version(connection)
    context.configure(connection=connection, target_metadata=metadata, **CONTEXT_OPTIONS)
    with context.begin_transaction():
        context.run_migrations()
    restore_legacy_version(connection)


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run(connection)
        return
    engine = build_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as own:
        run(own)
    engine.dispose()


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata, **CONTEXT_OPTIONS
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    run_online()
