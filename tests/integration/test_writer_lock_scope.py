"""The user's writer lock belongs to one database: two deployments on one server (staging and
production, or two test runs) with a user of the same subject never wait on each other. On
MariaDB named locks are server-wide, so the database is part of the lock's name; PostgreSQL's
advisory locks are per database already."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from app.db.engine import DatabaseLimits, build_engine
from app.db.writers import WriterLockTimeoutError
from app.memory.unit_of_work import unit_of_work
from tests.support.databases import mariadb_database, migrated_engine, postgres_database

DATABASES: dict[str, Callable[[], AbstractContextManager[str]]] = {
    "postgres": postgres_database,
    "mariadb": mariadb_database,
}


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def two_databases(request: pytest.FixtureRequest) -> Iterator[tuple[Engine, Engine]]:
    """Two migrated databases on one server, each behind an engine whose lock wait is 1 s."""
    limits = DatabaseLimits(lock_timeout_seconds=1)
    with DATABASES[request.param]() as first, DATABASES[request.param]() as second:
        engines = []
        for url in (first, second):
            migrated_engine(url).dispose()
            engines.append(build_engine(url, limits))
        try:
            yield engines[0], engines[1]
        finally:
            for engine in engines:
                engine.dispose()


def test_one_databases_writer_never_waits_on_anothers(
    two_databases: tuple[Engine, Engine],
) -> None:
    staging, production = two_databases
    with unit_of_work(staging, "alice", "test"), unit_of_work(production, "alice", "test"):
        pass  # both held at once: neither timed out waiting for the other
    # The same database: the second writer waits for the first, then times out.
    with (
        pytest.raises((WriterLockTimeoutError, OperationalError)),
        unit_of_work(staging, "alice", "test"),
        unit_of_work(staging, "alice", "test"),
    ):
        pass
