"""Table definitions shared by the repositories; migrations create them, never `create_all`."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    func,
)

metadata = MetaData()

agent_memory = Table(
    "agent_memory",
    metadata,
    Column("user_id", String(128), primary_key=True),
    Column("memory_type", String(16), primary_key=True),
    Column("content", Text, nullable=False),
    Column("schema_version", SmallInteger, nullable=False, server_default="1"),
    Column("created_at", DateTime, nullable=False, server_default=func.current_timestamp()),
    Column("updated_at", DateTime, nullable=False, server_default=func.current_timestamp()),
    CheckConstraint("memory_type IN ('user', 'memory')", name="ck_agent_memory_type"),
)

feature_flags = Table(
    "feature_flags",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("enabled", Boolean, nullable=False),
    Column("updated_by", String(128), nullable=True),
    Column("updated_at", DateTime, nullable=False, server_default=func.current_timestamp()),
)

conversations = Table(
    "conversations",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("user_id", String(128), nullable=False),
    Column("title", String(200), nullable=False),
    Column("created_at", DateTime, nullable=False, server_default=func.current_timestamp()),
    Column("updated_at", DateTime, nullable=False, server_default=func.current_timestamp()),
    Index("ix_conversations_user_updated", "user_id", "updated_at"),
)

conversation_messages = Table(
    "conversation_messages",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "conversation_id",
        String(36),
        ForeignKey("conversations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("turn_id", String(36), nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("status", String(16), nullable=False, server_default="complete"),
    Column("created_at", DateTime, nullable=False, server_default=func.current_timestamp()),
    CheckConstraint("role IN ('user', 'assistant')", name="ck_conversation_messages_role"),
    CheckConstraint(
        "status IN ('complete', 'interrupted', 'failed')", name="ck_conversation_messages_status"
    ),
    Index("ix_conversation_messages_conversation", "conversation_id", "id"),
)
