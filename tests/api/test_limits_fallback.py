"""A database that is slow or silent does not switch the limits off: while the shared check
cannot answer in time, each serving process admits a person up to its local share of the
stream limit (USER_MAX_STREAMS // LIMITS_REPLICAS, at least one) and refuses the rest with
429, through real uvicorn on every dialect.

- Silent (PostgreSQL and MariaDB behind a frozen proxy, SQLite behind another writer's lock):
  of twelve simultaneous turns of one person, exactly the local share is served.
- Slow (every database packet held 100-300 ms): some checks answer and some do not, and a
  person holds at most the limit plus the local share; the rest are refused.
"""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from sqlalchemy.engine import make_url

from app.main import create_app
from tests.support.apps import api_settings
from tests.support.databases import mariadb_database, postgres_database
from tests.support.proxy import FreezableProxy, freezable_proxy
from tests.support.server import live_server
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for

LIMIT = 4
PROCESSES = 2
SHARE = LIMIT // PROCESSES
TURNS = 12
CHECK_SECONDS = 0.5


def limited() -> dict[str, object]:
    return {
        "user_max_streams": LIMIT,
        "limits_replicas": PROCESSES,
        "limit_check_timeout_seconds": CHECK_SECONDS,
        "log_level": "ERROR",
    }


@contextmanager
def served(url: str) -> Iterator[str]:
    with live_server(create_app(api_settings(url, **limited()))) as base:
        wait_for(
            lambda: (
                httpx.get(f"{base}/v1/memory", headers=dev_auth("warm-up"), timeout=30).status_code
                == 200
            ),
            "the service to read memory once",
        )
        yield base


async def statuses(base: str, user: str) -> list[int]:
    """TURNS simultaneous turns of `user`: each one's status, every stream held open until all
    have answered (an admitted stream keeps its slot meanwhile), then closed."""
    answered: list[int] = []
    everyone = asyncio.Event()
    async with httpx.AsyncClient(timeout=120) as client:

        async def turn(n: int) -> None:
            async with client.stream(
                "POST", f"{base}/v1/chat", json={"message": f"hi {n}"}, headers=dev_auth(user)
            ) as response:
                answered.append(response.status_code)
                if len(answered) == TURNS:
                    everyone.set()
                await everyone.wait()

        await asyncio.wait_for(asyncio.gather(*(turn(n) for n in range(TURNS))), timeout=120)
    return answered


@contextmanager
def silent(backend: str) -> Iterator[tuple[str, FreezableProxy | None, str]]:
    """The service's database URL (through a proxy for a server), the proxy, and the direct
    URL: PostgreSQL or MariaDB behind a freezable proxy, or SQLite on a file of its own."""
    if backend == "sqlite":
        yield "", None, ""
        return
    database = mariadb_database if backend == "mariadb" else postgres_database
    with database() as direct, freezable_proxy(direct) as proxy:
        yield proxy.url_for(direct), proxy, direct


@pytest.mark.parametrize(
    "backend",
    [
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ],
)
def test_a_silent_database_admits_only_the_local_share(backend: str, sqlite_url: str) -> None:
    """Invariant: with the shared check unable to answer, one process admits exactly its
    share of the stream limit out of twelve simultaneous turns; the rest are 429."""
    user = f"silent-{uuid.uuid4().hex[:8]}"
    with silent(backend) as (proxied, proxy, direct):
        if proxy is not None:
            from tests.support.databases import migrated_engine

            migrated_engine(direct).dispose()
        url = proxied or sqlite_url
        with served(url) as base:
            if proxy is not None:
                proxy.freeze()
                answered = asyncio.run(statuses(base, user))
                proxy.thaw()
            else:
                path = make_url(sqlite_url).database
                assert path is not None
                holder = sqlite3.connect(path, timeout=30, isolation_level=None)
                holder.execute("BEGIN IMMEDIATE")  # another writer holds the database
                try:
                    answered = asyncio.run(statuses(base, user))
                finally:
                    holder.execute("ROLLBACK")
                    holder.close()
    assert sorted(answered) == [200] * SHARE + [429] * (TURNS - SHARE), answered


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ],
)
def test_a_slow_database_holds_a_person_within_the_limit_and_the_local_share(
    backend: str,
) -> None:
    """Invariant: with every database packet held 100-300 ms (some checks answer in time,
    some do not), one person's twelve simultaneous turns get at most LIMIT + SHARE served
    (the shared slots and this process's own share); the others are refused with 429."""
    user = f"slow-{uuid.uuid4().hex[:8]}"
    with silent(backend) as (proxied, proxy, direct):
        assert proxy is not None
        from tests.support.databases import migrated_engine

        migrated_engine(direct).dispose()
        with served(proxied) as base:
            proxy.slow(0.1, 0.3)
            try:
                answered = asyncio.run(statuses(base, user))
            finally:
                proxy.fast()
    # The service closed every connection it opened, late connects included (an open one found
    # by the collector fails the test as a ResourceWarning).
    gc.collect()
    served_turns = answered.count(200)
    assert 1 <= served_turns <= LIMIT + SHARE, answered
    assert answered.count(429) == TURNS - served_turns, answered
