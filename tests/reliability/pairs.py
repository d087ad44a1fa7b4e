"""Pair writes under database faults: what the fault suites of every engine share.

A pair is the two-entry batch of `tests.reliability.models` (one `user` entry, one `memory`
entry), written by a turn or by the memory API. Stored, it is stored whole: `pair_stored` fails
on half a pair, so a partial commit cannot pass for either outcome.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable

import httpx
from sqlalchemy import Engine

from tests.reliability.models import pair_entries, pair_message
from tests.reliability.support import TurnOutcome, run_turn
from tests.support.databases import stored
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for


def pair_turn(url: str, user: str, key: str) -> TurnOutcome:
    async def go() -> TurnOutcome:
        async with httpx.AsyncClient(timeout=60) as client:
            return await run_turn(client, url, dev_auth(user), pair_message(key))

    return asyncio.run(go())


def pair_stored(engine: Engine, user: str, key: str) -> bool:
    """Whether the pair is stored, failing on half a pair (a partial commit)."""
    user_entry, memory_entry = pair_entries(key)
    snapshot = stored(engine, user)
    has_user, has_memory = user_entry in snapshot.user, memory_entry in snapshot.memory
    assert has_user == has_memory, f"partial commit of pair {key}: {snapshot}"
    return has_user


def assert_recovered(url: str, engine: Engine, user: str, key: str) -> None:
    """Without a restart: ready again, and a new turn reads memory and commits."""
    wait_for(
        lambda: httpx.get(f"{url}/readyz", timeout=10).status_code == 200,
        "readiness after the fault was removed",
    )
    outcome = pair_turn(url, user, key)
    assert outcome.memory_status == "available" and outcome.committed, outcome
    assert pair_stored(engine, user, key)


async def api_pair(client: httpx.AsyncClient, url: str, user: str, key: str) -> int:
    """The pair written through the memory API in one request: its status code."""
    user_entry, memory_entry = pair_entries(key)
    response = await client.post(
        f"{url}/v1/memory/operations",
        headers=dev_auth(user),
        json={
            "operations": [
                {"target": "user", "action": "add", "content": user_entry},
                {"target": "memory", "action": "add", "content": memory_entry},
            ]
        },
    )
    return response.status_code


async def api_pair_once(url: str, user: str, key: str) -> int:
    async with httpx.AsyncClient(timeout=30) as client:
        return await api_pair(client, url, user, key)


def pairs_while_killed(
    url: str,
    engine: Engine,
    kill: Callable[[], int],
    *,
    pacing: float,
    wanted_kills: int = 1,
    max_rounds: int = 1,
) -> tuple[int, Counter[str]]:
    """Turns and API writes of pairs, 60 of each per round on six users, while another thread
    calls `kill` (which returns how many it hit) every `pacing` seconds; rounds go on until
    `wanted_kills` were hit or `max_rounds` ran. Then, for every turn and write: the turn
    answered or declared its failure, a write answered 200 or 503, and a pair is stored exactly
    when its response said it was committed. Returns the kills and the outcomes seen."""
    kills = 0
    stop = threading.Event()

    def killer() -> None:
        nonlocal kills
        while not stop.is_set():
            kills += kill()
            stop.wait(pacing)  # pacing of the fault injection, not a wait on an outcome

    turns: dict[str, tuple[str, TurnOutcome]] = {}
    writes: dict[str, tuple[str, int]] = {}

    async def load(round_: int) -> None:
        gate = asyncio.Semaphore(8)
        async with httpx.AsyncClient(timeout=60) as client:

            async def turn(n: int) -> None:
                user, key = f"kill-{round_}-{n % 6}", f"kt{round_}-{n}"
                async with gate:
                    turns[key] = (
                        user,
                        await run_turn(client, url, dev_auth(user), pair_message(key)),
                    )

            async def write(n: int) -> None:
                user, key = f"kill-{round_}-{n % 6}", f"kw{round_}-{n}"
                async with gate:
                    writes[key] = (user, await api_pair(client, url, user, key))

            async with asyncio.TaskGroup() as tg:
                for n in range(60):
                    tg.create_task(turn(n))
                    tg.create_task(write(n))

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        for round_ in range(max_rounds):
            asyncio.run(load(round_))
            if kills >= wanted_kills:
                break
    finally:
        stop.set()
        thread.join(timeout=10)

    seen: Counter[str] = Counter()
    for key, (user, outcome) in turns.items():
        # The answer was streamed; when even its retried write was killed, the turn says so
        # (`transcript_unavailable`) instead of `done`: a clean, declared failure.
        assert outcome.answered_or_declared, (key, outcome)
        assert outcome.memory in ("committed", "failed", "none"), (key, outcome)
        assert pair_stored(engine, user, key) == outcome.committed, (key, outcome)
        seen[f"turn:{outcome.memory_status}:{outcome.memory}"] += 1
    for key, (user, status) in writes.items():
        assert status in (200, 503), (key, status)
        assert pair_stored(engine, user, key) == (status == 200), (key, status)
        seen[f"api:{status}"] += 1
    return kills, seen
