"""Table definitions shared by the repositories; migrations create them, never `create_all`.

`agent_memory` keeps the design's name (docs/design.md); every other table (and Alembic's version
table, see app/db/migrate.py) carries the project prefix, so that the service can share a
database with other applications without a collision.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Date,
    DateTime,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    false,
    func,
)

from app.db.types import Identifier, document_text, long_text, precise_timestamp, short_text

PREFIX = "amem_"
SUBJECT_CHARS = 128  # the token's `sub`, at most 128 characters (the public contract)
ID_CHARS = 36  # a UUID in its canonical text form
CLIENT_CHARS = 64  # an MCP client's name, as recorded with a change (revision 0009)

# Every table is utf8mb4 on MariaDB/MySQL, whatever the database's default character set.
MYSQL_OPTIONS: dict[str, Any] = {"mysql_charset": "utf8mb4", "mariadb_charset": "utf8mb4"}

metadata = MetaData()

agent_memory = Table(
    "agent_memory",
    metadata,
    Column("user_id", Identifier(SUBJECT_CHARS), nullable=False),
    Column("memory_type", String(16), nullable=False),
    Column("content", document_text(), nullable=False),
    Column("schema_version", SmallInteger, nullable=False, server_default="1"),
    Column("created_at", DateTime, nullable=False, server_default=func.current_timestamp()),
    Column("updated_at", DateTime, nullable=False, server_default=func.current_timestamp()),
    PrimaryKeyConstraint("user_id", "memory_type", name="pk_agent_memory"),
    CheckConstraint("memory_type IN ('user', 'memory')", name="ck_agent_memory_type"),
    **MYSQL_OPTIONS,
)

feature_flags = Table(
    f"{PREFIX}feature_flags",
    metadata,
    Column("name", Identifier(64), nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("updated_by", Identifier(SUBJECT_CHARS), nullable=True),
    Column("updated_at", DateTime, nullable=False, server_default=func.current_timestamp()),
    PrimaryKeyConstraint("name", name=f"pk_{PREFIX}feature_flags"),
    **MYSQL_OPTIONS,
)

conversations = Table(
    f"{PREFIX}conversations",
    metadata,
    Column("id", Identifier(ID_CHARS), nullable=False),
    Column("user_id", Identifier(SUBJECT_CHARS), nullable=False),
    Column("title", short_text(200), nullable=False),
    Column("created_at", precise_timestamp(), nullable=False),
    Column("updated_at", precise_timestamp(), nullable=False),
    # The project the conversation belongs to (revision 0012); NULL outside projects.
    Column("project_id", Identifier(ID_CHARS), nullable=True),
    # A temporary chat (revision 0017): never listed, searched, recalled, embedded or exported,
    # and deleted by the purge TEMPORARY_CHAT_HOURS after it began (docs/privacy.md).
    Column("temporary", Boolean, nullable=False, server_default=false()),
    # Listed first / left out of the list unless asked for (revision 0020).
    Column("pinned", Boolean, nullable=False, server_default=false()),
    Column("archived", Boolean, nullable=False, server_default=false()),
    PrimaryKeyConstraint("id", name=f"pk_{PREFIX}conversations"),
    Index(f"ix_{PREFIX}conversations_user_updated", "user_id", "updated_at"),
    Index(f"ix_{PREFIX}conversations_project", "project_id", "updated_at"),
    Index(f"ix_{PREFIX}conversations_temporary", "temporary", "created_at"),
    Index(f"ix_{PREFIX}conversations_user_listed", "user_id", "archived", "pinned", "updated_at"),
    **MYSQL_OPTIONS,
)

conversation_messages = Table(
    f"{PREFIX}conversation_messages",
    metadata,
    Column("id", Integer, nullable=False, autoincrement=True),
    Column("conversation_id", Identifier(ID_CHARS), nullable=False),
    Column("turn_id", Identifier(ID_CHARS), nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", long_text(), nullable=False),
    Column("status", String(16), nullable=False, server_default="complete"),
    Column("created_at", precise_timestamp(), nullable=False),
    # The turn that replaced this message's turn (regenerate, edit-and-resend; revision 0008);
    # NULL while the message is part of the current transcript. Superseded rows are kept.
    Column("superseded_by", Identifier(ID_CHARS), nullable=True),
    # An answer's sources (revision 0018, JSON, app/agent/sources.py): the memory its prompt
    # held, the earlier-conversation snippets it was given, the memory changes it made.
    Column("sources", long_text(), nullable=True),
    PrimaryKeyConstraint("id", name=f"pk_{PREFIX}conversation_messages"),
    ForeignKeyConstraint(
        ["conversation_id"],
        [conversations.c.id],
        name=f"fk_{PREFIX}conversation_messages_conversation",
        ondelete="CASCADE",
    ),
    CheckConstraint("role IN ('user', 'assistant')", name=f"ck_{PREFIX}conversation_messages_role"),
    CheckConstraint(
        "status IN ('complete', 'interrupted', 'failed')",
        name=f"ck_{PREFIX}conversation_messages_status",
    ),
    Index(f"ix_{PREFIX}conversation_messages_conversation", "conversation_id", "id"),
    **MYSQL_OPTIONS,
)

# -- memory control (revision 0005): history, proposals, per-user preferences ------------------
# History and proposals hold memory content (a copy of it): DELETE /v1/memory removes them.

memory_changes = Table(
    f"{PREFIX}memory_changes",
    metadata,
    # `seq` orders a user's changes; `id` is the public name (a UUID reveals no counts).
    Column("seq", Integer, nullable=False, autoincrement=True),
    Column("id", Identifier(ID_CHARS), nullable=False),
    Column("user_id", Identifier(SUBJECT_CHARS), nullable=False),
    Column("source", String(16), nullable=False),
    Column("turn_id", Identifier(ID_CHARS), nullable=True),
    Column("conversation_id", Identifier(ID_CHARS), nullable=True),
    Column("undoes", Identifier(ID_CHARS), nullable=True),
    # The MCP client's own name (its `clientInfo.name`, app/memory/provenance.py clip_client).
    Column("client", short_text(CLIENT_CHARS), nullable=True),
    Column("operations", long_text(), nullable=False),  # JSON: [{target, action, before, after}]
    Column("created_at", precise_timestamp(), nullable=False),
    # The project whose scope the change was made in (revision 0012); NULL outside projects.
    Column("project_id", Identifier(ID_CHARS), nullable=True),
    PrimaryKeyConstraint("seq", name=f"pk_{PREFIX}memory_changes"),
    CheckConstraint(
        "source IN ('turn', 'api', 'undo', 'proposal', 'mcp', 'expired', 'sources')",
        name=f"ck_{PREFIX}memory_changes_source",
    ),
    Index(f"ux_{PREFIX}memory_changes_id", "id", unique=True),
    Index(f"ix_{PREFIX}memory_changes_user_seq", "user_id", "seq"),
    Index(f"ix_{PREFIX}memory_changes_project", "project_id", "seq"),
    **MYSQL_OPTIONS,
)

memory_proposals = Table(
    f"{PREFIX}memory_proposals",
    metadata,
    Column("seq", Integer, nullable=False, autoincrement=True),
    Column("id", Identifier(ID_CHARS), nullable=False),
    Column("user_id", Identifier(SUBJECT_CHARS), nullable=False),
    Column("turn_id", Identifier(ID_CHARS), nullable=True),
    Column("conversation_id", Identifier(ID_CHARS), nullable=True),
    # Who proposed it: NULL for a turn (every row before revision 0009), 'mcp' or 'import'.
    Column("source", String(16), nullable=True),
    Column("client", short_text(CLIENT_CHARS), nullable=True),
    Column("batches", long_text(), nullable=False),  # JSON: the staged, pinned batches
    Column("created_at", precise_timestamp(), nullable=False),
    Column("expires_at", precise_timestamp(), nullable=False),
    # The project whose scope the batches were staged in (revision 0012); NULL outside projects.
    Column("project_id", Identifier(ID_CHARS), nullable=True),
    PrimaryKeyConstraint("seq", name=f"pk_{PREFIX}memory_proposals"),
    CheckConstraint(
        "source IS NULL OR source IN ('mcp', 'import')",
        name=f"ck_{PREFIX}memory_proposals_source",
    ),
    Index(f"ux_{PREFIX}memory_proposals_id", "id", unique=True),
    Index(f"ix_{PREFIX}memory_proposals_user_seq", "user_id", "seq"),
    Index(f"ix_{PREFIX}memory_proposals_project", "project_id", "seq"),
    **MYSQL_OPTIONS,
)

memory_preferences = Table(
    f"{PREFIX}memory_preferences",
    metadata,
    Column("user_id", Identifier(SUBJECT_CHARS), nullable=False),
    Column("save_mode", String(8), nullable=False),
    Column("updated_at", precise_timestamp(), nullable=False),
    # Recall of earlier chats (revision 0018); NULL: never chosen, RECALL_CHATS_DEFAULT applies.
    Column("recall_chats", Boolean, nullable=True),
    PrimaryKeyConstraint("user_id", name=f"pk_{PREFIX}memory_preferences"),
    CheckConstraint("save_mode IN ('auto', 'ask')", name=f"ck_{PREFIX}memory_preferences_mode"),
    **MYSQL_OPTIONS,
)

# When entries expire (remember-until, revision 0017): one row per entry that carries an expiry,
# keyed by its document ('user', 'memory' or a project's id) and the SHA-256 of its text (no copy
# of the text). Memory state: written only inside the user's unit of work; forgetting removes it.
memory_expiries = Table(
    f"{PREFIX}memory_expiries",
    metadata,
    Column("user_id", Identifier(SUBJECT_CHARS), nullable=False),
    Column("document", Identifier(ID_CHARS), nullable=False),
    Column("entry_digest", String(64), nullable=False),
    Column("expires_at", precise_timestamp(), nullable=False),
    PrimaryKeyConstraint("user_id", "document", "entry_digest", name=f"pk_{PREFIX}memory_expiries"),
    Index(f"ix_{PREFIX}memory_expiries_expires", "expires_at"),
    **MYSQL_OPTIONS,
)

# -- projects (revision 0012): a person's projects and each project's own memory document ------
# Both are memory state (app/db/writers.py): they are written only inside the user's unit of work.
# A project's document is the `project` target; its history and proposals are the rows of
# amem_memory_changes / amem_memory_proposals that carry its id.

PROJECT_NAME_CHARS = 100

projects = Table(
    f"{PREFIX}projects",
    metadata,
    Column("id", Identifier(ID_CHARS), nullable=False),
    Column("user_id", Identifier(SUBJECT_CHARS), nullable=False),
    Column("name", short_text(PROJECT_NAME_CHARS), nullable=False),
    # Whether the project's turns also see (and may edit) the general `memory` document.
    Column("general_memory", Boolean, nullable=False),
    Column("created_at", precise_timestamp(), nullable=False),
    Column("updated_at", precise_timestamp(), nullable=False),
    PrimaryKeyConstraint("id", name=f"pk_{PREFIX}projects"),
    Index(f"ix_{PREFIX}projects_user_created", "user_id", "created_at"),
    **MYSQL_OPTIONS,
)

project_memory = Table(
    f"{PREFIX}project_memory",
    metadata,
    Column("project_id", Identifier(ID_CHARS), nullable=False),
    Column("user_id", Identifier(SUBJECT_CHARS), nullable=False),
    Column("content", document_text(), nullable=False),
    Column("schema_version", SmallInteger, nullable=False, server_default="1"),
    Column("created_at", DateTime, nullable=False, server_default=func.current_timestamp()),
    Column("updated_at", DateTime, nullable=False, server_default=func.current_timestamp()),
    PrimaryKeyConstraint("project_id", name=f"pk_{PREFIX}project_memory"),
    ForeignKeyConstraint(
        ["project_id"],
        [projects.c.id],
        name=f"fk_{PREFIX}project_memory_project",
        ondelete="CASCADE",
    ),
    Index(f"ix_{PREFIX}project_memory_user", "user_id"),
    **MYSQL_OPTIONS,
)

# -- erasure (revision 0010): one audit row per erased subject, keyed by a keyed hash --------------
# No subject and no content: `subject_hash` is HMAC-SHA256 of the subject under ERASURE_HASH_KEY
# (app/db/erasure_audit.py). `completed_at` stays NULL while an erasure is unfinished (a crash
# halfway): running the erasure again finishes it. A turn's memory commit that finds a row
# erased after the turn began writes nothing.

erasures = Table(
    f"{PREFIX}erasures",
    metadata,
    Column("subject_hash", String(64), nullable=False),
    Column("erased_at", precise_timestamp(), nullable=False),
    Column("completed_at", precise_timestamp(), nullable=True),
    PrimaryKeyConstraint("subject_hash", name=f"pk_{PREFIX}erasures"),
    **MYSQL_OPTIONS,
)

# Full-text search objects (revision 0006, app/conversations/search.py). They are not in the
# metadata because each dialect has its own: the FTS5 table (and its shadow tables) on SQLite,
# a generated tsvector column and its GIN index on PostgreSQL, a FULLTEXT index on MariaDB.
SEARCH_FTS_TABLE = f"{PREFIX}message_search"
SEARCH_VECTOR_COLUMN = "search_vector"
SEARCH_INDEX = f"ix_{PREFIX}conversation_messages_search"
# SQLite's FTS5 table indexes each message's owner as one token, `u` and the hex of the id's
# UTF-8 bytes (letters and digits only: the tokenizer keeps it whole); `owner_token` is the same.
OWNER_TOKEN_SQL = "'u' || hex(user_id)"


# PostgreSQL's tsvector holds the owner as one lexeme, `u` and the md5 of the id (a fixed size).
POSTGRES_OWNER_SQL = "'u' || md5(user_id)"


def owner_token(user_id: str) -> str:
    return "u" + user_id.encode("utf-8").hex()


def postgres_owner_lexeme(user_id: str) -> str:
    return "u" + hashlib.md5(user_id.encode("utf-8"), usedforsecurity=False).hexdigest()


# PostgreSQL (revision 0007): each message also holds its owner's bucket, the first byte of the
# owner id's md5 modulo SEARCH_BUCKETS, and the GIN index is one partial index per bucket. A
# prefix term (`word:*`) collects every posting of its words into a bitmap before meeting the
# owner's lexeme; within a bucket that is the owner's and about 1/16 of everyone else's.
SEARCH_BUCKETS = 16
SEARCH_BUCKET_COLUMN = "search_bucket"
POSTGRES_BUCKET_SQL = f"get_byte(decode(md5(user_id), 'hex'), 0) % {SEARCH_BUCKETS}"


def postgres_search_bucket(user_id: str) -> int:
    """`POSTGRES_BUCKET_SQL` computed here (md5 of the id's UTF-8 bytes, as the server's md5)."""
    return hashlib.md5(user_id.encode("utf-8"), usedforsecurity=False).digest()[0] % SEARCH_BUCKETS


def postgres_bucket_index(bucket: int) -> str:
    """The name of one bucket's GIN index (revision 0007)."""
    return f"{SEARCH_INDEX}_{bucket}"


