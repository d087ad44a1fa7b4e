"""Memory control: the history of committed changes (with their provenance), pending proposals
of ask-before-saving, and each user's save mode.

Three new tables; nothing existing changes. The downgrade drops them (and with them every
history entry, proposal and preference: they cannot exist in the previous schema).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.types import Identifier, long_text, precise_timestamp

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

MYSQL_OPTIONS = {"mysql_charset": "utf8mb4", "mariadb_charset": "utf8mb4"}


def upgrade() -> None:
    op.create_table(
        "amem_memory_changes",
        sa.Column("seq", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("id", Identifier(36), nullable=False),
        sa.Column("user_id", Identifier(128), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("turn_id", Identifier(36), nullable=True),
        sa.Column("conversation_id", Identifier(36), nullable=True),
        sa.Column("undoes", Identifier(36), nullable=True),
        sa.Column("operations", long_text(), nullable=False),
        sa.Column("created_at", precise_timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_amem_memory_changes"),
        sa.CheckConstraint(
            "source IN ('turn', 'api', 'undo', 'proposal')", name="ck_amem_memory_changes_source"
        ),
        **MYSQL_OPTIONS,
    )
    op.create_index("ux_amem_memory_changes_id", "amem_memory_changes", ["id"], unique=True)
    op.create_index("ix_amem_memory_changes_user_seq", "amem_memory_changes", ["user_id", "seq"])
    op.create_table(
        "amem_memory_proposals",
        sa.Column("seq", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("id", Identifier(36), nullable=False),
        sa.Column("user_id", Identifier(128), nullable=False),
        sa.Column("turn_id", Identifier(36), nullable=True),
        sa.Column("conversation_id", Identifier(36), nullable=True),
        sa.Column("batches", long_text(), nullable=False),
        sa.Column("created_at", precise_timestamp(), nullable=False),
        sa.Column("expires_at", precise_timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_amem_memory_proposals"),
        **MYSQL_OPTIONS,
    )
    op.create_index("ux_amem_memory_proposals_id", "amem_memory_proposals", ["id"], unique=True)
    op.create_index(
        "ix_amem_memory_proposals_user_seq", "amem_memory_proposals", ["user_id", "seq"]
    )
    op.create_table(
        "amem_memory_preferences",
        sa.Column("user_id", Identifier(128), nullable=False),
        sa.Column("save_mode", sa.String(8), nullable=False),
        sa.Column("updated_at", precise_timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", name="pk_amem_memory_preferences"),
        sa.CheckConstraint("save_mode IN ('auto', 'ask')", name="ck_amem_memory_preferences_mode"),
        **MYSQL_OPTIONS,
    )


def downgrade() -> None:
    op.drop_table("amem_memory_preferences")
    op.drop_index("ix_amem_memory_proposals_user_seq", table_name="amem_memory_proposals")
    op.drop_index("ux_amem_memory_proposals_id", table_name="amem_memory_proposals")
    op.drop_table("amem_memory_proposals")
    op.drop_index("ix_amem_memory_changes_user_seq", table_name="amem_memory_changes")
    op.drop_index("ux_amem_memory_changes_id", table_name="amem_memory_changes")
    op.drop_table("amem_memory_changes")
