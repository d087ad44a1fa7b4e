"""Shared pieces of the reliability suite: service processes, a dedicated login role, turn clients.

The suite proves the design's guarantees from outside the process where it matters (several
uvicorn processes on one database, connections killed by the server, clients that go away), so
these helpers start real processes and speak real HTTP and SSE.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from tests.support.server import free_port
from tests.support.sse import aiter_events
from tests.support.tokens import TEST_DEV_SECRET

ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 60.0


# -- service processes ------------------------------------------------------------------------


@dataclass
class ServiceProcess:
    """One `python -m uvicorn app.main:app` process; its output goes to a log file."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def service_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a service process: fixed dev secret, memory on, no model delay."""
    env = {
        key: value
        for key, value in os.environ.items()
        # A developer's own settings must not leak into the process under test.
        if not key.startswith(("LLM_", "AUTH_", "OTEL_", "DATABASE_", "MEMORY_", "EVAL_"))
    }
    env.update(
        {
            "DATABASE_URL": database_url,
            "AUTH_MODE": "dev",
            "AUTH_DEV_SECRET": TEST_DEV_SECRET,
            "MEMORY_ENABLED": "true",
            "OFFLINE_MODEL_DELAY_MS": "0",
            "FLAG_CACHE_SECONDS": "0",
            # As tests/support/apps.py: a loaded CI machine must not pass the start's deadlines
            # (tests of the deadlines set their own).
            "FLAG_READ_TIMEOUT_SECONDS": "15",
            "MEMORY_READ_TIMEOUT_SECONDS": "15",
            "LOG_LEVEL": "WARNING",
            "LOG_FORMAT": "console",
            "PYTHONUNBUFFERED": "1",
            # As tests/support/apps.py: per-caller limits off (the limit tests set their own);
            # these services are driven by load loops, not by people.
            "USER_MAX_STREAMS": "0",
            "USER_TURNS_PER_MINUTE": "0",
            "EVAL_MAX_STREAMS": "0",
            "EVAL_TURNS_PER_MINUTE": "0",
        }
    )
    env.update(extra)
    return env


@contextmanager
def service_process(
    database_url: str, log_dir: Path, *, name: str = "service", **env: str
) -> Iterator[ServiceProcess]:
    """Start uvicorn in a subprocess, wait (with a deadline) until `/healthz` answers."""
    port = free_port()
    log_path = log_dir / f"{name}-{port}.log"
    log_file = log_path.open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "app.main:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
        ],
        cwd=ROOT,
        env=service_env(database_url, **env),
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    service = ServiceProcess(f"http://127.0.0.1:{port}", process, log_path)
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited at start:\n{service.log_tail()}")
            try:
                if httpx.get(f"{service.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{service.log_tail()}")
            time.sleep(0.05)
        yield service
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log_file.close()


# -- a dedicated login role on a private database -----------------------------------------------


@dataclass
class AppRole:
    """A non-superuser login role owning nothing: what a production service connects as.

    Being an ordinary role matters: `CONNECTION LIMIT 0` and revoked privileges bind it, while
    the superuser used by the test harness keeps working to inject and undo faults.
    """

    name: str
    database: str
    url: str
    admin: Engine = field(repr=False)

    def execute(self, statement: str, **parameters: Any) -> Any:
        with self.admin.connect() as connection:
            result = connection.execute(text(statement), parameters)
            return result.all() if result.returns_rows else []

    def terminate_backends(self, *, spare_commits: bool = False) -> int:
        """pg_terminate_backend on the role's connections to the database; returns how many.

        With `spare_commits`, a backend whose current statement is COMMIT is left alone: a
        connection dropped during COMMIT leaves its outcome unknown to the client (the classic
        in-doubt commit), which is a property of every database client, not of this service.
        """
        condition = "AND query NOT ILIKE 'commit%'" if spare_commits else ""
        rows = self.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = :db AND usename = :role {condition}",
            db=self.database,
            role=self.name,
        )
        return sum(1 for (terminated,) in rows if terminated)


@contextmanager
def app_role(database_url: str) -> Iterator[AppRole]:
    """Create a login role with DML rights on the (migrated) database; drop it afterwards.

    `AppRole.execute` runs as superuser on that same database (GRANT/REVOKE act there, and a
    superuser still connects while the database refuses the role).
    """
    parsed = make_url(database_url)
    database = parsed.database or ""
    name = f"amt_role_{uuid.uuid4().hex[:10]}"
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as connection:
        connection.execute(text(f'CREATE ROLE "{name}" LOGIN'))
        connection.execute(text(f'GRANT CONNECT ON DATABASE "{database}" TO "{name}"'))
        connection.execute(text(f'GRANT USAGE ON SCHEMA public TO "{name}"'))
        connection.execute(
            text(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{name}"')
        )
        connection.execute(text(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO "{name}"'))
    url = parsed.set(username=name, password=None).render_as_string(hide_password=False)
    role = AppRole(name=name, database=database, url=url, admin=admin)
    try:
        yield role
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{database}" CONNECTION LIMIT -1'))
            connection.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :r"),
                {"r": name},
            )
            connection.execute(text(f'DROP OWNED BY "{name}"'))
            connection.execute(text(f'DROP ROLE IF EXISTS "{name}"'))
        admin.dispose()


# -- turns and their outcomes as the client saw them -----------------------------------------


@dataclass
class TurnOutcome:
    """What one streamed turn told its client."""

    status: int
    events: list[str] = field(default_factory=list)
    memory_status: str | None = None
    tool: str | None = None
    memory: str | None = None
    finish: str | None = None
    error: str | None = None

    @property
    def committed(self) -> bool:
        return self.memory == "committed"

    @property
    def answered(self) -> bool:
        return self.status == 200 and self.finish is not None

    @property
    def answered_or_declared(self) -> bool:
        """Answered with `done`, or the answer was streamed and the turn then said it could not
        store it (`transcript_unavailable`): both are clean ends while the database fails."""
        return self.answered or (self.status == 200 and self.error == "transcript_unavailable")


async def run_turn(
    client: httpx.AsyncClient, url: str, headers: Mapping[str, str], message: str
) -> TurnOutcome:
    """POST one turn and read its stream to the end (transport errors are outcomes too)."""
    outcome = TurnOutcome(status=0)
    try:
        async with client.stream(
            "POST", f"{url}/v1/chat", json={"message": message}, headers=dict(headers)
        ) as response:
            outcome.status = response.status_code
            if response.status_code != 200:
                await response.aread()
                return outcome
            async for event in aiter_events(response):
                record(outcome, event.event, event.data)
    except httpx.TransportError as error:
        outcome.error = f"transport: {type(error).__name__}"
    return outcome


def record(outcome: TurnOutcome, name: str, data: Mapping[str, Any]) -> None:
    outcome.events.append(name)
    if name == "start":
        outcome.memory_status = data["memory"]["status"]
    elif name == "tool":
        outcome.tool = data["outcome"]
    elif name == "memory":
        outcome.memory = data["outcome"]
    elif name == "done":
        outcome.finish = data["finish_reason"]
    elif name == "error":
        outcome.error = data["code"]
