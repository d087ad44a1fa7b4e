"""Erasure audit: one row per erased subject, keyed by a keyed hash of the subject (no content).

One new table; nothing existing changes. The downgrade drops it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.types import precise_timestamp

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

MYSQL_OPTIONS = {"mysql_charset": "utf8mb4", "mariadb_charset": "utf8mb4"}


def upgrade() -> None:
    op.create_table(
        "amem_erasures",
        sa.Column("subject_hash", sa.String(64), nullable=False),
        sa.Column("erased_at", precise_timestamp(), nullable=False),
        sa.Column("completed_at", precise_timestamp(), nullable=True),
        sa.PrimaryKeyConstraint("subject_hash", name="pk_amem_erasures"),
        **MYSQL_OPTIONS,
    )


def downgrade() -> None:
    op.drop_table("amem_erasures")
