"""Semantic search: a vector per message and the queue of messages waiting for one.

Two tables, both keyed by the message and deleted with it (ON DELETE CASCADE, so conversation
and project deletes, retention and erasure remove them): `amem_message_embeddings` (the owner,
the model and size the vector was made with, the vector as little-endian float32 bytes) and
`amem_embedding_jobs` (the owner, attempts, when it may next be tried, and the lease of the
worker holding it). Nothing existing is rewritten and no vector is made here: the worker embeds
the stored messages once EMBEDDING_BASE_URL is set (docs/conversation-search.md).

On PostgreSQL where the pgvector extension is available, it is created and the vectors live in a
column `embedding` of type vector instead (its HNSW index, per dimension, is made by
`python -m app embeddings backfill`); without it, the bytes column serves.

Revision ID: 0016
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.types import Identifier, precise_timestamp

revision = "0016"
down_revision = "0012"
branch_labels = None
depends_on = None

MYSQL_OPTIONS = {"mysql_charset": "utf8mb4", "mariadb_charset": "utf8mb4"}
EMBEDDINGS = "amem_message_embeddings"
JOBS = "amem_embedding_jobs"
MESSAGES = "amem_conversation_messages"
PGVECTOR_COLUMN = "embedding"


def _pgvector() -> bool:
    """Whether pgvector is (or could now be) created in this database: a role that may not
    create it leaves the bytes column serving, as on a server without the extension."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or op.get_context().as_sql:
        return False
    available = bind.exec_driver_sql(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
    ).scalar()
    if available is None:
        return False
    try:
        with bind.begin_nested():
            bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS vector")
    except sa.exc.DBAPIError:
        return False
    return True


def upgrade() -> None:
    op.create_table(
        EMBEDDINGS,
        sa.Column("message_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("user_id", Identifier(128), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=True),
        sa.Column("created_at", precise_timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("message_id", name=f"pk_{EMBEDDINGS}"),
        sa.ForeignKeyConstraint(
            ["message_id"],
            [f"{MESSAGES}.id"],
            name=f"fk_{EMBEDDINGS}_message",
            ondelete="CASCADE",
        ),
        **MYSQL_OPTIONS,
    )
    op.create_index(f"ix_{EMBEDDINGS}_owner", EMBEDDINGS, ["user_id", "model"])
    op.create_table(
        JOBS,
        sa.Column("message_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("user_id", Identifier(128), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("not_before", precise_timestamp(), nullable=False),
        sa.Column("lease_token", Identifier(36), nullable=True),
        sa.Column("lease_until", precise_timestamp(), nullable=True),
        sa.PrimaryKeyConstraint("message_id", name=f"pk_{JOBS}"),
        sa.ForeignKeyConstraint(
            ["message_id"],
            [f"{MESSAGES}.id"],
            name=f"fk_{JOBS}_message",
            ondelete="CASCADE",
        ),
        **MYSQL_OPTIONS,
    )
    op.create_index(f"ix_{JOBS}_due", JOBS, ["not_before"])
    op.create_index(f"ix_{JOBS}_user", JOBS, ["user_id"])
    if _pgvector():
        op.execute(f"ALTER TABLE {EMBEDDINGS} ADD COLUMN {PGVECTOR_COLUMN} vector")


def downgrade() -> None:
    op.drop_index(f"ix_{JOBS}_user", table_name=JOBS)
    op.drop_index(f"ix_{JOBS}_due", table_name=JOBS)
    op.drop_table(JOBS)
    op.drop_index(f"ix_{EMBEDDINGS}_owner", table_name=EMBEDDINGS)
    op.drop_table(EMBEDDINGS)  # its pgvector column and index go with it; the extension stays