def postgres_bucket_indexes() -> list[str]:
    """The CREATE INDEX statements of the per-bucket GIN indexes (revision 0007)."""
    return [
        f"CREATE INDEX {postgres_bucket_index(bucket)} ON {conversation_messages.name} "
        f"USING GIN ({SEARCH_VECTOR_COLUMN}) WHERE {SEARCH_BUCKET_COLUMN} = {bucket}"
        for bucket in range(SEARCH_BUCKETS)
    ]


def is_search_object(name: str | None) -> bool:
    """Whether a table, column or index belongs to the search engines (not to the metadata)."""
    return name is not None and (
        name.startswith((SEARCH_FTS_TABLE, SEARCH_INDEX, PGVECTOR_INDEX))
        or name in (SEARCH_VECTOR_COLUMN, SEARCH_BUCKET_COLUMN, PGVECTOR_COLUMN)
    )


# -- semantic search (revision 0016, app/embeddings/) ------------------------------------------
# One vector per message (float32 bytes, unit length; on PostgreSQL with pgvector the `embedding`
# column of type vector instead, outside the metadata) and the queue of messages to embed. Both
# go with their message (ON DELETE CASCADE): every delete path removes them.

PGVECTOR_COLUMN = "embedding"
PGVECTOR_INDEX = f"ix_{PREFIX}message_embeddings_hnsw"

