"""Sources of an answer and recall of earlier chats.

`amem_conversation_messages` gains `sources` (JSON, NULL for every existing row and for answers
stored without them): what a turn's prompt held, the earlier-conversation snippets it was given
and the memory changes it made. `amem_memory_preferences` gains `recall_chats` (NULL: the
person never chose; RECALL_CHATS_DEFAULT applies). The history's sources gain `sources` (an
entry removed with "Wrong" under an answer's sources).

The downgrade records a `sources` change as `api` (the person's own change through the service,
the nearest earlier source), then drops the two columns and restores the previous check.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.types import long_text

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

MESSAGES = "amem_conversation_messages"
PREFERENCES = "amem_memory_preferences"
CHANGES = "amem_memory_changes"
CHANGES_CHECK = "ck_amem_memory_changes_source"


def upgrade() -> None:
    # Plain ADD COLUMN (no table rebuild): on SQLite the messages' search triggers stay as they are.
    op.add_column(MESSAGES, sa.Column("sources", long_text(), nullable=True))
    op.add_column(PREFERENCES, sa.Column("recall_chats", sa.Boolean(), nullable=True))
    with op.batch_alter_table(CHANGES) as batch:
        batch.drop_constraint(CHANGES_CHECK, type_="check")
        batch.create_check_constraint(
            CHANGES_CHECK,
            "source IN ('turn', 'api', 'undo', 'proposal', 'mcp', 'expired', 'sources')",
        )


def downgrade() -> None:
    op.execute(f"UPDATE {CHANGES} SET source = 'api' WHERE source = 'sources'")
    with op.batch_alter_table(CHANGES) as batch:
        batch.drop_constraint(CHANGES_CHECK, type_="check")
        batch.create_check_constraint(
            CHANGES_CHECK, "source IN ('turn', 'api', 'undo', 'proposal', 'mcp', 'expired')"
        )
    with op.batch_alter_table(PREFERENCES) as batch:
        batch.drop_column("recall_chats")
    op.drop_column(MESSAGES, "sources")
