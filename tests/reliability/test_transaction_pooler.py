"""Behind PgBouncer in transaction mode (Debian's defaults otherwise), with DB_POOLER=transaction,
the service works under load as it does directly: every turn commits its memory write and keeps
its transcript, the search finds them, and no server-side prepared statement outlives its
transaction (the pooler hands each transaction another server session, so one would surface as
`prepared statement "_pg3_0" does not exist` and fail the turn).
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy import Engine, func, select

from app.db.schema import conversation_messages, memory_changes
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
