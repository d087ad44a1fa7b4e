"""Shared fixtures: real databases, network guard. See tests/support for the helpers.

Every test runs beside others (scripts/test: two pytest-xdist workers) and beside whatever else
uses the machine's PostgreSQL and MariaDB: a test that stops a server or sets a global variable
does it on a server of its own (tests/unit/test_serial_marks.py holds the suite to that).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from tests.support.databases import mariadb_database, migrated_engine, postgres_database, wipe
from tests.support.mariadb_servers import private_mariadb
from tests.support.postgres_servers import pgbouncer
from tests.support.server import settle


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test's call ends once the test servers have finished its requests, inside its output
    capture (trylast: the innermost wrapper), so their access lines are part of its output
    rather than printed between tests."""
    try:
        return (yield)
    finally:
        settle()


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any test that reaches a host outside loopback (a real model, a real IdP...)."""
    original = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0]
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = host == "localhost"
            if not loopback:
                raise AssertionError(f"test tried to reach {host}: only loopback is allowed")
        return original(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    with postgres_database() as url:
        migrated_engine(url).dispose()
        yield url


@pytest.fixture(scope="session")
def pgbouncer_url(postgres_url: str) -> Iterator[str]:
    """The session's PostgreSQL database through a PgBouncer in transaction mode (Debian's
    defaults otherwise); engines on it take DB_POOLER=transaction (`pooler_for`)."""
    with pgbouncer("127.0.0.1", 5432) as bouncer:
        yield bouncer.url_for(postgres_url)


@pytest.fixture(scope="session")
def mariadb_url() -> Iterator[str]:
    with mariadb_database() as url:
        migrated_engine(url).dispose()
        yield url


@pytest.fixture(scope="session")
def own_mariadb_url() -> Iterator[str]:
    """A database on a MariaDB server this session started (tests/support/mariadb_servers.py),
    for the tests that set the server's global variables: the shared server keeps its own."""
    with private_mariadb() as admin_url, mariadb_database(admin_url) as url:
        migrated_engine(url).dispose()
        yield url


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("sqlite")) / "test.db"
    url = f"sqlite:///{path}"
    migrated_engine(url).dispose()
    return url


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def db_url(request: pytest.FixtureRequest) -> str:
    """Each database-facing test runs on SQLite, PostgreSQL and MariaDB (a test marked
    `own_mariadb` on a MariaDB server of the session's own)."""
    name = str(request.param)
    if name == "mariadb" and request.node.get_closest_marker("own_mariadb") is not None:
        name = "own_mariadb"
    return str(request.getfixturevalue(f"{name}_url"))


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """A migrated engine on an emptied database."""
    with _fresh_engine(db_url) as engine:
        yield engine


@contextmanager
def _fresh_engine(url: str) -> Iterator[Engine]:
    engine = migrated_engine(url)
    wipe(engine)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def db(sqlite_url: str) -> Iterator[Engine]:
    """A migrated, emptied SQLite engine (the embedded default)."""
    with _fresh_engine(sqlite_url) as engine:
        yield engine


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def server_url(request: pytest.FixtureRequest) -> str:
    """Each test of row locks, lock waits or server faults runs on PostgreSQL and MariaDB."""
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def server_db(server_url: str) -> Iterator[Engine]:
    """A migrated, emptied engine on each server (PostgreSQL, MariaDB)."""
    with _fresh_engine(server_url) as engine:
        yield engine


@pytest.fixture
def pg(postgres_url: str) -> Iterator[Engine]:
    """A migrated, emptied PostgreSQL engine."""
    with _fresh_engine(postgres_url) as engine:
        yield engine
