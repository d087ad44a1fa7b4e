"""Behind PgBouncer in transaction mode (Debian's defaults otherwise), with DB_POOLER=transaction,
the service works under load as it does directly: every turn commits its memory write and keeps
its transcript, the search finds them, and no server-side prepared statement outlives its
transaction (the pooler hands each transaction another server session, so one would surface as
`prepared statement "_pg3_0" does not exist` and fail the turn).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime

import httpx
import pytest
from sqlalchemy import Connection, Engine, func, insert, select, text
from sqlalchemy.exc import DBAPIError

from app.db.engine import DatabaseLimits, build_engine
from app.db.schema import conversation_messages, feature_flags, memory_changes
from app.main import create_app
from tests.support.apps import api_settings
from tests.support.databases import migrated_engine, wipe
from tests.support.postgres_servers import pooler_for
from tests.support.server import live_server
from tests.support.sse import aiter_events
from tests.support.tokens import dev_auth

pytestmark = pytest.mark.postgres

USERS = 16
TURNS = 6  # per user: above psycopg's prepare threshold (5) for every statement of a turn


async def user_turns(client: httpx.AsyncClient, user: int) -> list[tuple[str, str | None]]:
    """(last event, memory outcome) of each of the user's turns, in order."""
    outcomes = []
    for n in range(TURNS):
        body = {"message": f"remember that I like item u{user}n{n}"}
        headers = dev_auth(f"pooled-{user}")
        memory: str | None = None
        last = "cut"
        async with client.stream("POST", "/v1/chat", json=body, headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            async for event in aiter_events(response):
                if event.event == "memory":
                    memory = event.data.get("outcome")
                elif event.event in ("done", "error"):
                    last = event.event
        outcomes.append((last, memory))
    return outcomes


async def load(url: str) -> list[tuple[str, str | None]]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        per_user = await asyncio.gather(*(user_turns(client, user) for user in range(USERS)))
    return [outcome for outcomes in per_user for outcome in outcomes]


def test_every_turn_commits_through_a_transaction_pooler(pgbouncer_url: str) -> None:
    """16 users x 6 turns through PgBouncer: zero failed turns or memory writes, every
    transcript and history row stored, and the search answers."""
    assert pooler_for(pgbouncer_url) == "transaction"
    engine: Engine = migrated_engine(pgbouncer_url)
    wipe(engine)
    settings = api_settings(pgbouncer_url, db_pooler="transaction", db_pool_size=8)
    with live_server(create_app(settings)) as url:
        outcomes = asyncio.run(load(url))
        search = httpx.get(
            f"{url}/v1/conversations/search",
            params={"q": "item"},
            headers=dev_auth("pooled-0"),
            timeout=30,
        )
    assert outcomes == [("done", "committed")] * (USERS * TURNS)
    assert search.status_code == 200 and search.json()["results"]
    with engine.connect() as connection:
        changes = connection.execute(select(func.count()).select_from(memory_changes)).scalar()
        messages = connection.execute(
            select(func.count()).select_from(conversation_messages)
        ).scalar()
    engine.dispose()
    assert changes == USERS * TURNS
    assert messages == 2 * USERS * TURNS


def test_every_transaction_through_the_pooler_is_one_and_bounded(pgbouncer_url: str) -> None:
    """Each transaction starts with its BEGIN and its bounds in one round trip, the driver
    connection resting in autocommit between transactions. Whatever the kind of transaction
    (the default level, a memory write's own level, one after such a write on the same pooled
    connection, one rolled back after a failed statement), its statements share one snapshot
    of time (one transaction, not autocommit statements), its bounds are the configured ones,
    and a rollback leaves nothing behind."""
    limits = DatabaseLimits(pooler="transaction", pool_size=1, pool_max_overflow=0)
    limits = replace(limits, lock_timeout_seconds=3.0, statement_timeout_seconds=7.0)
    engine = build_engine(pgbouncer_url, limits)
    probe = text(
        "SELECT now(), current_setting('lock_timeout'), current_setting('statement_timeout'), "
        "current_setting('transaction_isolation')"
    )

    def inside(connection: Connection) -> tuple[str, str, str]:
        first = connection.execute(probe).one()
        time.sleep(0.02)
        second = connection.execute(probe).one()
        assert first[0] == second[0], "two statements of one transaction saw two start times"
        return first[1], first[2], first[3]

    def resting(connection: Connection) -> bool:
        return bool(connection.connection.driver_connection.autocommit)  # type: ignore[union-attr]

    marker = f"pooled-rollback-{uuid.uuid4().hex}"
    try:
        with engine.connect() as connection, connection.begin():
            assert inside(connection) == ("3s", "7s", "read committed")
        with engine.connect() as connection:
            connection = connection.execution_options(isolation_level="SERIALIZABLE")
            with connection.begin():
                assert inside(connection) == ("3s", "7s", "serializable")
        with engine.connect() as connection:
            assert resting(connection)
            with connection.begin():
                assert inside(connection) == ("3s", "7s", "read committed")
            with pytest.raises(DBAPIError), connection.begin():
                connection.execute(
                    insert(feature_flags).values(
                        name=marker, enabled=True, updated_at=datetime.now(UTC)
                    )
                )
                connection.execute(text("SELECT 1 / 0"))
            assert resting(connection)
            with connection.begin():
                assert inside(connection) == ("3s", "7s", "read committed")
                found = connection.execute(
                    select(func.count()).where(feature_flags.c.name == marker)
                ).scalar_one()
                assert found == 0
    finally:
        engine.dispose()
