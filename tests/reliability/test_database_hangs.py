"""A database that hangs instead of failing, on PostgreSQL and MariaDB: every wait is bounded.

The service reaches its database through a TCP proxy (`tests/support/proxy.py`) that can freeze
(accept connections and never answer, stop forwarding established ones, hold every byte) and
thaw (deliver what it held, then forward again), or the harness locks the `agent_memory` table
from another session. Either way turns must start within the memory-read deadline with status
`unavailable` and writes off, `GET /v1/memory` and `/readyz` must answer 503 within their own
deadlines, `/info` must answer, nothing of a frozen turn may ever be committed (the proxy
delivers everything the service had sent, so "nothing stored after the thaw" proves nothing was
sent), and the service must heal once the database answers again, without a restart.

The service's own statement, lock and lease bounds are set far above the deadlines under test
here, so that only the deadlines can make the answers arrive in time; each answer must arrive
within a bound several times its deadline (a loaded two-core machine cannot make that flaky) and
far below what an unbounded wait would take.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, event, func, select, text

from app.db.schema import agent_memory, conversation_messages, feature_flags
from app.main import create_app
from app.memory.flags import MEMORY_FLAG, write_flag
from tests.reliability.models import Gates, PairModelTransport, pair_message
from tests.reliability.pairs import pair_stored
from tests.reliability.support import TurnOutcome, record
from tests.support.apps import api_settings
from tests.support.databases import mariadb_database, migrated_engine, postgres_database, stored
from tests.support.postgres_servers import pgbouncer, pooler_for
from tests.support.proxy import FreezableProxy, freezable_proxy
from tests.support.server import live_server
from tests.support.sse import aiter_events
from tests.support.tokens import dev_auth
from tests.support.waiting import await_for, wait_for

DEADLINE = 1.0  # MEMORY_READ_TIMEOUT_SECONDS and FLAG_READ_TIMEOUT_SECONDS
READINESS = 2.0  # READINESS_TIMEOUT_SECONDS
# A turn's `start` waits for the request's flag read, then the turn's own reads: 2 deadlines.
START_BOUND = 8 * DEADLINE
ANSWER_BOUND = 8 * DEADLINE
READY_BOUND = 5 * READINESS
# Waits that only the deadlines can cut short in the deadline service (all well above the bounds).
SLOW = {
    "db_statement_timeout_seconds": 40,
    "db_lock_timeout_seconds": 40,
    "db_operation_timeout_seconds": 90,
    "db_connect_timeout_seconds": 10,
    "db_pool_max_overflow": 20,
}
# The short-bounds service: a commit waits at most a second for a lock, three on a silent peer.
SHORT = {
    "db_statement_timeout_seconds": 2,
    "db_lock_timeout_seconds": 1,
    "db_operation_timeout_seconds": 3,
    "db_connect_timeout_seconds": 3,
}
COMMIT_BOUND = 30.0  # far below the turn timeout (60 s), which would otherwise end the turn


@dataclass
class Hung:
    backend: str
    database_url: str  # direct, not through the proxy
    proxy: FreezableProxy
    url: str  # the service with the deadlines under test
    short_url: str  # the service with short database bounds (commits, API writes)
    gates: Gates
    engine: Engine  # direct superuser engine: inspection and table locks, never via the proxy


@contextmanager
def _database(backend: str) -> Iterator[str]:
    with (mariadb_database if backend == "mariadb" else postgres_database)() as url:
        yield url


@contextmanager
def _service_url(backend: str, proxy: FreezableProxy, database_url: str) -> Iterator[str]:
    """How the service reaches the database: through the proxy, or through a PgBouncer in
    transaction mode in front of the proxy (a database that hangs behind the pooler)."""
    if backend != "pgbouncer":
        yield proxy.url_for(database_url)
        return
    with pgbouncer("127.0.0.1", proxy.port) as bouncer:
        yield bouncer.url_for(database_url)


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("pgbouncer", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ],
)
def hung(request: pytest.FixtureRequest) -> Iterator[Hung]:
    backend = str(request.param)
    gates = Gates()
    with (
        _database(backend) as database_url,
        freezable_proxy(database_url) as proxy,
        _service_url(backend, proxy, database_url) as service_url,
    ):
        engine = migrated_engine(database_url)
        common: dict[str, Any] = {
            "db_pooler": pooler_for(service_url),
            "log_level": "ERROR",
            "turn_timeout_seconds": 60,
            "memory_read_timeout_seconds": DEADLINE,
            "flag_read_timeout_seconds": DEADLINE,
            "readiness_timeout_seconds": READINESS,
        }
        slow = api_settings(service_url, **common, **SLOW)
        short = api_settings(service_url, **common, **SHORT)
        with (
            live_server(create_app(slow, model_transport=PairModelTransport(gates=gates))) as url,
            live_server(
                create_app(short, model_transport=PairModelTransport(gates=gates))
            ) as short_url,
        ):
            for base in (url, short_url):  # a first connection, opened without a deadline race
                wait_for(
                    lambda base=base: (
                        httpx.get(
                            f"{base}/v1/memory", headers=dev_auth("warm-up"), timeout=30
                        ).status_code
                        == 200
                    ),
                    "the service to read memory once",
                )
            yield Hung(backend, database_url, proxy, url, short_url, gates, engine)
        engine.dispose()


@pytest.fixture
def service(hung: Hung) -> Iterator[Hung]:
    yield hung
    hung.proxy.thaw()


@dataclass
class Timed:
    outcome: TurnOutcome
    start_after: float | None = None  # seconds from the request to the `start` event
    conversation_id: str | None = None


async def timed_turn(url: str, user: str, key: str, *, release: Gates | None = None) -> Timed:
    """One turn, read to its end, noting when `start` arrived."""
    timed = Timed(TurnOutcome(status=0))
    if release is not None:
        release.release(key)
    async with httpx.AsyncClient(timeout=120) as client:
        began = time.monotonic()
        async with client.stream(
            "POST", f"{url}/v1/chat", json={"message": pair_message(key)}, headers=dev_auth(user)
        ) as response:
            timed.outcome.status = response.status_code
            async for event in aiter_events(response):
                if event.event == "start":
                    timed.start_after = time.monotonic() - began
                    timed.conversation_id = event.data["conversation_id"]
                record(timed.outcome, event.event, event.data)
    return timed


def turn(url: str, user: str, key: str, gates: Gates) -> Timed:
    return asyncio.run(timed_turn(url, user, key, release=gates))


async def side_by_side(service: Hung, user: str, keys: tuple[str, ...]) -> list[Timed]:
    """Turns at the same time. On a frozen database each one's answer row waits out the slow
    bounds (`SLOW`) before the turn ends: side by side, the test waits for that once."""
    turns = (timed_turn(service.url, user, key, release=service.gates) for key in keys)
    return list(await asyncio.gather(*turns))


def timed_get(url: str, **kwargs: Any) -> tuple[httpx.Response, float]:
    began = time.monotonic()
    response = httpx.get(url, timeout=120, **kwargs)
    return response, time.monotonic() - began


def transcribed(engine: Engine, key: str) -> int:
    """How many stored transcript messages carry the turn message for `key`."""
    query = select(func.count()).select_from(conversation_messages)
    query = query.where(conversation_messages.c.content == pair_message(key))
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def assert_degraded_turn(timed: Timed) -> None:
    """Fail open for the answer, closed for writes, and `start` within its bound."""
    outcome = timed.outcome
    assert outcome.answered and outcome.error is None, outcome
    assert outcome.memory_status == "unavailable", outcome
    assert outcome.tool == "unavailable" and outcome.memory == "none", outcome
    assert timed.start_after is not None and timed.start_after < START_BOUND, timed


def assert_degraded_routes(service: Hung, user: str) -> None:
    """The memory read, the flag read and readiness all answer within their bounds."""
    memory, took = timed_get(f"{service.url}/v1/memory", headers=dev_auth(user))
    assert memory.status_code == 503 and took < ANSWER_BOUND, (memory.text, took)
    assert memory.json()["error"]["code"] == "memory_unavailable"
    info, took = timed_get(f"{service.url}/info")
    assert info.status_code == 200 and took < ANSWER_BOUND, (info.text, took)
    ready, took = timed_get(f"{service.url}/readyz")
    assert ready.status_code == 503 and took < READY_BOUND, (ready.text, took)
    assert ready.json()["status"] == "not_ready"


def assert_healed(service: Hung, user: str, key: str) -> None:
    """Without a restart: ready again, and new turns read memory and commit. (The first turns
    after an outage may still find memory unavailable while the pool reconnects; each of those
    commits nothing, and one must soon succeed.)"""
    wait_for(
        lambda: httpx.get(f"{service.url}/readyz", timeout=30).status_code == 200,
        "readiness after the database answered again",
        seconds=60,
    )
    attempts: list[Timed] = []

    def a_turn_commits() -> bool:
        attempt = turn(service.url, user, f"{key}{len(attempts)}", service.gates)
        attempts.append(attempt)
        return attempt.outcome.memory_status == "available" and attempt.outcome.committed

    wait_for(a_turn_commits, "a turn that reads memory and commits", seconds=60)
    last = len(attempts) - 1
    assert pair_stored(service.engine, user, f"{key}{last}")
    assert not any(pair_stored(service.engine, user, f"{key}{n}") for n in range(last))


def test_a_frozen_database_degrades_turns_within_the_deadline_and_heals(service: Hung) -> None:
    """Frozen proxy: turns start within the deadline with memory `unavailable` (no transcript:
    `conversation_id` null), the memory API and readiness answer 503 in time, `/info` answers
    with memory off (the flag cannot be read: fail-closed), API writes are refused. After the
    thaw nothing of the frozen turns is stored (memory or transcript) and the service heals."""
    user = f"frozen-{service.backend}"
    warm = turn(service.url, user, "warm", service.gates)
    assert warm.outcome.memory_status == "available" and warm.outcome.committed, warm

    service.proxy.freeze()
    frozen = asyncio.run(side_by_side(service, user, ("f1", "f2")))
    assert_degraded_routes(service, user)
    info = httpx.get(f"{service.url}/info", timeout=120).json()
    write = httpx.post(
        f"{service.url}/v1/memory/operations",
        headers=dev_auth(user),
        json={"operations": [{"target": "user", "action": "add", "content": "Frozen write."}]},
        timeout=120,
    )
    began = time.monotonic()
    continued = httpx.post(
        f"{service.url}/v1/chat",
        headers=dev_auth(user),
        json={"message": pair_message("continued"), "conversation_id": warm.conversation_id},
        timeout=120,
    )
    continued_after = time.monotonic() - began
    service.proxy.thaw()

    # Continuing a conversation reads its history first: bounded too, a 503 in time.
    assert continued.status_code == 503 and continued_after < ANSWER_BOUND, (
        continued.text,
        continued_after,
    )
    for timed in frozen:
        assert_degraded_turn(timed)
        assert timed.conversation_id is None, timed
    assert info["memory_enabled"] is False
    assert write.status_code == 503 and write.json()["error"]["code"] == "memory_unavailable"
    assert_healed(service, user, "thawed")
    for key in ("f1", "f2"):
        assert not pair_stored(service.engine, user, key)
    assert "Frozen write." not in stored(service.engine, user).user
    # The frozen turns' transcripts were abandoned before their commit: none appeared later.
    assert transcribed(service.engine, "warm") == 1
    assert transcribed(service.engine, "f1") == transcribed(service.engine, "f2") == 0


def test_a_turn_frozen_before_its_commit_commits_nothing(service: Hung) -> None:
    """The turn read memory and staged its batch; the database freezes before the commit
    begins. The commit fails within its bounds (the lease breaks the silent connection) and
    the turn says `failed`; after the thaw, everything the service had sent is delivered, and
    still nothing is stored: no COMMIT was ever sent."""
    user, key = f"midway-{service.backend}", "mid1"

    async def run() -> Timed:
        running = asyncio.create_task(timed_turn(service.short_url, user, key))
        # The model holds its final chunk at the gate: the batch is staged, the commit not begun.
        await await_for(lambda: key in service.gates.held, "the turn to reach its gate")
        await asyncio.to_thread(service.proxy.freeze)
        began = time.monotonic()
        service.gates.release(key)
        timed = await running
        timed.start_after = time.monotonic() - began  # here: from the release to the end
        return timed

    timed = asyncio.run(run())
    service.proxy.thaw()
    outcome = timed.outcome
    assert outcome.memory_status == "available" and outcome.tool == "staged", outcome
    assert outcome.answered_or_declared and outcome.memory == "failed", outcome
    assert timed.start_after is not None and timed.start_after < COMMIT_BOUND, timed
    assert_healed(service, user, "after-mid")
    assert not pair_stored(service.engine, user, key)


@contextmanager
def table_locked(engine: Engine, table: str) -> Iterator[None]:
    """Another session holds an exclusive lock on `table` (reads and writes wait)."""
    connection = engine.connect()
    try:
        if engine.dialect.name == "postgresql":
            transaction = connection.begin()
            connection.execute(text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))
            try:
                yield
            finally:
                transaction.rollback()
        else:
            connection.exec_driver_sql(f"LOCK TABLES {table} WRITE")
            try:
                yield
            finally:
                connection.exec_driver_sql("UNLOCK TABLES")
    finally:
        connection.close()


def test_a_locked_memory_table_degrades_turns_within_the_deadline_and_heals(
    service: Hung,
) -> None:
    """Another session locks `agent_memory` exclusively: turns start within the deadline with
    memory `unavailable` and save nothing, the memory API and readiness answer 503 in time,
    `/info` answers (the flags table is not locked, memory stays on), and an API write fails
    clearly (503 `memory_busy`) after the lock timeout instead of waiting. Released: heals."""
    user = f"locked-{service.backend}"
    warm = turn(service.url, user, "lwarm", service.gates)
    assert warm.outcome.committed, warm

    with table_locked(service.engine, agent_memory.name):
        locked = [turn(service.url, user, key, service.gates) for key in ("l1", "l2")]
        assert_degraded_routes(service, user)
        info = httpx.get(f"{service.url}/info", timeout=120).json()
        began = time.monotonic()
        write = httpx.post(
            f"{service.short_url}/v1/memory/operations",
            headers=dev_auth(user),
            json={"operations": [{"target": "user", "action": "add", "content": "Late."}]},
            timeout=120,
        )
        write_took = time.monotonic() - began

    for timed in locked:
        assert_degraded_turn(timed)
    assert info["memory_enabled"] is True
    assert write.status_code == 503, write.text
    assert write.json()["error"]["code"] == "memory_busy" and write_took < COMMIT_BOUND
    assert_healed(service, user, "lthawed")
    for key in ("l1", "l2"):
        assert not pair_stored(service.engine, user, key)
    assert "Late." not in stored(service.engine, user).user


def test_a_flag_that_cannot_be_read_never_turns_memory_back_on(service: Hung) -> None:
    """An operator switched memory off in the database; this service's MEMORY_ENABLED says on.
    While the flags table is locked by another session, the flag read runs out of its deadline:
    turns run with memory `unavailable` and writes off, API writes are refused with 503, `/info`
    says off and the admin view answers 503, all in time; never the environment's default.
    Once the table can be read again, the stored "off" holds."""
    user = f"flagless-{service.backend}"
    write_flag(service.engine, MEMORY_FLAG, False, updated_by="operator")
    try:
        with table_locked(service.engine, feature_flags.name):
            locked = turn(service.url, user, "nf1", service.gates)
            began = time.monotonic()
            write = httpx.post(
                f"{service.url}/v1/memory/operations",
                headers=dev_auth(user),
                json={"operations": [{"target": "user", "action": "add", "content": "On?"}]},
                timeout=120,
            )
            info, info_took = timed_get(f"{service.url}/info")
            admin, admin_took = timed_get(
                f"{service.url}/v1/admin/flags", headers=dev_auth("olivia", ["operator"])
            )
            write_took = time.monotonic() - began - info_took - admin_took
        after = turn(service.url, user, "nf2", service.gates)
    finally:
        write_flag(service.engine, MEMORY_FLAG, True, updated_by="operator")

    assert_degraded_turn(locked)
    assert write.status_code == 503 and write_took < ANSWER_BOUND, (write.text, write_took)
    assert write.json()["error"]["code"] == "memory_unavailable"
    assert info.json()["memory_enabled"] is False and info_took < ANSWER_BOUND
    assert admin.status_code == 503 and admin_took < ANSWER_BOUND, admin.text
    assert after.outcome.memory_status == "disabled" and after.outcome.memory == "none", after
    assert stored(service.engine, user).user == ()


def test_one_hanging_flag_read_holds_no_request_behind_it(service: Hung) -> None:
    """Single flight with a bounded wait: while the flags table is locked, one flag read is
    issued and hangs; twenty concurrent requests (public `/info` and authenticated memory reads,
    which read the flag in the auth dependency) all share it and all answer in time, with
    memory off, instead of queueing one after another behind it."""
    read_timeout = 5.0
    settings = api_settings(
        service.database_url,
        log_level="ERROR",
        flag_read_timeout_seconds=read_timeout,
        # The memory reads that follow open new connections at once (PyMySQL builds a TLS
        # context for each): not what this test measures, so they get the same bound.
        memory_read_timeout_seconds=read_timeout,
        **SLOW,
    )
    app = create_app(settings)
    reads: list[str] = []
    first_read = threading.Event()
    with live_server(app) as url:
        engine: Engine = app.state.runtime.engine

        @event.listens_for(engine, "before_cursor_execute")
        def _flag_reads(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
            if f"FROM {feature_flags.name}" in statement:
                reads.append(statement)
                first_read.set()

        async def burst() -> tuple[list[httpx.Response], float]:
            async with httpx.AsyncClient(base_url=url, timeout=120) as client:
                began = time.monotonic()
                first = asyncio.create_task(client.get("/info"))
                await await_for(first_read.is_set, "the first flag read")
                others = [client.get("/info") for _ in range(9)] + [
                    client.get("/v1/memory", headers=dev_auth(f"burst-{n}")) for n in range(10)
                ]
                responses = await asyncio.gather(first, *others)
                return list(responses), time.monotonic() - began

        with table_locked(service.engine, feature_flags.name):
            responses, took = asyncio.run(burst())

    assert [response.status_code for response in responses] == [200] * 20, [
        response.text for response in responses if response.status_code != 200
    ]
    assert all(response.json()["memory_enabled"] is False for response in responses[:10])
    assert took < 4 * read_timeout, took  # one lock wait (40 s) or a queue of them: far longer
    assert len(reads) == 1, reads
