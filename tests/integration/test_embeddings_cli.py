"""`python -m app embeddings backfill|reembed|status` as an operator runs them (a subprocess on
SQLite, PostgreSQL and MariaDB): backfill embeds the stored messages once and is idempotent;
reembed after a model change replaces every vector; MariaDB and an unset EMBEDDING_BASE_URL
refuse clearly and change nothing."""

from __future__ import annotations

import uuid

from sqlalchemy import Engine, func, select

from app.db.schema import message_embeddings
from tests.api.test_cli import run_cli
from tests.integration.test_embedding_queue import converse


def vectors(engine: Engine, model: str) -> int:
    query = select(func.count()).select_from(message_embeddings)
    with engine.connect() as connection:
        return int(
            connection.execute(query.where(message_embeddings.c.model == model)).scalar() or 0
        )


def test_backfill_and_reembed(engine: Engine, db_url: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Three messages: backfill embeds 3, again 0; reembed under another model embeds 3 and
    leaves no vector of the old one. MariaDB: exit 2 with a reason, no vector."""
    converse(engine, f"u-{uuid.uuid4().hex}", "one", "two", "three")
    env = {"DATABASE_URL": db_url, "EMBEDDING_BASE_URL": "offline"}
    first = run_cli(tmp_path, "embeddings", "backfill", **env)
    if engine.dialect.name in ("mysql", "mariadb"):
        assert first.returncode == 2
        assert "lexical only" in first.stderr
        assert vectors(engine, "offline-hash-1") == 0
        return
    assert first.returncode == 0, first.stderr
    assert "embedded 3" in first.stdout
    again = run_cli(tmp_path, "embeddings", "backfill", **env)
    assert again.returncode == 0 and "embedded 3" not in again.stdout
    assert vectors(engine, "offline-hash-1") == 3
    other = {**env, "EMBEDDING_MODEL": "offline-hash-2"}
    reembedded = run_cli(tmp_path, "embeddings", "reembed", **other)
    assert reembedded.returncode == 0, reembedded.stderr
    assert vectors(engine, "offline-hash-2") == 3
    assert vectors(engine, "offline-hash-1") == 0
    status = run_cli(tmp_path, "embeddings", "status", **other)
    assert "vectors of this model: 3" in status.stdout


def test_embeddings_commands_need_a_model(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Without EMBEDDING_BASE_URL: exit 2, saying semantic search is off."""
    result = run_cli(tmp_path, "embeddings", "backfill")
    assert result.returncode == 2
    assert "EMBEDDING_BASE_URL" in result.stderr
