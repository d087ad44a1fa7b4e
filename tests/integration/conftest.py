"""Fixtures of the migration tests: brand-new databases that no revision has touched yet."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from app.db.engine import build_engine
from tests.support.databases import mariadb_database, postgres_database


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def fresh_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a brand-new, never-migrated database of each backend."""
    if request.param == "sqlite":
        engine = build_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
        yield engine
        engine.dispose()
        return
    database = postgres_database if request.param == "postgres" else mariadb_database
    with database() as url:
        engine = build_engine(url)
        yield engine
        engine.dispose()
