"""Temporary chats and remember-until.

`amem_conversations` gains `temporary` (false for every existing row) and an index on
(`temporary`, `created_at`) for the purge; `amem_memory_expiries` holds when an entry expires,
keyed by its document and the SHA-256 of its text; `amem_memory_changes` gains the source
`expired` (an entry that left memory at its time).

The downgrade deletes temporary conversations (the previous schema would list them), records
expiries as `api` removals (the nearest earlier source) and drops the table and the column:
entries that had an expiry stay, without it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.types import Identifier, precise_timestamp

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

MYSQL_OPTIONS = {"mysql_charset": "utf8mb4", "mariadb_charset": "utf8mb4"}
CONVERSATIONS = "amem_conversations"
MESSAGES = "amem_conversation_messages"
EXPIRIES = "amem_memory_expiries"
CHANGES = "amem_memory_changes"
CHANGES_CHECK = "ck_amem_memory_changes_source"
TEMPORARY_INDEX = "ix_amem_conversations_temporary"


def upgrade() -> None:
    # A plain ADD COLUMN (no batch rebuild): the messages' search triggers of revision 0006
    # read this table on SQLite.
    op.add_column(
        CONVERSATIONS,
        sa.Column("temporary", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_index(TEMPORARY_INDEX, CONVERSATIONS, ["temporary", "created_at"])
    op.create_table(
        EXPIRIES,
        sa.Column("user_id", Identifier(128), nullable=False),
        sa.Column("document", Identifier(36), nullable=False),
        sa.Column("entry_digest", sa.String(64), nullable=False),
        sa.Column("expires_at", precise_timestamp(), nullable=False),
        sa.PrimaryKeyConstraint(
            "user_id", "document", "entry_digest", name="pk_amem_memory_expiries"
        ),
        **MYSQL_OPTIONS,
    )
    op.create_index("ix_amem_memory_expiries_expires", EXPIRIES, ["expires_at"])
    with op.batch_alter_table(CHANGES) as batch:
        batch.drop_constraint(CHANGES_CHECK, type_="check")
        batch.create_check_constraint(
            CHANGES_CHECK, "source IN ('turn', 'api', 'undo', 'proposal', 'mcp', 'expired')"
        )


def downgrade() -> None:
    conversations = sa.table(CONVERSATIONS, sa.column("id"), sa.column("temporary"))
    messages = sa.table(MESSAGES, sa.column("conversation_id"))
    temporary = sa.select(conversations.c.id).where(conversations.c.temporary == sa.true())
    op.execute(messages.delete().where(messages.c.conversation_id.in_(temporary)))
    op.execute(conversations.delete().where(conversations.c.temporary == sa.true()))
    op.execute(f"UPDATE {CHANGES} SET source = 'api' WHERE source = 'expired'")
    with op.batch_alter_table(CHANGES) as batch:
        batch.drop_constraint(CHANGES_CHECK, type_="check")
        batch.create_check_constraint(
            CHANGES_CHECK, "source IN ('turn', 'api', 'undo', 'proposal', 'mcp')"
        )
    op.drop_index("ix_amem_memory_expiries_expires", table_name=EXPIRIES)
    op.drop_table(EXPIRIES)
    op.drop_index(TEMPORARY_INDEX, table_name=CONVERSATIONS)
    op.drop_column(CONVERSATIONS, "temporary")
