"""Namespaced, exact schema: identity compares exactly, text is Unicode and long enough, and
every table but the design's `agent_memory` (docs/design.md) carries the `amem_` prefix.

- agent_memory is altered in place: `user_id` becomes exact (PostgreSQL COLLATE "C", MariaDB
  `utf8mb4_nopad_bin` / MySQL `utf8mb4_0900_bin`, SQL Server VARBINARY of UTF-16LE), the table
  utf8mb4 on MariaDB/MySQL, `content` NVARCHAR(max) on SQL Server.
- feature_flags, conversations and conversation_messages are copied into amem_feature_flags,
  amem_conversations and amem_conversation_messages (final types, prefixed constraint and index
  names, message ids kept, transcript timestamps to the microsecond and written by the
  application) and dropped.

A stricter comparison never makes two stored rows collide; rows the old collation had merged
stay one row (docs/operations-databases.md). The downgrade restores the previous layout and
refuses, before any change, what it could not undo. The version table moves to
`amem_alembic_version` around this revision (app/db/migrate.py): Alembic reads it first.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from app.db.types import (
    MSSQL_BYTES_PER_CHARACTER,
    Identifier,
    document_text,
    long_text,
    mysql_exact_collation,
    precise_timestamp,
    short_text,
)

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

MYSQL_OPTIONS = {"mysql_charset": "utf8mb4", "mariadb_charset": "utf8mb4"}
MESSAGE_COLUMNS = "id, conversation_id, turn_id, role, content, status, created_at"

# (table, {id column: length}) copied between the old and the new names, parents first.
COPIED = (
    ("feature_flags", {"name": 64, "updated_by": 128}),
    ("conversations", {"id": 36, "user_id": 128}),
    ("conversation_messages", {"conversation_id": 36, "turn_id": 36}),
)
COLUMNS = {
    "feature_flags": "name, enabled, updated_by, updated_at",
    "conversations": "id, user_id, title, created_at, updated_at",
    "conversation_messages": MESSAGE_COLUMNS,
}


def dialect() -> str:
    return op.get_context().dialect.name


# -- upgrade ---------------------------------------------------------------------------------


def upgrade() -> None:
    exact_agent_memory()
    create_namespaced_tables()
    for table, ids in COPIED:
        copy_rows(table, f"amem_{table}", ids, to_binary=True)
    for table, _ids in reversed(COPIED):
        op.drop_table(table)


def exact_agent_memory() -> None:
    name = dialect()
    if name == "postgresql":
        op.alter_column(
            "agent_memory",
            "user_id",
            type_=Identifier(128),
            existing_type=sa.String(128),
            existing_nullable=False,
        )
    elif name in ("mysql", "mariadb"):
        collation = mysql_exact_collation(op.get_context().dialect)
        # CONVERT first (it may widen TEXT from a narrower character set), then exact types.
        op.execute("ALTER TABLE agent_memory CONVERT TO CHARACTER SET utf8mb4")
        op.execute(
            "ALTER TABLE agent_memory "
            f"MODIFY user_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE {collation} NOT NULL, "
            "MODIFY content TEXT NOT NULL"
        )
    elif name == "mssql":
        # VARCHAR does not convert to VARBINARY implicitly, so ALTER COLUMN cannot do it:
        # a new column takes the UTF-16LE bytes, then replaces the old one under the same key.
        swap_mssql_user_id(
            "VARBINARY(512)", "CAST(CAST(user_id AS NVARCHAR(128)) AS VARBINARY(512))"
        )
        op.alter_column(
            "agent_memory",
            "content",
            type_=document_text(),
            existing_type=sa.Text(),
            existing_nullable=False,
        )
    # SQLite: VARCHAR and TEXT compare byte for byte already; nothing to change.


def swap_mssql_user_id(new_type: str, conversion: str) -> None:
    op.execute(f"ALTER TABLE agent_memory ADD user_id_new {new_type} NULL")
    op.execute(f"UPDATE agent_memory SET user_id_new = {conversion}")
    op.execute("ALTER TABLE agent_memory DROP CONSTRAINT pk_agent_memory")
    op.execute("ALTER TABLE agent_memory DROP COLUMN user_id")
    op.execute("EXEC sp_rename 'agent_memory.user_id_new', 'user_id', 'COLUMN'")
    op.execute(f"ALTER TABLE agent_memory ALTER COLUMN user_id {new_type} NOT NULL")
    op.execute(
        "ALTER TABLE agent_memory ADD CONSTRAINT pk_agent_memory PRIMARY KEY (user_id, memory_type)"
    )


def create_namespaced_tables() -> None:
    now = sa.func.current_timestamp()
    op.create_table(
        "amem_feature_flags",
        sa.Column("name", Identifier(64), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("updated_by", Identifier(128), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False, server_default=now),
        sa.PrimaryKeyConstraint("name", name="pk_amem_feature_flags"),
        **MYSQL_OPTIONS,
    )
    op.create_table(
        "amem_conversations",
        sa.Column("id", Identifier(36), nullable=False),
        sa.Column("user_id", Identifier(128), nullable=False),
        sa.Column("title", short_text(200), nullable=False),
        sa.Column("created_at", precise_timestamp(), nullable=False),
        sa.Column("updated_at", precise_timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_amem_conversations"),
        **MYSQL_OPTIONS,
    )
    op.create_index(
        "ix_amem_conversations_user_updated", "amem_conversations", ["user_id", "updated_at"]
    )
    op.create_table(
        "amem_conversation_messages",
        sa.Column("id", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("conversation_id", Identifier(36), nullable=False),
        sa.Column("turn_id", Identifier(36), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", long_text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, server_default="complete"),
        sa.Column("created_at", precise_timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_amem_conversation_messages"),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["amem_conversations.id"],
            name="fk_amem_conversation_messages_conversation",
            ondelete="CASCADE",
        ),
        sa.CheckConstraint(
            "role IN ('user', 'assistant')", name="ck_amem_conversation_messages_role"
        ),
        sa.CheckConstraint(
            "status IN ('complete', 'interrupted', 'failed')",
            name="ck_amem_conversation_messages_status",
        ),
        **MYSQL_OPTIONS,
    )
    op.create_index(
        "ix_amem_conversation_messages_conversation",
        "amem_conversation_messages",
        ["conversation_id", "id"],
    )


def copy_rows(source: str, target: str, ids: dict[str, int], *, to_binary: bool) -> None:
    """INSERT ... SELECT every row, ids converted where the storage differs (SQL Server)."""
    columns = COLUMNS[source.removeprefix("amem_")]
    selected = ", ".join(
        mssql_id(column, ids[column], to_binary)
        if dialect() == "mssql" and column in ids
        else column
        for column in (part.strip() for part in columns.split(","))
    )
    keeps_ids = source.endswith("conversation_messages")
    if keeps_ids and dialect() == "mssql":
        op.execute(f"SET IDENTITY_INSERT {target} ON")
    op.execute(f"INSERT INTO {target} ({columns}) SELECT {selected} FROM {source}")
    if keeps_ids and dialect() == "mssql":
        op.execute(f"SET IDENTITY_INSERT {target} OFF")
    if keeps_ids and dialect() == "postgresql":
        # Explicit ids do not advance the sequence: the next message must follow the copied ones.
        op.execute(
            f"SELECT setval(pg_get_serial_sequence('{target}', 'id'), "
            f"COALESCE(MAX(id), 0) + 1, false) FROM {target}"
        )


def mssql_id(column: str, length: int, to_binary: bool) -> str:
    if to_binary:
        size = length * MSSQL_BYTES_PER_CHARACTER
        return f"CAST(CAST({column} AS NVARCHAR({length})) AS VARBINARY({size}))"
    return f"CAST(CAST({column} AS NVARCHAR({length})) AS VARCHAR({length}))"


# -- downgrade -------------------------------------------------------------------------------


def downgrade() -> None:
    refuse_merging_users()
    refuse_truncating_messages()
    loose_agent_memory()
    create_previous_tables()
    for table, ids in COPIED:
        copy_rows(f"amem_{table}", table, ids, to_binary=False)
    for table, _ids in reversed(COPIED):
        op.drop_table(f"amem_{table}")


def refuse_merging_users() -> None:
    """Fail before any change when the previous comparison would fold two users into one key."""
    name = dialect()
    if context.is_offline_mode() or name not in ("mysql", "mariadb", "mssql"):
        return  # PostgreSQL's default collations are deterministic; SQLite's BINARY is exact
    connection = op.get_bind()
    if name == "mssql":
        key = "CAST(CAST(user_id AS NVARCHAR(128)) AS VARCHAR(128))"
    else:
        collation = connection.execute(
            sa.text(
                "SELECT TABLE_COLLATION FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'agent_memory'"
            )
        ).scalar_one()
        key = f"user_id COLLATE {collation}"
    merged = connection.execute(
        sa.text(
            f"SELECT COUNT(*) FROM (SELECT {key} AS merged_key, memory_type FROM agent_memory "
            f"GROUP BY {key}, memory_type HAVING COUNT(*) > 1) AS merged"
        )
    ).scalar_one()
    if merged:
        raise RuntimeError(
            f"cannot downgrade below revision 0004: agent_memory holds {merged} group(s) of "
            "users whose ids differ only in case, accents or trailing spaces, which the "
            "previous schema would merge into one; nothing was changed"
        )


def refuse_truncating_messages() -> None:
    """MariaDB/MySQL's previous TEXT column holds 65,535 bytes; a longer message would fail the
    copy half-way (their DDL is not transactional), so refuse before any change."""
    if context.is_offline_mode() or dialect() not in ("mysql", "mariadb"):
        return
    too_long = (
        op.get_bind()
        .execute(
            sa.text("SELECT COUNT(*) FROM amem_conversation_messages WHERE LENGTH(content) > 65535")
        )
        .scalar_one()
    )
    if too_long:
        raise RuntimeError(
            f"cannot downgrade below revision 0004: {too_long} message(s) are longer than the "
            "previous schema's TEXT column holds (65,535 bytes); nothing was changed"
        )


def loose_agent_memory() -> None:
    name = dialect()
    if name == "postgresql":
        op.alter_column(
            "agent_memory",
            "user_id",
            type_=sa.String(128),
            existing_type=Identifier(128),
            existing_nullable=False,
        )
    elif name in ("mysql", "mariadb"):
        # The table stays utf8mb4 (a superset); user_id takes the table's default collation.
        op.execute("ALTER TABLE agent_memory MODIFY user_id VARCHAR(128) NOT NULL")
    elif name == "mssql":
        swap_mssql_user_id("VARCHAR(128)", "CAST(CAST(user_id AS NVARCHAR(128)) AS VARCHAR(128))")
        op.alter_column(
            "agent_memory",
            "content",
            type_=sa.Text(),
            existing_type=document_text(),
            existing_nullable=False,
        )


def create_previous_tables() -> None:
    """The tables exactly as revisions 0002 and 0003 created them: by running those revisions."""
    for previous in ("0002", "0003"):
        script = context.script.get_revision(previous)
        assert script is not None
        script.module.upgrade()
