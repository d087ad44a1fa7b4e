"""Replicas are safe: two service processes on one database (PostgreSQL, then MariaDB) lose no
committed change and invent none, under concurrent turns and memory API writes for the same few
users."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from tests.reliability.support import ServiceProcess, TurnOutcome, run_turn, service_process
from tests.support.databases import (
    mariadb_database,
    migrated_engine,
    postgres_database,
    stored,
)
from tests.support.tokens import dev_auth

USERS = ("lu-a", "lu-b", "lu-c")
TURN_FACTS = 24  # per user, through POST /v1/chat ("remember that ...")
API_FACTS = 16  # per user, through POST /v1/memory/operations
REMOVED_EVERY = 4  # every 4th committed fact is then removed (by a turn or by the API)
CONCURRENCY = 12
# The test is about lost updates, not the start deadline (tests/reliability/test_database_hangs.py
# covers that): on a loaded CI machine a memory read past MEMORY_READ_TIMEOUT_SECONDS would make
# a turn's memory `unavailable` (a flag read past FLAG_READ_TIMEOUT_SECONDS likewise) and the
# turn could not stage its fact. The replicas give both far longer than they ever need.
START_DEADLINE = {"MEMORY_READ_TIMEOUT_SECONDS": "30", "FLAG_READ_TIMEOUT_SECONDS": "30"}


@dataclass
class Fact:
    """One fact and what the service said about it; the expected state follows from these."""

    user: str
    target: str
    entry: str  # exactly as stored (the offline model's sentence, or the API's content)
    via: str  # "turn" or "api"
    added: bool = False
    removed: bool = False
    remove_attempted: bool = False

    @property
    def expected(self) -> bool:
        return self.added and not self.removed


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ],
)
def database(request: pytest.FixtureRequest) -> Iterator[tuple[str, Engine]]:
    create = postgres_database if request.param == "postgres" else mariadb_database
    with create() as url:
        engine = migrated_engine(url)
        yield url, engine
        engine.dispose()


@pytest.fixture(scope="module")
def replicas(
    database: tuple[str, Engine], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServiceProcess, ServiceProcess]]:
    url, _engine = database
    logs = Path(tmp_path_factory.mktemp("replicas"))
    with (
        service_process(url, logs, name="replica-1", **START_DEADLINE) as first,
        service_process(url, logs, name="replica-2", **START_DEADLINE) as second,
    ):
        yield first, second


def facts_for(user: str) -> list[Fact]:
    tag = user.removeprefix("lu-")
    facts = [
        # The offline model turns "remember that fact a7 is kiwi" into this memory entry.
        Fact(user, "memory", f"Fact {tag}{n} is kiwi.", "turn")
        for n in range(TURN_FACTS)
    ]
    facts += [
        Fact(user, "memory" if n % 2 else "user", f"Api fact {tag}{n} is plum.", "api")
        for n in range(API_FACTS)
    ]
    return facts


async def add(client: httpx.AsyncClient, url: str, fact: Fact) -> None:
    headers = dev_auth(fact.user)
    if fact.via == "turn":
        sentence = fact.entry.removesuffix(".")
        outcome = await run_turn(
            client, url, headers, f"remember that {sentence[0].lower()}{sentence[1:]}"
        )
        check_answered(outcome)
        fact.added = outcome.committed
        return
    response = await client.post(
        f"{url}/v1/memory/operations",
        headers=headers,
        json={"operations": [{"target": fact.target, "action": "add", "content": fact.entry}]},
    )
    assert response.status_code in (200, 503), (response.status_code, response.text)
    fact.added = response.status_code == 200


async def remove(client: httpx.AsyncClient, url: str, fact: Fact, by_turn: bool) -> None:
    fact.remove_attempted = True
    headers = dev_auth(fact.user)
    if by_turn:
        outcome = await run_turn(
            client, url, headers, f"forget that {fact.entry.removesuffix('.').lower()}"
        )
        check_answered(outcome)
        # The fact was committed before this turn began, so the model saw it and staged a remove.
        assert outcome.tool == "staged", outcome
        fact.removed = outcome.committed
        return
    response = await client.post(
        f"{url}/v1/memory/operations",
        headers=headers,
        json={"operations": [{"target": fact.target, "action": "remove", "match": fact.entry}]},
    )
    assert response.status_code in (200, 503), (response.status_code, response.text)
    fact.removed = response.status_code == 200


def check_answered(outcome: TurnOutcome) -> None:
    assert outcome.answered, outcome
    assert outcome.memory_status == "available", outcome
    assert outcome.memory in ("committed", "failed"), outcome


async def drive(replicas: tuple[ServiceProcess, ...], facts: list[Fact]) -> None:
    rng = random.Random(7)
    order = list(range(len(facts)))
    rng.shuffle(order)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def life(position: int, index: int, client: httpx.AsyncClient) -> None:
        fact = facts[index]
        # Requests alternate between the replicas, so one fact's add and remove often land on
        # different processes.
        first = replicas[position % len(replicas)].url
        other = replicas[(position + 1) % len(replicas)].url
        async with gate:
            await add(client, first, fact)
        if fact.added and position % REMOVED_EVERY == 0:
            async with gate:
                await remove(client, other, fact, by_turn=position % (2 * REMOVED_EVERY) == 0)

    limits = httpx.Limits(max_connections=CONCURRENCY * 2)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client, asyncio.TaskGroup() as tg:
        for position, index in enumerate(order):
            tg.create_task(life(position, index, client))


def test_two_replicas_lose_no_committed_change_and_invent_none(
    database: tuple[str, Engine], replicas: tuple[ServiceProcess, ServiceProcess]
) -> None:
    """Every fact a response said was committed (turn `memory: committed`, API 200) is in the
    final state unless a later committed remove took it out, and the final state holds
    nothing else: zero lost updates, zero phantoms, across two uvicorn processes."""
    _url, engine = database
    facts = [fact for user in USERS for fact in facts_for(user)]
    asyncio.run(drive(replicas, facts))

    lost, phantom = [], []
    for user in USERS:
        snapshot = stored(engine, user)
        for target in ("user", "memory"):
            actual = set(snapshot.entries(target))  # type: ignore[arg-type]
            expected = {
                f.entry for f in facts if f.user == user and f.target == target and f.expected
            }
            lost += sorted(expected - actual)
            phantom += sorted(actual - expected)
            assert len(actual) == len(snapshot.entries(target))  # type: ignore[arg-type]

    counts = Counter(
        f"{fact.via}:{'added' if fact.added else 'not added'}" for fact in facts
    ) + Counter("removed" for fact in facts if fact.removed)
    print(f"\nlost-update run: {dict(sorted(counts.items()))}")
    assert not lost, f"lost updates: {lost}"
    assert not phantom, f"phantom entries: {phantom}"
    # The run proves something only if the writes went through: nearly all must commit.
    assert sum(fact.added for fact in facts) >= 0.9 * len(facts), counts
    assert sum(fact.removed for fact in facts) >= 0.9 * sum(f.remove_attempted for f in facts)
