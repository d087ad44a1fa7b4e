"""Real databases for tests: one private database per test session on each server.

Tests never mock a database. PostgreSQL and MariaDB must be running (the test command starts
them); when one is not, the tests that need it fail with a clear message instead of skipping.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from alembic import command
from sqlalchemy import Engine, create_engine, text

from app.db.engine import DatabaseLimits, build_engine
from app.db.migrate import alembic_config, upgrade
from app.db.schema import metadata
from app.db.writers import maintenance
from app.memory.rules import Snapshot
from app.memory.service import MemoryService
from tests.support.postgres_servers import pooler_for

# The databases every server has from its installation: the tests only create (and drop) a
# private database of their own there, so the servers need nothing made for them by hand.
PG_ADMIN_URL = os.environ.get(
    "TEST_PG_ADMIN_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
MARIADB_ADMIN_URL = os.environ.get(
    "TEST_MARIADB_ADMIN_URL", "mysql+pymysql://root@127.0.0.1:3306/mysql"
)


def _unique_name() -> str:
    return f"amt_{os.getpid()}_{uuid.uuid4().hex[:8]}"


@contextmanager
def postgres_database() -> Iterator[str]:
    name = _unique_name()
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as error:  # pragma: no cover - environment problem, reported loudly
        raise RuntimeError(
            f"could not create a test database through {PG_ADMIN_URL} "
            f"({type(error).__name__}: {error}); scripts/services starts the server when it "
            "is down, TEST_PG_ADMIN_URL names another"
        ) from error
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            )
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


@contextmanager
def mariadb_database(admin_url: str = MARIADB_ADMIN_URL) -> Iterator[str]:
    name = _unique_name()
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    try:
        with admin.connect() as connection:
            # The server's default character set and collation (case- and accent-insensitive
            # on a stock MariaDB): exact identity must come from the schema, not from the
            # database the service happens to be given.
            connection.execute(text(f"CREATE DATABASE `{name}`"))
    except Exception as error:  # pragma: no cover
        raise RuntimeError(
            f"could not create a test database through {admin_url} "
            f"({type(error).__name__}: {error}); scripts/services starts the server when it "
            "is down, TEST_MARIADB_ADMIN_URL names another"
        ) from error
    url = admin_url.rsplit("/", 1)[0] + f"/{name}?charset=utf8mb4"
    try:
        yield url
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()


def lock_waiters(engine: Engine, statement_like: str) -> int:
    """Sessions of this engine's database blocked in a statement LIKE `statement_like` (the
    servers are shared: other databases' sessions do not count).

    PostgreSQL reports the lock wait itself. MariaDB's INNODB_TRX is a cache that is refreshed
    only once it has gone unread for 0.1 s, so a poll can keep it stale for ever; the process
    list is live: a session still running the locking read while the caller holds the lock is
    a session waiting for it.
    """
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            query = (
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query ILIKE :like"
            )
        else:
            query = (
                "SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() "
                "AND ID <> CONNECTION_ID() AND COMMAND = 'Query' AND INFO LIKE :like"
            )
        return int(connection.execute(text(query), {"like": statement_like}).scalar_one())


def writer_lock_statement(engine: Engine) -> str:
    """A LIKE pattern for the statement a writer waiting for the user's writer lock is in
    (app/db/writers.py), for `lock_waiters`."""
    return "%pg_advisory_xact_lock%" if engine.dialect.name == "postgresql" else "%GET_LOCK%"


def migrate(engine: Engine, revision: str, *, down: bool = False) -> None:
    """Alembic up (or down) to `revision` on this engine's database, in one transaction."""
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection, maintenance(connection):
        config.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(config, revision)


def migrated_engine(url: str) -> Engine:
    engine = build_engine(url, DatabaseLimits(pooler=pooler_for(url)))
    upgrade(engine)
    return engine


def wipe(engine: Engine) -> None:
    """Empty every application table (children first), keeping the schema and its version."""
    with engine.begin() as connection, maintenance(connection):
        for table in reversed(metadata.sorted_tables):
            connection.execute(table.delete())


def stored(engine: Engine, user_id: str) -> Snapshot:
    """The user's committed memory, read the way the service reads it."""
    return MemoryService(engine).read(user_id)
