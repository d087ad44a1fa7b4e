"""Regenerate and edit-and-resend: a message may be superseded by a later turn.

`superseded_by` names the turn that replaced this message's turn (a regenerated answer, an
edited message, or a later turn dropped by an edit before it); NULL for the messages of the
current transcript. Nothing is deleted: the transcript keeps what the person saw.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.types import Identifier

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

MESSAGES = "amem_conversation_messages"


def upgrade() -> None:
    op.add_column(MESSAGES, sa.Column("superseded_by", Identifier(36), nullable=True))


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite has one since 3.35): a batch rebuild of the table would
    # drop the search triggers of revision 0006 with it.
    op.drop_column(MESSAGES, "superseded_by")
