"""Applications for API tests: settings for a database URL, an in-process client, a live server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from app.db.schema import agent_memory
from app.main import create_app
from app.settings import Settings
from tests.support.server import free_port, live_server
from tests.support.tokens import OIDC_AUDIENCE, OIDC_ISSUER, TEST_DEV_SECRET

TEST_READ_DEADLINE_SECONDS = 15.0


def api_settings(database_url: str, **overrides: Any) -> Settings:
    """Dev-mode settings for tests: fixed secret, memory on, no flag caching, no .env file."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "auth_mode": "dev",
        "auth_dev_secret": TEST_DEV_SECRET,
        "memory_enabled": True,
        "flag_cache_seconds": 0,
        "offline_model_delay_ms": 0,
        "log_format": "console",
        # The start's flag and memory reads answer in milliseconds; their one-second production
        # deadlines were passed by a fully loaded CI machine, which turned memory off for a turn
        # a test needed it on for. Tests of the deadlines (tests/reliability/test_database_hangs.py)
        # set their own.
        "flag_read_timeout_seconds": TEST_READ_DEADLINE_SECONDS,
        "memory_read_timeout_seconds": TEST_READ_DEADLINE_SECONDS,
        # The same for a search (2 s in production; an MCP search of a person with no messages
        # passed it on a loaded machine); tests of a slow search set their own.
        "search_timeout_seconds": TEST_READ_DEADLINE_SECONDS,
        # Tests run many turns of one user at once; the limits' tests set their own
        # (tests/api/test_limits.py), the defaults are checked in tests/unit/test_limits.py.
        "user_max_streams": 0,
        "user_turns_per_minute": 0,
        "user_imports_per_minute": 0,
        "eval_max_streams": 0,
        "eval_turns_per_minute": 0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def oidc_settings(database_url: str, jwks_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "auth_mode": "oidc",
        "auth_dev_secret": None,
        "auth_jwks_url": jwks_url,
        "auth_issuer": OIDC_ISSUER,
        "auth_audience": OIDC_AUDIENCE,
        "auth_jwks_refresh_cooldown_seconds": 0,
    }
    values.update(overrides)
    return api_settings(database_url, **values)


def closed_port_url() -> str:
    """A PostgreSQL URL on a loopback port where nothing listens: a database that is down."""
    return f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/down?connect_timeout=2"


@contextmanager
def app_client(settings: Settings) -> Iterator[TestClient]:
    """The app in process (ASGI), lifespan included; exits dispose its engine."""
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


@contextmanager
def served(settings: Settings, app: FastAPI | None = None) -> Iterator[str]:
    """The app behind real uvicorn on a free loopback port; yields its base URL."""
    with live_server(app or create_app(settings)) as url:
        yield url


def memory_rows(engine: Engine, user_id: str | None = None) -> int:
    """Rows in agent_memory (for one user, or all), read on a separate connection."""
    query = select(func.count()).select_from(agent_memory)
    if user_id is not None:
        query = query.where(agent_memory.c.user_id == user_id)
    with engine.connect() as connection:
        return int(connection.execute(query).scalar_one())
