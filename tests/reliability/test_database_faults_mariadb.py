"""Database faults on MariaDB: statements killed mid-transaction under load, connections
killed and the account refused new ones during a run, privileges revoked on `agent_memory`.

The counterparts of test_database_faults.py, injected on the service's own account
(mariadb_user.py), never on the shared server. Every fault leaves turns answering, commits no
partial batch, and heals without a restart.
"""

from __future__ import annotations

import asyncio
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
from tests.reliability.models import PairModelTransport, pair_message
from tests.reliability.pairs import (
    api_pair,
    api_pair_once,
    assert_recovered,
    pair_stored,
    pair_turn,
    pairs_while_killed,
)
from tests.reliability.support import TurnOutcome, run_turn
from tests.support.apps import api_settings
from tests.support.databases import mariadb_database, migrated_engine, stored, wipe
from tests.support.server import live_server
from tests.support.tokens import dev_auth

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


def test_killed_statements_fail_turns_cleanly_and_commit_no_partial_batch(
    service: Faulty,
) -> None:
    """KILL QUERY hits the service's running statements again and again while turns and API
    writes run: every turn still answers, every API write is 200 or 503, a batch is stored
    exactly when its response said it was committed, and the service heals by itself."""
    kills, seen = pairs_while_killed(
        service.url,
        service.engine,
        service.user.kill_statements,
        pacing=0.002,
        # Statements last a millisecond or two: load goes on, round after round, until the
        # killer has hit enough of them to matter.
        wanted_kills=WANTED_KILLS,
        max_rounds=MAX_ROUNDS,
    )
    print(f"\nkilled statements: {kills}; outcomes: {dict(sorted(seen.items()))}")
    assert kills >= WANTED_KILLS
    assert_recovered(service.url, service.engine, "kill-0", "kill-after")


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
    assert_recovered(service.url, service.engine, "down-0", "down-after")


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
    assert asyncio.run(api_pair_once(service.url, "locked", "half-api")) == 503
    snapshot = stored(service.engine, "locked")
    assert snapshot.user == ("The user likes maps.",) and snapshot.memory == (), snapshot
    user.grant("INSERT", "agent_memory")

    assert_recovered(service.url, service.engine, "locked", "readable")
    assert stored(service.engine, "locked").user[0] == "The user likes maps."


def test_the_service_account_is_not_privileged(service: Faulty) -> None:
    """Guard for the suite itself: the faults above bind only because the service connects as
    an account with table-level DML on its own database, nothing server-wide."""
    grants = " ".join(
        row[0] for row in service.user.execute(f"SHOW GRANTS FOR {service.user.account}")
    )
    assert "ON *.*" not in grants.replace("GRANT USAGE ON *.*", "")
    assert "ALL PRIVILEGES" not in grants and "SUPER" not in grants
    assert httpx.get(f"{service.url}/readyz", timeout=10).status_code == 200