message_embeddings = Table(
    f"{PREFIX}message_embeddings",
    metadata,
    Column("message_id", Integer, nullable=False, autoincrement=False),
    Column("user_id", Identifier(SUBJECT_CHARS), nullable=False),
    Column("model", String(200), nullable=False),
    Column("dimensions", Integer, nullable=False),
    Column("vector", LargeBinary, nullable=True),  # NULL where pgvector's column holds it
    Column("created_at", precise_timestamp(), nullable=False),
    PrimaryKeyConstraint("message_id", name=f"pk_{PREFIX}message_embeddings"),
    ForeignKeyConstraint(
        ["message_id"],
        [conversation_messages.c.id],
        name=f"fk_{PREFIX}message_embeddings_message",
        ondelete="CASCADE",
    ),
    Index(f"ix_{PREFIX}message_embeddings_owner", "user_id", "model"),
    **MYSQL_OPTIONS,
)

embedding_jobs = Table(
    f"{PREFIX}embedding_jobs",
    metadata,
    Column("message_id", Integer, nullable=False, autoincrement=False),
    Column("user_id", Identifier(SUBJECT_CHARS), nullable=False),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("not_before", precise_timestamp(), nullable=False),
    # The worker holding the job and until when: another worker takes it only once expired.
    Column("lease_token", Identifier(ID_CHARS), nullable=True),
    Column("lease_until", precise_timestamp(), nullable=True),
    PrimaryKeyConstraint("message_id", name=f"pk_{PREFIX}embedding_jobs"),
    ForeignKeyConstraint(
        ["message_id"],
        [conversation_messages.c.id],
        name=f"fk_{PREFIX}embedding_jobs_message",
        ondelete="CASCADE",
    ),
    Index(f"ix_{PREFIX}embedding_jobs_due", "not_before"),
    Index(f"ix_{PREFIX}embedding_jobs_user", "user_id"),
    **MYSQL_OPTIONS,
)


