"""Cancellation soak: hundreds of streamed turns whose clients disconnect at random points.

The model holds each turn just before its final chunk until the client opens that turn's gate
(`tests/reliability/models.py`). That makes the design's guarantee exact rather than a matter
of timing: a client that leaves while its gate is closed has left before the commit began, so
nothing of its turn may be stored; a client that saw `memory: committed` must find its batch
stored. Only clients that open the gate and leave at once race the commit; they may land either
way, but never half a batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import httpx
from sqlalchemy import Engine

from app.main import create_app
from app.offline.wire import words
from tests.reliability.models import (
    FINAL_TEXT,
    PairModelTransport,
    pair_entries,
    pair_message,
)
from tests.support.apps import api_settings
from tests.support.databases import stored
from tests.support.gates import Gates
from tests.support.server import live_server
from tests.support.sse import aiter_events
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for

TURNS = 200
USERS = 24
CONCURRENCY = 10
SEED = 20_240_611
DELTAS = len(words(FINAL_TEXT))
DEADLINE_SECONDS = 60.0
# The soak is about cancellation, not the start deadline (tests/reliability/test_database_hangs.py
# covers that): a start that waits past MEMORY_READ_TIMEOUT_SECONDS under a loaded CI machine
# would report no conversation and no memory, and the turn could not be checked. So the soak
# gives the start far longer than it ever needs.
START_DEADLINE_SECONDS = 30.0

# Where the client goes away. The first four leave with the gate closed: before the commit.
BEFORE_COMMIT = ("after_start", "after_tool", "mid_text", "after_last_delta")
KINDS = (*BEFORE_COMMIT, "racing_the_commit", "before_done", "complete")


@dataclass
class Plan:
    key: str
    user: str
    kind: str
    cut_after_delta: int = 0
    events: list[str] = field(default_factory=list)
    conversation_id: str | None = None
    memory: str | None = None
    gate_opened: bool = False


def plans(run: str) -> list[Plan]:
    rng = random.Random(SEED)
    made = []
    for number in range(TURNS):
        kind = rng.choice(KINDS)
        cut = rng.randint(1, DELTAS - 1) if kind == "mid_text" else 0
        made.append(Plan(f"{run}-{number}", f"soak-{run}-{number % USERS}", kind, cut))
    return made


async def play(client: httpx.AsyncClient, url: str, gates: Gates, plan: Plan) -> None:
    """Run one turn and leave at the planned point (leaving the block closes the connection)."""
    deltas = 0
    async with client.stream(
        "POST",
        f"{url}/v1/chat",
        json={"message": pair_message(plan.key)},
        headers=dev_auth(plan.user),
    ) as response:
        assert response.status_code == 200, await response.aread()
        async with contextlib.aclosing(aiter_events(response)) as events:
            async for event in events:
                plan.events.append(event.event)
                if event.event == "start":
                    plan.conversation_id = event.data["conversation_id"]
                    # None only when the start deadline passed (see START_DEADLINE_SECONDS).
                    assert plan.conversation_id is not None, f"turn {plan.key} stored no message"
                    if plan.kind == "after_start":
                        return
                elif event.event == "tool":
                    assert event.data["outcome"] == "staged", event.data
                    if plan.kind == "after_tool":
                        return
                    if plan.kind in ("before_done", "complete"):
                        plan.gate_opened = True
                        gates.release(plan.key)
                elif event.event == "delta":
                    deltas += 1
                    if plan.kind == "mid_text" and deltas == plan.cut_after_delta:
                        return
                    if deltas == DELTAS and plan.kind == "after_last_delta":
                        return
                    if deltas == DELTAS and plan.kind == "racing_the_commit":
                        plan.gate_opened = True
                        gates.release(plan.key)
                        return
                elif event.event == "memory":
                    plan.memory = event.data["outcome"]
                    if plan.kind == "before_done":
                        return
                elif event.event == "error":
                    raise AssertionError(f"turn {plan.key} failed: {event.data}")


def turn_ended(url: str, plan: Plan) -> bool:
    """The turn's own cleanup is done once its assistant message is in the transcript."""
    response = httpx.get(
        f"{url}/v1/conversations/{plan.conversation_id}", headers=dev_auth(plan.user), timeout=10
    )
    assert response.status_code == 200, response.text
    return any(message["role"] == "assistant" for message in response.json()["messages"])


