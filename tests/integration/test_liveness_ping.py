"""The pool's liveness ping on PostgreSQL and MariaDB (`app/db/guard.py`): a connection that sat
idle is pinged at checkout and, found dead, replaced with the rest of the pool before anyone
uses it; one checked in within `PING_AFTER_IDLE_SECONDS` is handed on without a ping, and if it
died meanwhile, its first statement fails as a disconnect and the next checkout gets a fresh
connection. A pool of one connection makes every checkout the same record."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from app.db import guard
from app.db.engine import DatabaseLimits, build_engine

SESSION_ID = {"postgresql": "SELECT pg_backend_pid()", "mysql": "SELECT CONNECTION_ID()"}


@pytest.fixture
def one_connection(server_url: str) -> Iterator[Engine]:
    engine = build_engine(server_url, DatabaseLimits(pool_size=1, pool_max_overflow=0))
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.fixture
def pings(one_connection: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the dialect's pings on the engine."""
    counted: list[int] = []
    dialect = one_connection.dialect
    original = dialect.do_ping

    def counting(dbapi_connection: object) -> bool:
        counted.append(1)
        return original(dbapi_connection)

    monkeypatch.setattr(dialect, "do_ping", counting)
    return counted


def session_id(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text(SESSION_ID[engine.dialect.name])).scalar_one())


def kill(server_url: str, engine: Engine, session: int) -> None:
    """End one session from another connection, as a failover or an operator would."""
    killer = build_engine(server_url)
    try:
        with killer.connect() as connection:
            if engine.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_terminate_backend(:id)"), {"id": session})
            else:
                connection.exec_driver_sql(f"KILL {int(session)}")
    finally:
        killer.dispose()


@pytest.mark.parametrize(
    ("window", "pinged"),
    [(3600.0, 0), (0.0, 3)],
    ids=["used-within-the-window-no-ping", "idle-pinged-at-each-checkout"],
)
def test_a_checkout_pings_only_a_connection_idle_past_the_window(
    one_connection: Engine,
    pings: list[int],
    monkeypatch: pytest.MonkeyPatch,
    window: float,
    pinged: int,
) -> None:
    monkeypatch.setattr(guard, "PING_AFTER_IDLE_SECONDS", window)
    first = session_id(one_connection)  # a fresh connection: never pinged
    assert [session_id(one_connection) for _ in range(3)] == [first] * 3
    assert len(pings) == pinged


def test_an_idle_connection_found_dead_is_replaced_before_use(
    server_url: str, one_connection: Engine, pings: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guard, "PING_AFTER_IDLE_SECONDS", 0.0)
    before = session_id(one_connection)
    kill(server_url, one_connection, before)
    after = session_id(one_connection)  # the checkout's ping failed; a new connection served
    assert after != before
    assert pings  # the ping is what found it


def test_a_recently_used_connection_that_died_fails_once_then_the_pool_reconnects(
    server_url: str, one_connection: Engine, pings: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(guard, "PING_AFTER_IDLE_SECONDS", 3600.0)
    before = session_id(one_connection)
    kill(server_url, one_connection, before)
    with pytest.raises(DBAPIError) as failed:
        session_id(one_connection)
    assert failed.value.connection_invalidated  # a disconnect, not some other error
    after = session_id(one_connection)
    assert after != before
    assert pings == []