# -- operators (revision 0011): per-user limits, usage accounting, the audit log ---------------
# None of these hold memory or message content. Usage rows name their user (deleted with the
# user's data); audit rows name operators and the flags or users they acted on.

# One row per limited caller: the turns counted in the current minute. Every admission updates
# it first, so it is also the caller's lock: two replicas admitting the same user take turns.
limit_counters = Table(
    f"{PREFIX}limit_counters",
    metadata,
    Column("kind", String(8), nullable=False),  # "user" or "eval"
    Column("caller", Identifier(SUBJECT_CHARS), nullable=False),
    Column("window_start", BigInteger, nullable=False),  # minutes since the epoch
    Column("turns", Integer, nullable=False),
    PrimaryKeyConstraint("kind", "caller", name=f"pk_{PREFIX}limit_counters"),
    **MYSQL_OPTIONS,
)

# One row per open stream: a lease that expires on its own, so a crashed worker's slot frees.
stream_slots = Table(
    f"{PREFIX}stream_slots",
    metadata,
    Column("lease_id", Identifier(ID_CHARS), nullable=False),
    Column("kind", String(8), nullable=False),
    Column("caller", Identifier(SUBJECT_CHARS), nullable=False),
    Column("expires_at", precise_timestamp(), nullable=False),
    PrimaryKeyConstraint("lease_id", name=f"pk_{PREFIX}stream_slots"),
    Index(f"ix_{PREFIX}stream_slots_caller", "kind", "caller", "expires_at"),
    **MYSQL_OPTIONS,
)

