"""Database faults on PostgreSQL: connections killed mid-transaction, the database refusing
connections during a run, the server itself restarted, privileges revoked on `agent_memory`.

The service connects as an ordinary login role (`support.app_role`), so the harness, as
superuser, can take the database away from it and give it back; one test stops and starts
a server of its own. Every fault must leave turns answering (status `unavailable` where memory
could not be read), commit no partial batch, and heal without a restart once the database is
back.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import Engine, insert

from app.db.schema import agent_memory
from app.db.writers import maintenance
from app.main import create_app
from tests.reliability.models import PairModelTransport, pair_message
from tests.reliability.pairs import (
    api_pair,
    api_pair_once,
    assert_recovered,
    pair_stored,
    pair_turn,
    pairs_while_killed,
)
from tests.reliability.support import AppRole, TurnOutcome, app_role, run_turn
from tests.support.apps import api_settings
from tests.support.databases import migrated_engine, postgres_database, stored, wipe
from tests.support.postgres_servers import Cluster, private_server
from tests.support.server import live_server
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for

pytestmark = pytest.mark.postgres


@dataclass
class Faulty:
    url: str  # the service
    role: AppRole
    engine: Engine  # superuser engine on the private database, to read what was stored


@pytest.fixture(scope="module")
def faulty() -> Iterator[Faulty]:
    with postgres_database() as database_url:
        engine = migrated_engine(database_url)
        with app_role(database_url) as role:
            settings = api_settings(role.url, log_level="ERROR", turn_timeout_seconds=60)
            app = create_app(settings, model_transport=PairModelTransport())
            with live_server(app) as url:
                yield Faulty(url, role, engine)
        engine.dispose()


@pytest.fixture
def service(faulty: Faulty) -> Iterator[Faulty]:
    wipe(faulty.engine)
    yield faulty
    # Whatever a test broke is restored, so the next one starts from a healthy database.
    faulty.role.execute(f'ALTER DATABASE "{faulty.role.database}" CONNECTION LIMIT -1')
    faulty.role.execute(
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON agent_memory TO "{faulty.role.name}"'
    )


def test_killed_connections_fail_turns_cleanly_and_commit_no_partial_batch(
    service: Faulty,
) -> None:
    """pg_terminate_backend hits the service's connections again and again while turns and API
    writes run: every turn still answers, every API write is 200 or 503, a batch is stored
    exactly when its response said it was committed, and the service heals by itself."""
    kills, seen = pairs_while_killed(
        service.url,
        service.engine,
        lambda: service.role.terminate_backends(spare_commits=True),
        pacing=0.015,
    )
    print(f"\nkilled connections: {kills}; outcomes: {dict(sorted(seen.items()))}")
    assert kills > 0
    assert_recovered(service.url, service.engine, "kill-0-0", "kill-after")


def test_a_database_that_refuses_connections_mid_run_degrades_turns_and_heals(
    service: Faulty,
) -> None:
    """While turns run, the database starts refusing the service (CONNECTION LIMIT 0 and its
    sessions terminated), then accepts it again. Turns keep answering throughout, with status
    `unavailable` and nothing saved while memory cannot be read; the memory API and readiness
    answer 503 meanwhile; afterwards turns read and commit again without a restart."""
    role = service.role
    finished = 0
    outcomes: dict[str, tuple[str, TurnOutcome]] = {}
    outage = {"down": 0, "up": 0}

    async def run() -> None:
        nonlocal finished
        gate = asyncio.Semaphore(4)
        down_at, up_at = asyncio.Event(), asyncio.Event()

        async def turn(client: httpx.AsyncClient, n: int) -> None:
            nonlocal finished
            user, key = f"down-{n % 4}", f"dt{n}"
            async with gate:
                outcomes[key] = (
                    user,
                    await run_turn(client, service.url, dev_auth(user), pair_message(key)),
                )
            finished += 1
            if finished == 15:
                down_at.set()
            if finished == 40:
                up_at.set()

        async def controller(client: httpx.AsyncClient) -> None:
            await down_at.wait()
            await asyncio.to_thread(
                role.execute, f'ALTER DATABASE "{role.database}" CONNECTION LIMIT 0'
            )
            await asyncio.to_thread(role.terminate_backends)
            outage["down"] = finished
            # During the outage the memory API and readiness say so.
            assert (
                await client.get(f"{service.url}/v1/memory", headers=dev_auth("down-0"))
            ).status_code == 503
            assert (await api_pair(client, service.url, "down-0", "down-api")) == 503
            assert (await client.get(f"{service.url}/readyz")).status_code == 503
            await up_at.wait()
            await asyncio.to_thread(
                role.execute, f'ALTER DATABASE "{role.database}" CONNECTION LIMIT -1'
            )
            outage["up"] = finished

        async with httpx.AsyncClient(timeout=60) as client, asyncio.TaskGroup() as tg:
            tg.create_task(controller(client))
            for n in range(60):
                tg.create_task(turn(client, n))

    asyncio.run(run())

    seen: Counter[str] = Counter()
    for key, (user, outcome) in outcomes.items():
        assert outcome.answered_or_declared, (key, outcome)
        if outcome.memory_status == "unavailable":
            # Fail open for the answer, closed for writes: the tool said so, nothing committed.
            assert outcome.tool == "unavailable" and outcome.memory == "none", (key, outcome)
        assert pair_stored(service.engine, user, key) == outcome.committed, (key, outcome)
        seen[f"{outcome.memory_status}:{outcome.memory}"] += 1
    assert not pair_stored(service.engine, "down-0", "down-api")
    print(f"\noutage between turns {outage['down']} and {outage['up']}: {dict(seen)}")
    assert seen["unavailable:none"] > 0, "no turn ran while the database was down"
    assert_recovered(service.url, service.engine, "down-0", "down-after")


def test_an_unreadable_table_degrades_turns_and_a_failing_write_commits_nothing(
    service: Faulty,
) -> None:
    """SELECT revoked on agent_memory: turns answer with status `unavailable` and save nothing,
    the memory API answers 503. INSERT revoked while the user's `user` row exists and the
    `memory` row does not: the batch's first write (an UPDATE) succeeds inside the transaction,
    the second (an INSERT) fails, and the whole batch rolls back. GRANT back: turns commit."""
    role = service.role
    with service.engine.begin() as connection, maintenance(connection):
        connection.execute(
            insert(agent_memory).values(
                user_id="locked", memory_type="user", content="The user likes maps."
            )
        )

    role.execute(f'REVOKE SELECT ON agent_memory FROM "{role.name}"')
    outcome = pair_turn(service.url, "locked", "unreadable")
    assert outcome.answered and outcome.memory_status == "unavailable", outcome
    assert outcome.tool == "unavailable" and outcome.memory == "none", outcome
    assert httpx.get(f"{service.url}/v1/memory", headers=dev_auth("locked")).status_code == 503
    role.execute(f'GRANT SELECT ON agent_memory TO "{role.name}"')

    role.execute(f'REVOKE INSERT ON agent_memory FROM "{role.name}"')
    outcome = pair_turn(service.url, "locked", "half")
    assert outcome.answered and outcome.memory_status == "available", outcome
    assert outcome.tool == "staged" and outcome.memory == "failed", outcome
    status = asyncio.run(api_pair_once(service.url, "locked", "half-api"))
    assert status == 503
    snapshot = stored(service.engine, "locked")
    assert snapshot.user == ("The user likes maps.",) and snapshot.memory == (), snapshot
    role.execute(f'GRANT INSERT ON agent_memory TO "{role.name}"')

    assert_recovered(service.url, service.engine, "locked", "readable")
    assert stored(service.engine, "locked").user[0] == "The user likes maps."


def test_the_superuser_engine_is_not_the_service_role(service: Faulty) -> None:
    """Guard for the suite itself: the faults above bind only because the service connects as
    an ordinary role, not as the superuser the harness uses."""
    rows = service.role.execute(
        "SELECT rolsuper FROM pg_roles WHERE rolname = :r", r=service.role.name
    )
    assert rows == [(False,)]
    assert httpx.get(f"{service.url}/readyz", timeout=10).status_code == 200


@dataclass
class OwnServer:
    url: str  # the service
    engine: Engine  # superuser engine, to read what was stored
    cluster: Cluster  # the server of this test alone, which it stops and starts


@pytest.fixture
def own_server() -> Iterator[OwnServer]:
    """A service on a PostgreSQL server of its own: stopping the shared server would drop
    every other test's and client's connections."""
    with private_server("restarted") as cluster:
        engine = migrated_engine(cluster.url("restarted"))
        with app_role(cluster.url("restarted")) as role:
            settings = api_settings(role.url, log_level="ERROR", turn_timeout_seconds=60)
            app = create_app(settings, model_transport=PairModelTransport())
            with live_server(app) as url:
                yield OwnServer(url, engine, cluster)
        engine.dispose()


def _server_answers(cluster: Cluster) -> bool:
    port = str(cluster.port)
    return subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", port]).returncode == 0


def test_a_database_server_restart_degrades_turns_and_heals(own_server: OwnServer) -> None:
    """The PostgreSQL server itself goes down during a run and comes back: while it is down,
    turns still answer with status `unavailable`, the tool tells the model nothing can be
    saved, nothing is committed and readiness is 503; once it is back the same process (no
    restart of the service) is ready again and commits."""
    service, cluster = own_server, own_server.cluster
    before = pair_turn(service.url, "restart-0", "rs-before")
    assert before.memory_status == "available" and before.committed, before

    cluster.stop()
    try:
        wait_for(lambda: not _server_answers(cluster), "the server to stop")
        during = {key: pair_turn(service.url, "restart-0", key) for key in ("rs1", "rs2", "rs3")}
        ready = httpx.get(f"{service.url}/readyz", timeout=30)
    finally:
        cluster.start()
        wait_for(lambda: _server_answers(cluster), "the server to start again", seconds=60)
        service.engine.dispose()  # the harness's own pooled connections died with the server

    for key, outcome in during.items():
        assert outcome.answered and outcome.error is None, (key, outcome)
        assert outcome.memory_status == "unavailable", (key, outcome)
        assert outcome.tool == "unavailable" and outcome.memory == "none", (key, outcome)
    assert ready.status_code == 503
    assert_recovered(service.url, service.engine, "restart-0", "rs-after")
    for key in during:
        assert not pair_stored(service.engine, "restart-0", key)
    assert pair_stored(service.engine, "restart-0", "rs-before")
