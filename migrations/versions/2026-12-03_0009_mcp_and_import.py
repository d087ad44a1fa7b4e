"""Memory from other clients: MCP changes in the history, and who proposed a proposal.

`amem_memory_changes` gains the source `mcp` and a `client` column (the MCP client's name);
`amem_memory_proposals` gains `source` (NULL for a turn's proposal, `mcp` or `import`) and
`client`. Existing rows keep their meaning: a NULL proposal source is a turn's.

The downgrade records an MCP change as `api` (a client's change through the service, the
nearest earlier source), drops proposals from MCP and import (the previous schema could not
say where they came from, and accepting one there would claim a turn), then drops the columns
and restores the previous check.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

CHANGES = "amem_memory_changes"
PROPOSALS = "amem_memory_proposals"
CHANGES_CHECK = "ck_amem_memory_changes_source"
PROPOSALS_CHECK = "ck_amem_memory_proposals_source"
CLIENT_CHARS = 64  # human text: NVARCHAR on SQL Server (app/db/types.py short_text)


def upgrade() -> None:
    with op.batch_alter_table(CHANGES) as batch:
        batch.add_column(sa.Column("client", sa.Unicode(CLIENT_CHARS), nullable=True))
        batch.drop_constraint(CHANGES_CHECK, type_="check")
        batch.create_check_constraint(
            CHANGES_CHECK, "source IN ('turn', 'api', 'undo', 'proposal', 'mcp')"
        )
    with op.batch_alter_table(PROPOSALS) as batch:
        batch.add_column(sa.Column("source", sa.String(16), nullable=True))
        batch.add_column(sa.Column("client", sa.Unicode(CLIENT_CHARS), nullable=True))
        batch.create_check_constraint(
            PROPOSALS_CHECK, "source IS NULL OR source IN ('mcp', 'import')"
        )


def downgrade() -> None:
    op.execute(f"UPDATE {CHANGES} SET source = 'api' WHERE source = 'mcp'")
    op.execute(f"DELETE FROM {PROPOSALS} WHERE source IS NOT NULL")
    with op.batch_alter_table(PROPOSALS) as batch:
        batch.drop_constraint(PROPOSALS_CHECK, type_="check")
        batch.drop_column("client")
        batch.drop_column("source")
    with op.batch_alter_table(CHANGES) as batch:
        batch.drop_constraint(CHANGES_CHECK, type_="check")
        batch.drop_column("client")
        batch.create_check_constraint(
            CHANGES_CHECK, "source IN ('turn', 'api', 'undo', 'proposal')"
        )
