"""Operators: per-user limits shared by every replica, usage accounting and the audit log.

Four new tables; nothing existing changes. `amem_limit_counters` (one row per limited caller:
the turns of the current minute, and the row every admission locks first) and
`amem_stream_slots` (one expiring lease per open stream) hold the limits' state;
`amem_usage_daily` the model's reported tokens per user and UTC day; `amem_audit_log` operator
actions (who, when, what, from, to). None holds memory or message content. The downgrade drops
them, and with them the usage and audit records, which the previous schema cannot hold.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.types import Identifier, precise_timestamp, short_text

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

MYSQL_OPTIONS = {"mysql_charset": "utf8mb4", "mariadb_charset": "utf8mb4"}


def upgrade() -> None:
    op.create_table(
        "amem_limit_counters",
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("caller", Identifier(128), nullable=False),
        sa.Column("window_start", sa.BigInteger(), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "caller", name="pk_amem_limit_counters"),
        **MYSQL_OPTIONS,
    )
    op.create_table(
        "amem_stream_slots",
        sa.Column("lease_id", Identifier(36), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("caller", Identifier(128), nullable=False),
        sa.Column("expires_at", precise_timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("lease_id", name="pk_amem_stream_slots"),
        **MYSQL_OPTIONS,
    )
    op.create_index(
        "ix_amem_stream_slots_caller", "amem_stream_slots", ["kind", "caller", "expires_at"]
    )
    op.create_table(
        "amem_usage_daily",
        sa.Column("user_id", Identifier(128), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "day", name="pk_amem_usage_daily"),
        **MYSQL_OPTIONS,
    )
    op.create_index("ix_amem_usage_daily_day", "amem_usage_daily", ["day"])
    op.create_table(
        "amem_audit_log",
        sa.Column("seq", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("created_at", precise_timestamp(), nullable=False),
        sa.Column("actor", Identifier(128), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", Identifier(128), nullable=False),
        sa.Column("old_value", short_text(1000), nullable=True),
        sa.Column("new_value", short_text(1000), nullable=True),
        sa.PrimaryKeyConstraint("seq", name="pk_amem_audit_log"),
        **MYSQL_OPTIONS,
    )


def downgrade() -> None:
    op.drop_table("amem_audit_log")
    op.drop_index("ix_amem_usage_daily_day", table_name="amem_usage_daily")
    op.drop_table("amem_usage_daily")
    op.drop_index("ix_amem_stream_slots_caller", table_name="amem_stream_slots")
    op.drop_table("amem_stream_slots")
    op.drop_table("amem_limit_counters")