# The model's reported tokens per user and UTC day, added in each turn's transcript transaction.
usage_daily = Table(
    f"{PREFIX}usage_daily",
    metadata,
    Column("user_id", Identifier(SUBJECT_CHARS), nullable=False),
    Column("day", Date, nullable=False),
    Column("turns", Integer, nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    PrimaryKeyConstraint("user_id", "day", name=f"pk_{PREFIX}usage_daily"),
    Index(f"ix_{PREFIX}usage_daily_day", "day"),
    **MYSQL_OPTIONS,
)

# Operator actions, written in the action's own transaction. `target` names what was acted on
# (a flag, or a keyed hash of an erased subject, never the subject); old and new value are JSON.
audit_log = Table(
    f"{PREFIX}audit_log",
    metadata,
    Column("seq", Integer, nullable=False, autoincrement=True),
    Column("created_at", precise_timestamp(), nullable=False),
    Column("actor", Identifier(SUBJECT_CHARS), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", Identifier(SUBJECT_CHARS), nullable=False),
    Column("old_value", short_text(1000), nullable=True),
    Column("new_value", short_text(1000), nullable=True),
    PrimaryKeyConstraint("seq", name=f"pk_{PREFIX}audit_log"),
    **MYSQL_OPTIONS,
)

# Browser sessions (app/sessions/): the cookie carries a random secret; the row is keyed by its
# SHA-256, so a copy of this table signs nobody in. `refresh_token` and `id_token` (kept for the
# provider's end-session hint) are encrypted with AUTH_SESSION_SECRET; both are NULL in dev mode.
web_sessions = Table(
    f"{PREFIX}web_sessions",
    metadata,
    Column("id_hash", Identifier(64), nullable=False),
    Column("subject", Identifier(SUBJECT_CHARS), nullable=False),
    Column("roles", short_text(1000), nullable=False),
    Column("created_at", precise_timestamp(), nullable=False),
    Column("expires_at", precise_timestamp(), nullable=False),
    # When the provider's access token expires (refreshed before then); NULL in dev mode.
    Column("access_expires_at", precise_timestamp(), nullable=True),
    Column("refresh_token", document_text(), nullable=True),
    Column("id_token", document_text(), nullable=True),
    PrimaryKeyConstraint("id_hash", name=f"pk_{PREFIX}web_sessions"),
    Index(f"ix_{PREFIX}web_sessions_subject", "subject"),
    Index(f"ix_{PREFIX}web_sessions_expires_at", "expires_at"),
    **MYSQL_OPTIONS,
)
