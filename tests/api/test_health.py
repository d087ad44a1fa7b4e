"""Liveness and readiness: ready only with a reachable, migrated, writable database; no trace."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from prometheus_client import REGISTRY
from sqlalchemy import Engine, event

from app.db.engine import build_engine
from app.db.migrate import head_revision
from tests.support.apps import api_settings, app_client, closed_port_url, memory_rows, served
from tests.support.databases import migrated_engine
from tests.support.tokens import dev_auth
from tests.support.waiting import wait_for


def test_ready_on_a_migrated_database_and_leaves_no_row(engine: Engine, db_url: str) -> None:
    """/readyz is 200 on a migrated database, and its probe leaves no row behind."""
    with app_client(api_settings(db_url)) as client:
        for _ in range(3):
            response = client.get("/readyz")
            assert response.status_code == 200, response.text
            assert response.json() == {"status": "ready"}
        assert client.get("/healthz").json() == {"status": "ok"}
    assert memory_rows(engine) == 0


def test_probe_writes_inside_one_rolled_back_transaction(engine: Engine, db_url: str) -> None:
    """The probe inserts, reads and updates a `__readyz_probe__` row in agent_memory and rolls
    the transaction back; it never commits (so no other reader can ever see the row)."""
    statements: list[str] = []
    outcomes: list[str] = []
    lock = threading.Lock()
    settings = api_settings(db_url)
    with app_client(settings) as client:
        app_engine: Engine = client.app.state.runtime.engine  # type: ignore[attr-defined]

        @event.listens_for(app_engine, "before_cursor_execute")
        def _statement(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
            with lock:
                statements.append(statement.split()[0].upper())

        @event.listens_for(app_engine, "commit")
        def _commit(_conn: object) -> None:
            outcomes.append("commit")

        @event.listens_for(app_engine, "rollback")
        def _rollback(_conn: object) -> None:
            outcomes.append("rollback")

        assert client.get("/readyz").status_code == 200
    assert {"INSERT", "UPDATE", "SELECT"} <= set(statements)
    assert "commit" not in outcomes and "rollback" in outcomes
    assert memory_rows(engine) == 0


def test_not_ready_when_the_database_is_down() -> None:
    """With the database unreachable, /readyz is 503 naming the reason; /healthz stays 200."""
    with app_client(api_settings(closed_port_url())) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["status"] == "not_ready"
        assert "database unreachable" in ready.json()["reason"]
        assert client.get("/healthz").status_code == 200


def test_not_ready_when_not_migrated(tmp_path: Path) -> None:
    """An empty (unmigrated) database is 503 with a reason naming the migration state."""
    path = tmp_path / "empty.db"
    build_engine(f"sqlite:///{path}").dispose()
    with app_client(api_settings(f"sqlite:///{path}")) as client:
        ready = client.get("/readyz")
    assert ready.status_code == 503
    reason = ready.json()["reason"]
    assert "not the latest migration" in reason and str(head_revision()) in reason


def test_readiness_over_real_http(engine: Engine, db_url: str) -> None:
    """Both probes answer through uvicorn with JSON bodies."""
    with served(api_settings(db_url)) as url:
        assert httpx.get(f"{url}/healthz").status_code == 200
        assert httpx.get(f"{url}/readyz").status_code == 200
    assert memory_rows(engine) == 0


def test_not_ready_while_every_database_worker_is_held(tmp_path: Path) -> None:
    """Readiness waits for a database worker like any request, but within its own timeout: with
    the only worker held by a write that waits on a lock, /readyz answers 503 naming the queue
    (before, it waited in line for the write and then reported its own deadline)."""
    path = tmp_path / "held.db"
    migrated_engine(f"sqlite:///{path}").dispose()
    settings = api_settings(
        f"sqlite:///{path}",
        db_pool_size=1,
        db_pool_max_overflow=0,
        db_lock_timeout_seconds=3,
        readiness_timeout_seconds=0.3,
    )
    locker = sqlite3.connect(path, isolation_level=None)
    with served(settings) as url, ThreadPoolExecutor(max_workers=1) as pool:
        # Ready while nothing holds the worker (a starved CPU may take one probe past 0.3 s).
        wait_for(lambda: ready_now(url), "ready with the worker free")
        idle = pool_in_use()
        locker.execute("BEGIN IMMEDIATE")  # another process's write: the service's must wait
        try:
            write = pool.submit(
                httpx.post,
                f"{url}/v1/memory/operations",
                json={"operations": [{"target": "user", "action": "add", "content": "Tea."}]},
                headers=dev_auth("held"),
                timeout=30,
            )
            while not write.done() and pool_in_use() <= idle:
                time.sleep(0.02)  # until the write holds the only connection (and worker)
            ready = httpx.get(f"{url}/readyz", timeout=30)
            assert ready.status_code == 503
            assert "no database worker was free" in ready.json()["reason"]
        finally:
            locker.execute("ROLLBACK")
        assert write.result().status_code in (200, 503)
        wait_for(lambda: ready_now(url), "ready again once the write let the worker go")
    locker.close()


def ready_now(url: str) -> bool:
    return httpx.get(f"{url}/readyz", timeout=30).status_code == 200


def pool_in_use() -> float:
    """Checked-out connections of this process's engines (the served app's among them): the
    pool gauge of /metrics, read in process (a scrape would wait for a worker too)."""
    value = REGISTRY.get_sample_value("amem_db_pool_connections_in_use")
    assert value is not None
    return value
