"""Database faults on MariaDB: statements killed mid-transaction under load, connections
killed and the account refused new ones during a run, privileges revoked on `agent_memory`.

The counterparts of test_database_faults.py, injected on the service's own account
(mariadb_user.py), never on the shared server. Every fault leaves turns answering, commits no
partial batch, and heals without a restart.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import Engine, insert

from app.db.schema import agent_memory
from app.db.writers import maintenance
from app.main import create_app
from tests.reliability.mariadb_user import ServiceUser, service_user
from tests.reliability.models import PairModelTransport, pair_entries, pair_message
from tests.reliability.support import TurnOutcome, run_turn
from tests.support.apps import api_settings
from tests.support.databases import mariadb_database, migrated_engine, stored, wipe
from tests.support.server import live_server
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for

pytestmark = pytest.mark.mariadb

SLOTS = 4  # turns in flight at once during the outage test
WANTED_KILLS, MAX_ROUNDS = 10, 12  # statements killed under load, and the rounds allowed


@dataclass
class Faulty:
    url: str  # the service
    user: ServiceUser
    engine: Engine  # root on the private database, to read what was stored


@pytest.fixture(scope="module")
def faulty() -> Iterator[Faulty]:
    with mariadb_database() as database_url:
        engine = migrated_engine(database_url)
        with service_user(database_url) as user:
            settings = api_settings(user.url, log_level="ERROR", turn_timeout_seconds=60)
            app = create_app(settings, model_transport=PairModelTransport())
            with live_server(app) as url:
                yield Faulty(url, user, engine)
        engine.dispose()


@pytest.fixture
def service(faulty: Faulty) -> Iterator[Faulty]:
    wipe(faulty.engine)
    yield faulty
    # Whatever a test broke is restored, so the next one starts from a healthy database.
    faulty.user.execute(f"ALTER USER {faulty.user.account} ACCOUNT UNLOCK")
    faulty.user.grant("SELECT, INSERT, UPDATE, DELETE", "agent_memory")


def pair_turn(url: str, user: str, key: str) -> TurnOutcome:
    async def go() -> TurnOutcome:
        async with httpx.AsyncClient(timeout=60) as client:
            return await run_turn(client, url, dev_auth(user), pair_message(key))

    return asyncio.run(go())


async def api_pair(client: httpx.AsyncClient, url: str, user: str, key: str) -> int:
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


def pair_stored(engine: Engine, user: str, key: str) -> bool:
    """Whether the pair is stored, failing on half a pair (a partial commit)."""
    user_entry, memory_entry = pair_entries(key)
    snapshot = stored(engine, user)
    has_user, has_memory = user_entry in snapshot.user, memory_entry in snapshot.memory
    assert has_user == has_memory, f"partial commit of pair {key}: {snapshot}"
    return has_user


def assert_recovered(service: Faulty, user: str, key: str) -> None:
    """Without a restart: ready again, and a new turn reads memory and commits."""
    wait_for(
        lambda: httpx.get(f"{service.url}/readyz", timeout=10).status_code == 200,
        "readiness after the fault was removed",
    )
    outcome = pair_turn(service.url, user, key)
    assert outcome.memory_status == "available" and outcome.committed, outcome
    assert pair_stored(service.engine, user, key)


def test_killed_statements_fail_turns_cleanly_and_commit_no_partial_batch(
    service: Faulty,
) -> None:
    """KILL QUERY hits the service's running statements again and again while turns and API
    writes run: every turn still answers, every API write is 200 or 503, a batch is stored
    exactly when its response said it was committed, and the service heals by itself."""
    kills = 0
    stop = threading.Event()

    def killer() -> None:
        nonlocal kills
        while not stop.is_set():
            kills += service.user.kill_statements()
            stop.wait(0.002)  # pacing of the fault injection, not a wait on an outcome

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
                        await run_turn(client, service.url, dev_auth(user), pair_message(key)),
                    )

            async def write(n: int) -> None:
                user, key = f"kill-{round_}-{n % 6}", f"kw{round_}-{n}"
                async with gate:
                    writes[key] = (user, await api_pair(client, service.url, user, key))

            async with asyncio.TaskGroup() as tg:
                for n in range(60):
                    tg.create_task(turn(n))
                    tg.create_task(write(n))

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        # Statements last a millisecond or two: load goes on, round after round, until the
        # killer has hit enough of them to matter.
        for round_ in range(MAX_ROUNDS):
            asyncio.run(load(round_))
            if kills >= WANTED_KILLS:
                break
    finally:
        stop.set()
        thread.join(timeout=10)

    seen: Counter[str] = Counter()
    for key, (user, outcome) in turns.items():
        assert outcome.answered_or_declared, (key, outcome)
        assert outcome.memory in ("committed", "failed", "none"), (key, outcome)
        assert pair_stored(service.engine, user, key) == outcome.committed, (key, outcome)
        seen[f"turn:{outcome.memory_status}:{outcome.memory}"] += 1
    for key, (user, status) in writes.items():
        assert status in (200, 503), (key, status)
        assert pair_stored(service.engine, user, key) == (status == 200), (key, status)
        seen[f"api:{status}"] += 1
    print(f"\nkilled statements: {kills}; outcomes: {dict(sorted(seen.items()))}")
    assert kills >= WANTED_KILLS
    assert_recovered(service, "kill-0", "kill-after")


def test_an_account_refused_mid_run_degrades_turns_and_heals(service: Faulty) -> None:
    """While turns run, the service's account is locked (new connections refused) and its
    sessions killed, then unlocked. Turns keep answering throughout, with status `unavailable`
    and nothing saved while memory cannot be read; the memory API and readiness answer 503
    meanwhile; afterwards turns read and commit again without a restart. The connections are
    killed while no turn is in flight (the controller holds every slot), so no commit is left
    in doubt."""
    user = service.user
    finished = 0
    outcomes: dict[str, tuple[str, TurnOutcome]] = {}

    async def run() -> None:
        nonlocal finished
        gate = asyncio.Semaphore(SLOTS)
        down_at, up_at = asyncio.Event(), asyncio.Event()
        # Closed by the controller to let the turns in flight finish before it kills sessions.
        admitting, quiet = asyncio.Event(), asyncio.Condition()
        admitting.set()
        in_flight = 0

        async def turn(client: httpx.AsyncClient, n: int) -> None:
            nonlocal finished, in_flight
            name, key = f"down-{n % 4}", f"dt{n}"
            async with gate:
                await admitting.wait()
                in_flight += 1
                outcomes[key] = (
                    name,
                    await run_turn(client, service.url, dev_auth(name), pair_message(key)),
                )
                async with quiet:
                    in_flight -= 1
                    quiet.notify_all()
            finished += 1
            if finished == 15:
                down_at.set()
            if finished == 40:
                up_at.set()

        async def controller(client: httpx.AsyncClient) -> None:
            await down_at.wait()
            admitting.clear()
            async with quiet:
                await quiet.wait_for(lambda: in_flight == 0)
            await asyncio.to_thread(user.execute, f"ALTER USER {user.account} ACCOUNT LOCK")
            assert await asyncio.to_thread(user.kill_connections) > 0
            assert (
                await client.get(f"{service.url}/v1/memory", headers=dev_auth("down-0"))
            ).status_code == 503
            assert (await api_pair(client, service.url, "down-0", "down-api")) == 503
            assert (await client.get(f"{service.url}/readyz")).status_code == 503
            admitting.set()
            await up_at.wait()
            await asyncio.to_thread(user.execute, f"ALTER USER {user.account} ACCOUNT UNLOCK")

        async with httpx.AsyncClient(timeout=60) as client, asyncio.TaskGroup() as tg:
            tg.create_task(controller(client))
            for n in range(60):
                tg.create_task(turn(client, n))

    asyncio.run(run())

    seen: Counter[str] = Counter()
    for key, (name, outcome) in outcomes.items():
        assert outcome.answered_or_declared, (key, outcome)
        if outcome.memory_status == "unavailable":
            assert outcome.tool == "unavailable" and outcome.memory == "none", (key, outcome)
        assert pair_stored(service.engine, name, key) == outcome.committed, (key, outcome)
        seen[f"{outcome.memory_status}:{outcome.memory}"] += 1
    assert not pair_stored(service.engine, "down-0", "down-api")
    assert seen["unavailable:none"] > 0, "no turn ran while the account was refused"
    assert_recovered(service, "down-0", "down-after")


def test_an_unreadable_table_degrades_turns_and_a_failing_write_commits_nothing(
    service: Faulty,
) -> None:
    """SELECT revoked on agent_memory: turns answer with status `unavailable` and save nothing,
    the memory API answers 503. INSERT revoked while the user's `user` row exists and the
    `memory` row does not: the batch's UPDATE succeeds inside the transaction, its INSERT fails,
    and the whole batch rolls back. GRANT back: turns commit."""
    user = service.user
    with service.engine.begin() as connection, maintenance(connection):
        connection.execute(
            insert(agent_memory).values(
                user_id="locked", memory_type="user", content="The user likes maps."
            )
        )

    user.revoke("SELECT", "agent_memory")
    outcome = pair_turn(service.url, "locked", "unreadable")
    assert outcome.answered and outcome.memory_status == "unavailable", outcome
    assert outcome.tool == "unavailable" and outcome.memory == "none", outcome
    assert httpx.get(f"{service.url}/v1/memory", headers=dev_auth("locked")).status_code == 503
    user.grant("SELECT", "agent_memory")

    user.revoke("INSERT", "agent_memory")
    outcome = pair_turn(service.url, "locked", "half")
    assert outcome.answered and outcome.memory_status == "available", outcome
    assert outcome.tool == "staged" and outcome.memory == "failed", outcome
    assert asyncio.run(_api_pair_once(service.url, "locked", "half-api")) == 503
    snapshot = stored(service.engine, "locked")
    assert snapshot.user == ("The user likes maps.",) and snapshot.memory == (), snapshot
    user.grant("INSERT", "agent_memory")

    assert_recovered(service, "locked", "readable")
    assert stored(service.engine, "locked").user[0] == "The user likes maps."


async def _api_pair_once(url: str, user: str, key: str) -> int:
    async with httpx.AsyncClient(timeout=30) as client:
        return await api_pair(client, url, user, key)


def test_the_service_account_is_not_privileged(service: Faulty) -> None:
    """Guard for the suite itself: the faults above bind only because the service connects as
    an account with table-level DML on its own database, nothing server-wide."""
    grants = " ".join(
        row[0] for row in service.user.execute(f"SHOW GRANTS FOR {service.user.account}")
    )
    assert "ON *.*" not in grants.replace("GRANT USAGE ON *.*", "")
    assert "ALL PRIVILEGES" not in grants and "SUPER" not in grants
    assert httpx.get(f"{service.url}/readyz", timeout=10).status_code == 200