async def soak(url: str, gates: Gates, turns: list[Plan]) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(plan: Plan) -> None:
        async with gate:
            await play(client, url, gates, plan)

    limits = httpx.Limits(max_connections=CONCURRENCY * 2)
    async with httpx.AsyncClient(timeout=30, limits=limits) as client, asyncio.TaskGroup() as tg:
        for plan in turns:
            tg.create_task(one(plan))


def test_cut_turns_commit_nothing_and_committed_turns_are_stored(
    server_db: Engine, server_url: str
) -> None:
    """Over a few hundred turns cut at random points: a turn whose client left before the commit
    began stored nothing; a turn that delivered `memory: committed` is stored; every turn's
    two-operation batch is stored whole or not at all. On PostgreSQL and MariaDB."""
    gates = Gates()
    settings = api_settings(
        server_url,
        turn_timeout_seconds=DEADLINE_SECONDS,
        memory_read_timeout_seconds=START_DEADLINE_SECONDS,
        flag_read_timeout_seconds=START_DEADLINE_SECONDS,
        log_level="WARNING",
    )
    transport = PairModelTransport(gates=gates, delay_seconds=0.002)
    turns = plans(uuid.uuid4().hex[:6])
    with live_server(create_app(settings, model_transport=transport)) as url:
        asyncio.run(soak(url, gates, turns))
        deadline = time.monotonic() + DEADLINE_SECONDS
        pending = list(turns)
        while pending:
            pending = [plan for plan in pending if not turn_ended(url, plan)]
            # Only turns still pending after the deadline fail (a last pass may end late).
            assert not pending or time.monotonic() < deadline, f"{len(pending)} turns never ended"
            if pending:
                time.sleep(0.1)
        # Every turn has ended. Open the gates the cut turns never passed: a turn the server
        # had kept alive behind its client's back would now complete and commit.
        for plan in turns:
            gates.release(plan.key)
        wait_for(lambda: all(turn_ended(url, plan) for plan in turns), "every turn ended")

    outcomes: Counter[str] = Counter()
    for plan in turns:
        user_entry, memory_entry = pair_entries(plan.key)
        snapshot = stored(server_db, plan.user)
        has_user, has_memory = user_entry in snapshot.user, memory_entry in snapshot.memory
        assert has_user == has_memory, f"half a batch stored for {plan}"
        if plan.memory == "committed":
            assert has_user, f"committed but not stored: {plan}"
        if not plan.gate_opened:
            assert plan.kind in BEFORE_COMMIT
            assert not has_user, f"stored although the client left before the commit: {plan}"
            assert plan.memory is None
        if plan.kind in ("before_done", "complete"):
            assert plan.memory == "committed", plan
        if plan.kind == "complete":
            assert plan.events[-1] == "done", plan
        outcomes[f"{plan.kind}:{'stored' if has_user else 'not stored'}"] += 1

    # Turns held at their gate when the client left were cancelled there by the server.
    held_and_left = {p.key for p in turns if not p.gate_opened and p.key in gates.held}
    assert held_and_left <= gates.abandoned
    assert not {p.key for p in turns if not p.gate_opened} & gates.passed
    print(
        f"\ncancellation soak ({TURNS} turns): {dict(sorted(outcomes.items()))}; "
        f"cancelled at the gate: {len(gates.abandoned)}"
    )
    assert all(outcomes[f"{kind}:not stored"] + outcomes[f"{kind}:stored"] for kind in KINDS)
