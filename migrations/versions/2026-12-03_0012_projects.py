"""Projects: a person's projects, each with its own memory document, and the project of each
conversation, history entry and proposal.

Two new tables (`amem_projects`, `amem_project_memory`) and a nullable `project_id` column (with
an index) on conversations, history and proposals. Nothing existing is rewritten: `agent_memory`
is untouched and every existing row reads NULL, i.e. outside projects, exactly as before.

The downgrade drops the projects and their documents, and the history entries and proposals made
in a project (the previous schema has no `project` target to read them with); conversations of a
project stay, as general conversations.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from app.db.types import Identifier, document_text, precise_timestamp, short_text

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

MYSQL_OPTIONS = {"mysql_charset": "utf8mb4", "mariadb_charset": "utf8mb4"}
# Each table that gains a project column, and the column its index orders by.
PROJECT_COLUMNS = (
    ("amem_conversations", "updated_at"),
    ("amem_memory_changes", "seq"),
    ("amem_memory_proposals", "seq"),
)


def _index(table: str) -> str:
    return f"ix_{table}_project"


def upgrade() -> None:
    op.create_table(
        "amem_projects",
        sa.Column("id", Identifier(36), nullable=False),
        sa.Column("user_id", Identifier(128), nullable=False),
        sa.Column("name", short_text(100), nullable=False),
        sa.Column("general_memory", sa.Boolean(), nullable=False),
        sa.Column("created_at", precise_timestamp(), nullable=False),
        sa.Column("updated_at", precise_timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_amem_projects"),
        **MYSQL_OPTIONS,
    )
    op.create_index("ix_amem_projects_user_created", "amem_projects", ["user_id", "created_at"])
    op.create_table(
        "amem_project_memory",
        sa.Column("project_id", Identifier(36), nullable=False),
        sa.Column("user_id", Identifier(128), nullable=False),
        sa.Column("content", document_text(), nullable=False),
        sa.Column("schema_version", sa.SmallInteger(), nullable=False, server_default="1"),
        sa.Column(
            "created_at", sa.DateTime(), nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.Column(
            "updated_at", sa.DateTime(), nullable=False, server_default=sa.func.current_timestamp()
        ),
        sa.PrimaryKeyConstraint("project_id", name="pk_amem_project_memory"),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["amem_projects.id"],
            name="fk_amem_project_memory_project",
            ondelete="CASCADE",
        ),
        **MYSQL_OPTIONS,
    )
    op.create_index("ix_amem_project_memory_user", "amem_project_memory", ["user_id"])
    for table, order in PROJECT_COLUMNS:
        op.add_column(table, sa.Column("project_id", Identifier(36), nullable=True))
        op.create_index(_index(table), table, ["project_id", order])


def downgrade() -> None:
    changes = sa.table("amem_memory_changes", sa.column("project_id"))
    proposals = sa.table("amem_memory_proposals", sa.column("project_id"))
    op.execute(changes.delete().where(changes.c.project_id.is_not(None)))
    op.execute(proposals.delete().where(proposals.c.project_id.is_not(None)))
    for table, _order in PROJECT_COLUMNS:
        op.drop_index(_index(table), table_name=table)
        # A plain DROP COLUMN (SQLite has one since 3.35): a batch rebuild of the messages'
        # parent table would touch the search triggers of revision 0006.
        op.drop_column(table, "project_id")
    op.drop_index("ix_amem_project_memory_user", table_name="amem_project_memory")
    op.drop_table("amem_project_memory")
    op.drop_index("ix_amem_projects_user_created", table_name="amem_projects")
    op.drop_table("amem_projects")
