"""Pinned and archived conversations.

Two flags on `amem_conversations`, both false for every existing row: `pinned` (listed first)
and `archived` (left out of `GET /v1/conversations` unless asked for, still searchable). The
list's order (pinned first, then most recently updated) is served by a new index on
(user_id, archived, pinned, updated_at); the flags need no other change.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

CONVERSATIONS = "amem_conversations"
INDEX = "ix_amem_conversations_user_listed"


def upgrade() -> None:
    for flag in ("pinned", "archived"):
        op.add_column(
            CONVERSATIONS,
            sa.Column(flag, sa.Boolean(), nullable=False, server_default=sa.false()),
        )
    op.create_index(INDEX, CONVERSATIONS, ["user_id", "archived", "pinned", "updated_at"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name=CONVERSATIONS)
    # A plain DROP COLUMN (SQLite has one since 3.35): a batch rebuild of the messages' parent
    # table would touch the search triggers of revision 0006.
    for flag in ("archived", "pinned"):
        op.drop_column(CONVERSATIONS, flag)
