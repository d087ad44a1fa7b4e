"""agent_memory: the two bounded memory documents per user, as the design (docs/design.md) has them.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_memory",
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("memory_type", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("schema_version", sa.SmallInteger(), nullable=False, server_default="1"),
        sa.Column(
            "created_at", sa.DateTime(), nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "updated_at", sa.DateTime(), nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.PrimaryKeyConstraint("user_id", "memory_type", name="pk_agent_memory"),
        sa.CheckConstraint("memory_type IN ('user', 'memory')", name="ck_agent_memory_type"),
    )


def downgrade() -> None:
    op.drop_table("agent_memory")
