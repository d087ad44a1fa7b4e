"""A cancelled non-streamed turn commits nothing, even while its commit waits on a row lock."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import Engine, insert, select

from app.agent.events import TurnEvent
from app.agent.request import TurnRequest, TurnServices
from app.agent.turn import Turn
from app.db.schema import agent_memory
from app.db.writers import maintenance
from app.memory.service import MemoryService
from app.runtime import build_runtime
from tests.support.apps import api_settings
from tests.support.databases import lock_waiters
from tests.support.scripted import ScriptedModel, Text, memory_call
from tests.support.waiting import await_for

DEADLINE_SECONDS = 15.0
STORED = "The user likes tea."


async def test_cancelling_a_turn_blocked_in_its_commit_commits_nothing(
    server_db: Engine, server_url: str
) -> None:
    """Another connection holds the user's row lock; the turn's commit blocks on it; the turn
    task is cancelled. The cancel event reaches the worker, which rolls back once the lock is
    released: the stored memory is unchanged. On PostgreSQL and MariaDB (SQLite has no row
    locks to block on)."""
    with server_db.begin() as connection, maintenance(connection):
        connection.execute(
            insert(agent_memory).values(user_id="carol", memory_type="user", content=STORED)
        )
    model = ScriptedModel(
        [
            memory_call({"target": "user", "action": "add", "content": "The user likes coffee."}),
            Text("Saved."),
        ]
    )
    runtime = build_runtime(api_settings(server_url), model_transport=model.transport())
    holder = server_db.connect()
    holder_transaction = holder.begin()
    try:
        holder.execute(
            select(agent_memory).where(agent_memory.c.user_id == "carol").with_for_update()
        )
        agent = await runtime.agents.chat()
        turn = Turn(
            agent,
            TurnRequest(
                message="remember that I like coffee", user_id="carol", store_transcript=False
            ),
            TurnServices(settings=runtime.settings, memory=runtime.memory, flags=runtime.flags),
        )
        events: list[TurnEvent] = []
        task = asyncio.create_task(turn.run(events.append))

        def commit_is_waiting_on_the_lock() -> bool:
            return lock_waiters(server_db, "%agent_memory%FOR UPDATE%") > 0

        await await_for(commit_is_waiting_on_the_lock, "the commit blocking on the row lock")
        task.cancel()
        await await_for(turn.cancel_event.is_set, "the cancel event being set")
    finally:
        holder_transaction.rollback()  # release the lock: the worker now reaches its checks
        holder.close()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert turn.cancel_event.is_set()
    assert MemoryService(server_db).read("carol").user == (STORED,)
    await runtime.aclose()
    model.assert_done()
